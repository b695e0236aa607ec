"""Isolated execution, the trusted half: run model-written code in a sandbox and serve it the bundle's tools.

* :mod:`.envelope` — the result every backend returns (``ok``, ``exit_code``, ``error``, artifacts, tails …).
* :mod:`.limits` — the limits a run gets from its exec profile, and which one ended it.
* :mod:`.supervisor` — the Unix-socket server that answers the executor's tool calls (token, peer uid,
  allow-list, per-call timeout, payload cap, per-run caps on connections and buffered bytes).
* :mod:`.frames` — reading the executor's frames within a run's allowance and deadlines.
* :mod:`.sandbox` — what a backend is given (:class:`SandboxRequest`) and returns (:class:`SandboxOutcome`),
  and the :class:`ExecBackend` protocol that ``berth_exec_backends`` factories build.
* :mod:`.runs` — one run end to end: folders, program, supervisor, backend, artifacts, envelope.

The sandbox side (the executor bootstrap and the wire protocol) is the stdlib-only ``berth_exec`` package.
"""
