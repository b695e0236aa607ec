"""The ``docker`` exec backend: the executor in a container of its own.

``split`` (the default): the supervisor is the host process that runs the turn (in a deployment, the worker
container: the executor is then its sibling, started through the engine's socket), serving the bundle's tools
on the run's socket; the executor is a container with

* ``--network none`` (only ``lo``), ``--read-only`` root, ``--cap-drop ALL``, ``no-new-privileges``;
* ``--user <uid>:<gid>``: the run's own unprivileged uid from the host's pool, so ``SO_PEERCRED`` on the socket
  names it and the files it writes in ``out/`` are its own;
* the run's limits on the container: memory (and swap, the same), pids, CPUs, a ``/dev/shm`` of
  ``shared_memory_mb``, plus the bootstrap's rlimits inside (CPU seconds, file size, address space);
* exactly three binds: the program folder read-only, ``work/`` and ``out/`` writable, and the socket folder
  read-only (connecting needs no write access to the folder); ``work/`` and ``out/`` are the host's run folders,
  so the run's disk quota (a tmpfs the host mounted there, :mod:`berth.execution.quota`) bounds them here too;
* an environment of ``WORKDIR``, ``OUTPUT_DIR``, ``EXECUTION_ID``, ``BUNDLE_ID`` and the socket path only.

The wall-time limit is the host's: at the deadline the container is killed, and every process of the run with
it. Should the host die first, the container's ``berth.deadline`` label (wall time plus :data:`DEADLINE_GRACE_S`)
lets any host's exec sweep remove it (:meth:`DockerBackend.reap_stale`). Output over the file-size limit stops
the run too (the host reads the output as it comes).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

from berth.execution.limits import MIB, ExecLimits
from berth.execution.payload import launch_environment, supervisor_input
from berth.execution.quota import quota_finding
from berth.execution.sandbox import (
    EXECUTOR_BOOTSTRAP,
    EXECUTOR_FLAGS,
    PROGRAM_NAME,
    SANDBOX_OUTPUT_DIR,
    SANDBOX_PROGRAM_DIR,
    SANDBOX_SOCKET_DIR,
    SANDBOX_WORKDIR,
    SOCKET_NAME,
    DoctorFinding,
    RunFolder,
    SandboxOutcome,
    SandboxRequest,
    executor_environment,
    executor_options,
    signal_of_status,
)
from berth.execution.waits import in_own_thread
from berth.hooks import hookimpl
from berth_docker.engine import (
    CONTAINER_LABEL,
    DEADLINE_LABEL,
    ContainerEnd,
    ContainerSpec,
    EngineError,
    RunContainer,
    client_for,
    reap_expired,
)
from berth_docker.image import build_exec_image, default_context
from berth_exec.runner import launch_lines

BACKEND_NAME: Final = "docker"
Strategy = Literal["split", "combined"]
NANO: Final = 1_000_000_000
DEADLINE_GRACE_S: Final = 120.0
"""How long past its wall time a run's container may live before any host's exec sweep removes it (the host that
started it kills it at the wall time and removes it when it has read its end)."""
DEFAULT_SUPERVISOR_PYTHON: Final = "/opt/berth-host/venv/bin/python"
"""Where the combined strategy expects a Python with Berth and the bundles installed (mounted, or in the image)."""
SUPERVISOR_LOG_DIR: Final = "/run/berth-logs"
"""Where the combined container sees the run's ``logs/`` folder: its supervisor writes ``supervisor.log`` there,
apart from the program's stderr (the executor's mount namespace covers it)."""
SUPERVISOR_LOG: Final = "supervisor.log"


def parse_mount(text: str) -> tuple[str, str, str]:
    """``source:target[:ro|rw]`` → ``(source, target, mode)``; read-only unless ``rw`` is said."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(parts[:2]) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise ValueError(f"mount '{text}' is not source:target[:ro|rw]")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else "ro"


class DockerBackend:
    """Runs each program in a container of the profile's exec image."""

    name = BACKEND_NAME

    def __init__(
        self,
        *,
        image: str = "berth-exec:latest",
        strategy: Strategy = "split",
        cpus: float = 1.0,
        docker_host: str | None = None,
        python: str = "/usr/bin/python3",
        supervisor_python: str = DEFAULT_SUPERVISOR_PYTHON,
        mounts: Sequence[str] = (),
        supervisor_network: str = "host",
    ) -> None:
        self.image = image
        self.strategy: Strategy = strategy
        self.cpus = cpus
        self.docker_host = docker_host
        self.python = python
        self.supervisor_python = supervisor_python
        self.mounts = [parse_mount(mount) for mount in mounts]
        self.supervisor_network = supervisor_network
        self._client: Any = None

    @property
    def runs_supervisor(self) -> bool:
        """``combined`` serves the bundle's tools in the container (the host does for ``split``)."""
        return self.strategy == "combined"

    @property
    def hidden_paths(self) -> tuple[str, ...]:
        """What the combined executor must not see: the folders mounted for the supervisor."""
        return tuple(target for _, target, _ in self.mounts)

    @classmethod
    def from_profile(cls, profile: Mapping[str, Any]) -> DockerBackend:
        """Build from a ``docker`` profile's options."""
        return cls(
            image=profile.get("image", "berth-exec:latest"),
            strategy=profile.get("strategy", "split"),
            cpus=float(profile.get("cpus", 1.0)),
            docker_host=profile.get("docker_host"),
            python=profile.get("python", "/usr/bin/python3"),
            supervisor_python=profile.get("supervisor_python", DEFAULT_SUPERVISOR_PYTHON),
            mounts=profile.get("mounts", ()),
            supervisor_network=profile.get("supervisor_network", "host"),
        )

    @property
    def client(self) -> Any:
        """The Docker client (made on first use, so a profile that is never used never dials the engine)."""
        if self._client is None:
            self._client = client_for(self.docker_host)
        return self._client

    async def run(self, request: SandboxRequest) -> SandboxOutcome:
        """Run the program in its container; on timeout (or cancellation) kill and remove the container."""
        isolation = f"docker-{self.strategy}"
        started = time.monotonic()
        try:
            spec = self.container_spec(request) if self.strategy == "split" else self.combined_spec(request)
            container = RunContainer(self.client, spec)
            await asyncio.to_thread(container.create)
        except EngineError as error:
            return SandboxOutcome(None, None, False, time.monotonic() - started, isolation, failure=str(error))
        try:
            launch = launch_lines(
                request.token, f"{SANDBOX_PROGRAM_DIR}/{PROGRAM_NAME}", request.limits.launch_limits()
            ).encode()
            await asyncio.to_thread(container.start, self.container_input(request, launch))
            logs = request.folder.logs
            limit = request.limits.file_size_mb * MIB
            # the output stream and the wait last as long as the run: each in a thread of its own, not a pool's
            pumping = in_own_thread(container.pump_output, logs / "stdout", logs / "stderr", limit)
            timed_out = False
            try:
                await asyncio.wait_for(asyncio.shield(pumping), request.limits.timeout_s)
            except TimeoutError:
                timed_out = True
                await asyncio.to_thread(container.kill)
                await pumping
            except asyncio.CancelledError:
                await asyncio.to_thread(container.kill)
                raise
            end = await in_own_thread(container.wait)
        except EngineError as error:
            return SandboxOutcome(None, None, False, time.monotonic() - started, isolation, failure=str(error))
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(asyncio.to_thread(container.remove))
        return outcome_of(end, timed_out, time.monotonic() - started, isolation)

    def reap_stale(self) -> int:
        """Remove the run containers past their deadline: the host that started them died mid-run."""
        return reap_expired(self.client, time.time())

    def container_spec(self, request: SandboxRequest) -> ContainerSpec:
        """The executor container of the ``split`` strategy for ``request``."""
        folder = request.folder
        limits = request.limits
        sandbox_socket = f"{SANDBOX_SOCKET_DIR}/{SOCKET_NAME}" if request.with_supervisor else None
        environment = executor_environment(request.exec_id, request.bundle_id, socket_path=sandbox_socket)
        binds = run_binds(folder)
        if request.with_supervisor:
            binds[str(folder.socket_dir)] = {"bind": SANDBOX_SOCKET_DIR, "mode": "ro"}
        python = [self.python, *EXECUTOR_FLAGS, "-c", EXECUTOR_BOOTSTRAP]
        return ContainerSpec(
            image=self.image,
            # env -i: the engine adds PATH, HOME and HOSTNAME to every container; the program sees only ours.
            command=["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in environment.items()), *python],
            user=f"{request.uid}:{request.gid}",
            environment={},
            working_dir=SANDBOX_WORKDIR,
            binds=binds,
            labels=run_labels(request),
            host_config={
                "network_mode": "none",
                "read_only": True,
                "cap_drop": ["ALL"],
                "security_opt": ["no-new-privileges"],
                **self.limit_config(limits),
            },
        )

    def limit_config(self, limits: ExecLimits) -> dict[str, Any]:
        """The run's limits as host-config options: memory (swap the same: none), pids, CPUs, ``/dev/shm``."""
        memory = limits.memory_mb * MIB
        return {
            "mem_limit": memory,
            "memswap_limit": memory,
            "pids_limit": limits.processes,
            "nano_cpus": int(self.cpus * NANO),
            "shm_size": limits.shared_memory_mb * MIB,
            "ipc_mode": "private",
        }

    def container_input(self, request: SandboxRequest, launch: bytes) -> bytes:
        """What the run's container reads on its stdin: the executor's ``launch`` lines, and for ``combined`` the
        supervisor's payload and descriptors before them (never in the container's environment)."""
        if self.strategy == "split":
            return launch
        return supervisor_input(launch_environment(request, executor_options(self)), launch)

    def combined_spec(self, request: SandboxRequest) -> ContainerSpec:
        """The one container of the ``combined`` strategy: :mod:`berth.execution.combined` as root with only the
        capabilities it needs to build the executor's namespaces and drop its uid; its payload comes on stdin
        (:meth:`container_input`), its own log goes to the run's ``logs/supervisor.log``."""
        folder = request.folder
        limits = request.limits
        binds = run_binds(folder)
        binds[str(folder.logs)] = {"bind": SUPERVISOR_LOG_DIR, "mode": "rw"}
        for source, target, mode in self.mounts:
            binds[source] = {"bind": target, "mode": mode}
        log = f"{SUPERVISOR_LOG_DIR}/{SUPERVISOR_LOG}"
        return ContainerSpec(
            image=self.image,
            command=[self.supervisor_python, "-B", "-m", "berth.execution.combined", "--supervisor-log", log],
            user="0:0",
            environment={},
            working_dir="/",
            binds=binds,
            labels=run_labels(request),
            host_config={
                "network_mode": self.supervisor_network,
                "read_only": True,
                "cap_drop": ["ALL"],
                "cap_add": ["SYS_ADMIN", "SETUID", "SETGID"],
                "security_opt": ["no-new-privileges"],
                "tmpfs": {"/tmp": "mode=0700,size=16m", SANDBOX_SOCKET_DIR: "mode=0755,size=1m"},  # noqa: S108
                **self.limit_config(limits),
            },
        )

    def build_image(self, *, base: str, context: str | None, progress: Callable[[str], None]) -> str:
        """Build this profile's image from ``exec/Dockerfile`` (``berth exec build-image``)."""
        built = build_exec_image(
            self.client,
            tag=self.image,
            base=base,
            context=Path(context) if context else default_context(),
            progress=progress,
        )
        return f"built {built.tag} ({built.image_id[:19]}, {built.size_bytes / MIB:.0f} MiB)"

    def doctor(self) -> list[DoctorFinding]:
        """Whether the engine answers and has the exec image."""
        try:
            client = self.client
            version = client.version()
        except Exception as error:  # any failure to reach the engine is the finding
            return [DoctorFinding("Docker engine reachable", False, str(error))]
        findings = [
            DoctorFinding("Docker engine reachable", True, f"engine {version.get('Version')} at {client.api.base_url}")
        ]
        try:
            client.images.get(self.image)
            findings.append(DoctorFinding(f"exec image {self.image}", True, "present"))
        except Exception:  # the SDK raises ImageNotFound or an APIError
            findings.append(DoctorFinding(f"exec image {self.image}", False, "build it with `berth exec build-image`"))
        findings.append(quota_finding())
        findings.append(DoctorFinding("isolation", True, self.isolation_summary()))
        return findings

    def isolation_summary(self) -> str:
        """What the containers of this strategy are granted, as ``berth exec doctor`` says it."""
        if self.strategy == "combined":
            return (
                f"docker-combined: one container on network {self.supervisor_network!r}, read-only root, its "
                "supervisor as root with CAP_SYS_ADMIN, CAP_SETUID and CAP_SETGID (to build the executor's "
                "namespaces and drop its uid); the executor in its own network namespace (lo down), unprivileged, "
                "no capabilities, under Berth's seccomp filter (no user namespaces, mounts, ptrace …); limits on "
                "the container"
            )
        return f"docker-{self.strategy}: --network none, read-only root, no capabilities, limits on the container"


def run_labels(request: SandboxRequest, now: float | None = None) -> dict[str, str]:
    """A run container's labels: its exec id, bundle, and the deadline past which any host's sweep removes it."""
    deadline = (time.time() if now is None else now) + request.limits.timeout_s + DEADLINE_GRACE_S
    return {CONTAINER_LABEL: request.exec_id, "berth.bundle_id": request.bundle_id, DEADLINE_LABEL: f"{deadline:.0f}"}


def run_binds(folder: RunFolder) -> dict[str, dict[str, str]]:
    """The run's folders as the container sees them: the program read-only, ``work/`` and ``out/`` writable."""
    return {
        str(folder.program.parent): {"bind": SANDBOX_PROGRAM_DIR, "mode": "ro"},
        str(folder.work): {"bind": SANDBOX_WORKDIR, "mode": "rw"},
        str(folder.out): {"bind": SANDBOX_OUTPUT_DIR, "mode": "rw"},
    }


def outcome_of(end: ContainerEnd, timed_out: bool, duration: float, isolation: str) -> SandboxOutcome:
    """The sandbox outcome of a container's end. A container killed by its engine exits 128 + the signal."""
    code = end.status_code
    killed_by = signal_of_status(code)
    if end.output_over_limit and not timed_out:
        killed_by = signal.SIGXFSZ
    return SandboxOutcome(
        exit_code=code,
        killed_by=killed_by,
        timed_out=timed_out,
        duration_s=duration,
        isolation=isolation,
        out_of_memory=end.out_of_memory and not timed_out,
    )


@hookimpl
def berth_exec_backends() -> dict[str, Any]:
    """Register ``docker``."""
    return {BACKEND_NAME: DockerBackend.from_profile}
