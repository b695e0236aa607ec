"""What an exec backend is given and returns, and the protocol its factory builds.

Every backend gets the same prepared run folder::

    <run>/work/       the program's working directory (WORKDIR), writable by the executor
    <run>/out/        files to hand back (OUTPUT_DIR), writable by the executor
    <run>/program/    main.py, the program; read-only for the executor
    <run>/sock/       supervisor.sock, when the bundle has tools to serve
    <run>/logs/       stdout and stderr, written through descriptors the executor inherits

and returns a :class:`SandboxOutcome`; :mod:`berth.execution.runs` turns it into the envelope.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from berth.execution.limits import ExecLimits

SANDBOX_ROOT = "/workspace"
SANDBOX_WORKDIR = f"{SANDBOX_ROOT}/work"
SANDBOX_OUTPUT_DIR = f"{SANDBOX_ROOT}/out"
SANDBOX_PROGRAM_DIR = f"{SANDBOX_ROOT}/program"
SANDBOX_SOCKET_DIR = "/run/berth"
SANDBOX_PACKAGE_DIR = "/opt/berth"
PROGRAM_NAME = "main.py"
EXECUTOR_BOOTSTRAP = (
    f"import sys; sys.path.insert(0, {SANDBOX_PACKAGE_DIR!r}); from berth_exec.runner import main; main()"
)
"""What ``python3 -I -B -u -c`` runs first in every executor: :mod:`berth_exec.runner` from the package folder."""
EXECUTOR_FLAGS = ("-I", "-B", "-u")
"""The interpreter flags of every executor: isolated, no bytecode files, and unbuffered stdout and stderr (``-u``),
so what a program printed before a kill (timeout, a limit) is in the logs and the envelope, not lost in a buffer."""


def executor_environment(
    exec_id: str,
    bundle_id: str,
    *,
    socket_path: str | None,
    workdir: str = SANDBOX_WORKDIR,
    output_dir: str = SANDBOX_OUTPUT_DIR,
) -> dict[str, str]:
    """The executor's whole environment, the same in every backend: ``WORKDIR``, ``OUTPUT_DIR``,
    ``EXECUTION_ID``, ``BUNDLE_ID`` and, when tools are served, ``SUPERVISOR_SOCKET_PATH``; nothing else."""
    environment = {"WORKDIR": workdir, "OUTPUT_DIR": output_dir, "EXECUTION_ID": exec_id, "BUNDLE_ID": bundle_id}
    if socket_path is not None:
        environment["SUPERVISOR_SOCKET_PATH"] = socket_path
    return environment


SOCKET_NAME = "supervisor.sock"


@dataclass(frozen=True, slots=True)
class RunFolder:
    """The folders of one run on the host."""

    root: Path

    @property
    def work(self) -> Path:
        """``work/``: the program's working directory."""
        return self.root / "work"

    @property
    def out(self) -> Path:
        """``out/``: the files the program hands back."""
        return self.root / "out"

    @property
    def program(self) -> Path:
        """``program/main.py``."""
        return self.root / "program" / PROGRAM_NAME

    @property
    def socket_dir(self) -> Path:
        """The folder of the supervisor's socket."""
        return self.root / "sock"

    @property
    def socket(self) -> Path:
        """The supervisor's socket."""
        return self.socket_dir / SOCKET_NAME

    @property
    def logs(self) -> Path:
        """Where stdout and stderr are written."""
        return self.root / "logs"


@dataclass(frozen=True, slots=True)
class SandboxRequest:
    """One program to run: its folder, identity, token and limits."""

    exec_id: str
    bundle_id: str
    folder: RunFolder
    token: str
    limits: ExecLimits
    uid: int
    gid: int
    with_supervisor: bool
    supervisor_environment: Mapping[str, str] = field(default_factory=dict)
    """For a backend that runs the supervisor itself: ``BERTH_EXEC_PAYLOAD`` and the filtered descriptors
    (:mod:`berth.execution.payload`); empty when the host serves the tools or there are none."""


@dataclass(frozen=True, slots=True)
class SandboxOutcome:
    """How the program ended."""

    exit_code: int | None
    killed_by: int | None
    timed_out: bool
    duration_s: float
    isolation: str
    failure: str | None = None
    """Set when the sandbox itself could not start (the program never ran)."""
    out_of_memory: bool = False
    """The kernel killed a process of the run for going over the run's memory limit (cgroup, container)."""
    process_limit_hit: bool = False
    """The kernel refused a process of the run a fork for going over the run's process limit (the pids cgroup counts
    these), even if the program caught the error and ended normally."""
    disk_full: bool = False
    """``work/`` and ``out/`` were full at the run's end (their quota tmpfs had no block or inode left): the host
    checks it (:mod:`berth.execution.quota`), whichever backend ran the program."""
    stopped: str | None = None
    """Set when something outside the run stopped it before the program ended (an ECS task stopped by the
    scheduler, a spot interruption): why."""


def signal_of_status(code: int | None) -> int | None:
    """The signal behind a container's or shell's exit status ``128 + n`` (None for a plain exit)."""
    if code is None or code <= 128:
        return None
    number = code - 128
    return number if number in signal.Signals._value2member_map_ else None


@dataclass(frozen=True, slots=True)
class DoctorFinding:
    """One line of ``berth exec doctor``: what was checked, whether it holds, and what to do if not."""

    check: str
    ok: bool
    detail: str


class ExecBackend(Protocol):
    """Runs a prepared program in isolation. Built by a ``berth_exec_backends`` factory from its profile.

    A backend with ``runs_supervisor = True`` (the docker combined strategy, fargate) serves the bundle's tools
    itself, from the request's ``supervisor_environment``; for the others the host serves them on the run's socket.
    """

    name: str

    async def run(self, request: SandboxRequest) -> SandboxOutcome:
        """Run ``request``'s program to its end or its limits; kill everything it started on timeout."""
        ...

    def doctor(self) -> list[DoctorFinding]:
        """What isolation this machine really gives this backend, and what is missing."""
        ...


@runtime_checkable
class ImageBuilding(Protocol):
    """A backend whose runs need an image it can build (``berth exec build-image``)."""

    image: str

    def build_image(self, *, base: str, context: str | None, progress: Callable[[str], None]) -> str:
        """Build the profile's exec image on ``base`` from ``context`` (default: the checkout's ``exec/``),
        reporting each line of progress; return a one-line summary (tag, id, size)."""
        ...


@runtime_checkable
class Reaping(Protocol):
    """A backend that can find and remove what a host that died mid-run left running (the exec sweep calls it)."""

    def reap_stale(self) -> int:
        """Remove this backend's leftovers of runs whose host is gone (containers past their wall time, empty
        cgroups); return how many were removed. Runs of live hosts are never touched."""
        ...


def executor_options(backend: object) -> dict[str, Any]:
    """How a backend that runs the supervisor itself wants the executor started (the :class:`LaunchPayload`
    fields ``executor_python``, ``hidden_paths`` and ``executor_namespaces``), from its ``python``,
    ``hidden_paths`` and ``executor_namespaces`` attributes where it has them."""
    options: dict[str, Any] = {
        "hidden_paths": tuple(getattr(backend, "hidden_paths", ())),
        "executor_namespaces": bool(getattr(backend, "executor_namespaces", True)),
    }
    python = getattr(backend, "python", None)
    if isinstance(python, str):
        options["executor_python"] = python
    return options


def runs_own_supervisor(backend: ExecBackend) -> bool:
    """Whether ``backend`` serves the bundle's tools itself (``runs_supervisor = True``) rather than the host."""
    return bool(getattr(backend, "runs_supervisor", False))


def writes_run_folder(backend: ExecBackend) -> bool:
    """Whether ``backend``'s program writes this host's run folder, so the run's disk quota is mounted here; not
    for a backend with ``own_storage = True`` (fargate: the program writes its task's ephemeral storage)."""
    return not getattr(backend, "own_storage", False)
