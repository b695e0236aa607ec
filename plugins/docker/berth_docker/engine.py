"""The Docker engine, through the ``docker`` SDK: a client, and one container's life from create to removal.

A run's container is created with stdin open and attached *before* it starts (one hijacked connection carries
stdin in and stdout/stderr out), so the launch lines (which hold the run's token) reach the bootstrap on stdin,
never in the container's environment, command line or file system, and the output is read by the host as it is
written: the host copies it into the run's log files and stops the container when either goes over the run's
file-size limit (the container's own log driver is ``none``, so nothing piles up in the engine either).

The SDK is imported by the first client made (:func:`client_for`), not with the plugin module the host loads at
start-up; the methods here run on a client, so it is loaded by then.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from berth.config.environment import docker_host

if TYPE_CHECKING:
    import docker

CONTAINER_LABEL = "berth.exec_id"
"""Every container the backend starts carries the run's exec id under this label (``docker ps --filter``)."""
DEADLINE_LABEL = "berth.deadline"
"""When the run's container must be gone (Unix time, seconds): its wall time plus a grace. A live host kills and
removes it before; past it the host that started it is dead, and any host's exec sweep removes it."""


class EngineError(Exception):
    """The engine refused or could not be reached; the message says which and what to do."""


def client_for(base_url: str | None) -> docker.DockerClient:
    """A client for ``base_url`` (a profile's ``docker_host``), else ``DOCKER_HOST``, else the default socket."""
    import docker
    from docker.errors import DockerException

    url = base_url or docker_host() or "unix:///var/run/docker.sock"
    try:
        return docker.DockerClient(base_url=url, timeout=60)
    except DockerException as error:
        raise EngineError(f"cannot reach the Docker engine at {url}: {error}") from None


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """Everything a run's container is created with."""

    image: str
    command: list[str]
    user: str | None
    environment: Mapping[str, str]
    working_dir: str
    binds: Mapping[str, Mapping[str, str]]
    labels: Mapping[str, str]
    host_config: Mapping[str, Any]
    """Keyword arguments of ``APIClient.create_host_config`` (network, capabilities, limits …)."""


@dataclass(frozen=True, slots=True)
class ContainerEnd:
    """How a container ended."""

    status_code: int | None
    out_of_memory: bool
    output_over_limit: bool


class RunContainer:
    """One container: created and attached, then started with the launch bytes on its stdin, then awaited."""

    def __init__(self, client: docker.DockerClient, spec: ContainerSpec) -> None:
        self.api = client.api
        self.spec = spec
        self.container_id: str | None = None
        self._attached: Any = None
        self._output_over_limit = threading.Event()

    def create(self) -> None:
        """Create the container and attach to its stdio (it does not run yet)."""
        from docker.errors import APIError, DockerException, ImageNotFound

        spec = self.spec
        try:
            host_config = self.api.create_host_config(
                binds={source: dict(bind) for source, bind in spec.binds.items()},
                log_config={"type": "none"},
                **spec.host_config,
            )
            config = self.api.create_container_config(
                spec.image,
                spec.command,
                user=spec.user,
                stdin_open=True,
                environment=dict(spec.environment),
                working_dir=spec.working_dir,
                labels=dict(spec.labels),
                host_config=host_config,
            )
            config["StdinOnce"] = True  # the bootstrap's stdin ends when the host has written the launch lines
            created = self.api.create_container_from_config(config)
        except ImageNotFound:
            raise EngineError(
                f"the exec image '{spec.image}' is not on this Docker engine: build it with `berth exec build-image`"
            ) from None
        except (APIError, DockerException) as error:
            raise EngineError(f"the Docker engine refused the executor container: {_explain(error)}") from None
        self.container_id = created["Id"]
        try:
            self._attached = self.api.attach_socket(
                self.container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
        except (APIError, DockerException) as error:
            self.remove()  # created but unusable: it must not stay behind
            raise EngineError(f"could not attach to the executor container: {_explain(error)}") from None

    def start(self, stdin: bytes) -> None:
        """Start the container and write ``stdin`` to it, then close its stdin."""
        from docker.errors import APIError, DockerException

        try:
            self.api.start(self.container_id)
        except (APIError, DockerException) as error:
            raise EngineError(f"the executor container did not start: {_explain(error)}") from None
        raw: socket.socket = self._attached._sock
        with contextlib.suppress(OSError):
            raw.sendall(stdin)
            raw.shutdown(socket.SHUT_WR)

    def pump_output(self, stdout: Path, stderr: Path, limit_bytes: int) -> None:
        """Copy the container's stdout and stderr into files until it ends; kill it when either exceeds
        ``limit_bytes`` (blocking: run it in a thread)."""
        from docker.utils.socket import STDERR, STDOUT, frames_iter

        written = {STDOUT: 0, STDERR: 0}
        with open(stdout, "wb") as out, open(stderr, "wb") as err:
            files: dict[int, BinaryIO] = {STDOUT: out, STDERR: err}
            try:
                for stream, data in frames_iter(self._attached, tty=False):
                    target = files.get(stream)
                    if target is None or not data:
                        continue
                    room = limit_bytes - written[stream]
                    target.write(data[: max(room, 0)])
                    written[stream] += len(data)
                    if written[stream] > limit_bytes and not self._output_over_limit.is_set():
                        # killed from another thread: this one keeps draining, or the engine, blocked on a full
                        # stream, would not finish the kill
                        self._output_over_limit.set()
                        threading.Thread(target=self.kill, daemon=True).start()
            except OSError:
                return

    def kill(self) -> None:
        """SIGKILL the container (every process of the run goes with it); quiet when it already ended."""
        from docker.errors import APIError, DockerException, NotFound

        if self.container_id is None:
            return
        with contextlib.suppress(NotFound, APIError, DockerException):
            self.api.kill(self.container_id)

    def wait(self) -> ContainerEnd:
        """The container's end (after it ended): status code, and whether the kernel killed it for memory."""
        from docker.errors import APIError, DockerException

        try:
            status = self.api.wait(self.container_id)
            state = self.api.inspect_container(self.container_id)["State"]
        except (APIError, DockerException) as error:
            raise EngineError(f"lost the executor container: {_explain(error)}") from None
        return ContainerEnd(
            status_code=status.get("StatusCode"),
            out_of_memory=bool(state.get("OOMKilled")),
            output_over_limit=self._output_over_limit.is_set(),
        )

    def remove(self) -> None:
        """Remove the container (forced) and close the attach connection."""
        from docker.errors import APIError, DockerException, NotFound

        if self._attached is not None:
            with contextlib.suppress(OSError):
                self._attached.close()
        if self.container_id is not None:
            with contextlib.suppress(NotFound, APIError, DockerException):
                self.api.remove_container(self.container_id, force=True)


def _explain(error: Exception) -> str:
    explanation = getattr(error, "explanation", None)
    return str(explanation or error)


def reap_expired(client: docker.DockerClient, now: float) -> int:
    """Remove (forced: killed first) every ``berth.exec_id`` container whose ``berth.deadline`` is before ``now``;
    return how many. A container without a readable deadline is left alone."""
    from docker.errors import APIError, DockerException, NotFound

    try:
        found = client.api.containers(all=True, filters={"label": CONTAINER_LABEL})
    except Exception as error:  # APIError, DockerException, or the transport's own (engine down)
        raise EngineError(f"cannot list the exec containers: {_explain(error)}") from None
    removed = 0
    for container in found:
        try:
            deadline = float((container.get("Labels") or {})[DEADLINE_LABEL])
        except (KeyError, TypeError, ValueError):
            continue
        if deadline >= now:
            continue
        with contextlib.suppress(NotFound, APIError, DockerException):
            client.api.remove_container(container["Id"], force=True)
            removed += 1
    return removed
