"""Berth's ``docker`` exec backend: the executor in a locked-down container of a local or remote Docker engine.

* :mod:`berth_docker.backend` — the backend (``split`` and ``combined`` strategies) and its ``berth_exec_backends``
  registration;
* :mod:`berth_docker.engine` — the Docker client and one container's life (create, attach, start, wait, kill);
* :mod:`berth_docker.image` — ``berth exec build-image``: the exec image from ``exec/Dockerfile``.
"""
