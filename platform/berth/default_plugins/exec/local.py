"""The ``local`` exec backend: the executor runs on this host in a bubblewrap sandbox.

Isolation, strongest available first (``isolation`` of the profile; ``auto`` picks the first that works):

* ``bwrap``: the process drops to an unprivileged uid/gid of its own (no supplementary groups) and then starts
  bubblewrap, so the kernel uid really is unprivileged and bwrap builds an unprivileged user namespace: new
  private network (only ``lo``), pid, ipc, uts and cgroup namespaces; a root made of read-only binds of ``/usr``
  (plus the merged-usr links), the program folder read-only, ``work/`` and ``out/`` writable, the supervisor's
  socket folder, a fresh ``/proc`` and ``/dev`` with a private ``/dev/shm`` bounded to ``shared_memory_mb`` (for
  multiprocessing's semaphores; it vanishes with the run); no ``/tmp``, no ``/etc``, no home, nothing of the host's
  environment (``--clearenv``). ``--die-with-parent`` and the pid namespace end every process of the run when
  it is killed. The program can create no user namespace of its own (``--disable-userns``) and runs under the
  executor's seccomp filter (``--seccomp``, :mod:`berth.execution.seccomp`): no mounts, namespaces, ptrace,
  keyring, bpf, io_uring, kernel modules …
* ``landlock``: where no sandbox can be built around the executor (no user namespace, no bubblewrap: a Kubernetes
  pod under a restricted security context), the executor bootstrap confines itself before the program runs:
  Landlock (only ``/usr``, the program, ``work/`` and ``out/`` … reachable; no TCP; no signal or abstract socket
  outside the run), Berth's seccomp filter (no socket but ``AF_UNIX``, no leaving the process group) and the
  rlimits (:mod:`berth.default_plugins.exec.landlocked`). It needs no privilege, only a kernel with Landlock ABI
  ``landlock_min_abi`` (6: Linux 6.12) or later; below it every run is refused (``sandbox_failed``), never run
  less confined. The run shares the host's pid and network namespaces (it sees the host's processes in ``/proc``
  and its interfaces, and can reach neither) and, where the host is not root, its uid.
* ``unshare``: when bubblewrap and Landlock are both missing, ``unshare --net --pid --fork --mount-proc`` with the
  same uid drop: no network and a private ``/proc``, but the host's file system stays visible (read-only where the
  uid lacks rights). Weaker, and ``berth exec doctor`` says so.
* ``none``: a plain subprocess with the uid drop and the limits, only when a profile asks for it explicitly;
  the host warns at start-up.

Limits are rlimits the executor bootstrap sets on itself (address space, CPU seconds, processes, file size);
the wall-time limit is the host's: it kills the process group. Every concurrent run on the machine gets a uid of
its own, leased machine-wide (:mod:`berth.execution.uids`), because RLIMIT_NPROC counts all processes of a uid.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import berth_exec
from berth.default_plugins.exec.cgroups import RunCgroup, cgroups_writable, remove_empty_cgroups
from berth.default_plugins.exec.landlocked import (
    MINIMUM_ABI,
    landlock_abi,
    landlock_findings,
    landlock_refusal,
    run_confinement,
    tasks_of_uid,
)
from berth.execution.limits import MIB
from berth.execution.quota import quota_finding
from berth.execution.sandbox import (
    EXECUTOR_BOOTSTRAP,
    EXECUTOR_FLAGS,
    PROGRAM_NAME,
    SANDBOX_OUTPUT_DIR,
    SANDBOX_PACKAGE_DIR,
    SANDBOX_PROGRAM_DIR,
    SANDBOX_SOCKET_DIR,
    SANDBOX_WORKDIR,
    SOCKET_NAME,
    DoctorFinding,
    SandboxOutcome,
    SandboxRequest,
    executor_environment,
)
from berth.execution.seccomp import SeccompUnsupportedError, describe, filter_program, program_pipe
from berth.execution.waits import process_exit
from berth.hooks import hookimpl
from berth_exec.confinement import CONFINEMENT_FAILED, FAILURE_MARK
from berth_exec.runner import launch_lines

logger = logging.getLogger(__name__)

BACKEND_NAME: Final = "local"
Isolation = Literal["auto", "bwrap", "landlock", "unshare", "none"]
USR_LINKS: Final = ("bin", "sbin", "lib", "lib64")
"""Top-level folders that are links into ``/usr`` on a merged-usr system."""
NPROC_ABOVE_PIDS_MAX: Final = 8
"""How far RLIMIT_NPROC is set above the pids cgroup's ``pids.max`` when the run has one (see :meth:`_spawn`)."""


def package_folder() -> Path:
    """The folder of the ``berth_exec`` package on this host (bound read-only into the sandbox)."""
    return Path(berth_exec.__file__).resolve().parent


class LocalBackend:
    """Runs programs on this host under bubblewrap (or the fallbacks above)."""

    name = BACKEND_NAME

    def __init__(
        self,
        *,
        isolation: Isolation = "auto",
        python: str = "/usr/bin/python3",
        use_cgroups: bool = True,
        landlock_min_abi: int = MINIMUM_ABI,
    ) -> None:
        self.requested = isolation
        self.python = python
        self.use_cgroups = use_cgroups and os.geteuid() == 0
        self.landlock_min_abi = landlock_min_abi

    @classmethod
    def from_profile(cls, profile: Mapping[str, Any]) -> LocalBackend:
        """Build from a ``local`` profile's options (``isolation``, ``python``, ``cgroups``, ``landlock_min_abi``)."""
        return cls(
            isolation=profile.get("isolation", "auto"),
            python=profile.get("python", "/usr/bin/python3"),
            use_cgroups=profile.get("cgroups", True),
            landlock_min_abi=profile.get("landlock_min_abi", MINIMUM_ABI),
        )

    @property
    def isolation(self) -> str:
        """The isolation runs really get here: the requested one, or for ``auto`` the strongest available
        (bubblewrap, then Landlock at the profile's ABI, then ``unshare``)."""
        if self.requested != "auto":
            return self.requested
        if bwrap_works():
            return "bwrap"
        return "landlock" if landlock_abi() >= self.landlock_min_abi else "unshare"

    async def run(self, request: SandboxRequest) -> SandboxOutcome:
        """Run the program; on timeout kill its process group (the sandbox's pid namespace goes with it).

        The end is awaited on a pidfd the event loop watches (:func:`~berth.execution.waits.process_exit`), not
        polled (``Popen.wait(timeout=…)`` sleeps in doubling steps and would add up to half a run's time to every
        run) and not in a pool's thread (held for the run's life, it starved the pool when many runs were in flight).
        """
        isolation = self.isolation
        refusal = landlock_refusal(self.landlock_min_abi) if isolation == "landlock" else None
        if refusal is not None:  # refused, never run less confined than the profile says
            return SandboxOutcome(None, None, False, 0.0, isolation, failure=refusal)
        seccomp_fd = program_pipe(filter_program()) if isolation == "bwrap" else None
        try:
            argv, env = self.command(request, isolation, seccomp_fd)
            cgroup = RunCgroup.prepare(request.limits, request.uid, request.exec_id) if self.use_cgroups else None
        except BaseException:
            if seccomp_fd is not None:
                os.close(seccomp_fd)
            raise
        if cgroup is not None:
            argv, joining = cgroup.wrap(argv)
            env = {**env, **joining}
        out_of_memory = process_limit_hit = False
        try:
            outcome = await self._spawn(request, argv, env, isolation, cgroup is not None, seccomp_fd)
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)
            if cgroup is not None:
                out_of_memory = cgroup.out_of_memory()
                process_limit_hit = cgroup.process_limit_hit()
                await asyncio.to_thread(cgroup.remove)
        if out_of_memory and not outcome.timed_out:
            outcome = dataclasses.replace(outcome, out_of_memory=True)
        if process_limit_hit:
            outcome = dataclasses.replace(outcome, process_limit_hit=True)
        return outcome

    def reap_stale(self) -> int:
        """Remove the empty run cgroups a host that died mid-run left (its runs' processes died with it)."""
        return remove_empty_cgroups() if self.use_cgroups and cgroups_writable() else 0

    async def _spawn(
        self,
        request: SandboxRequest,
        argv: list[str],
        env: dict[str, str],
        isolation: str,
        in_cgroup: bool,
        seccomp_fd: int | None,
    ) -> SandboxOutcome:
        folder = request.folder
        program = f"{SANDBOX_PROGRAM_DIR}/{PROGRAM_NAME}" if isolation == "bwrap" else str(folder.program)
        launch_limits = request.limits.launch_limits()
        if in_cgroup:
            # pids.max binds first and counts every refused fork (pids.events), so a hit the program caught is
            # still reported; RLIMIT_NPROC stays a little above it as the backstop.
            launch_limits["processes"] += NPROC_ABOVE_PIDS_MAX
        confinement = None
        if isolation == "landlock":
            confinement = run_confinement(
                folder, python=self.python, package=package_folder(), minimum_abi=self.landlock_min_abi
            )
            if not _owns_uids():  # RLIMIT_NPROC counts every task of the uid, the host's and other runs' too
                launch_limits["processes"] += await asyncio.to_thread(tasks_of_uid, request.uid)
        launch = launch_lines(request.token, program, launch_limits, confinement).encode()
        started = time.monotonic()
        try:
            process = await asyncio.to_thread(_start, argv, env, request, launch, seccomp_fd)
        except OSError as exc:
            return SandboxOutcome(None, None, False, 0.0, isolation, failure=f"{argv[0]}: {exc}")
        ended = asyncio.ensure_future(process_exit(process))
        timed_out = False
        try:
            returncode = await asyncio.wait_for(asyncio.shield(ended), request.limits.timeout_s)
        except TimeoutError:
            timed_out = True
            _kill_group(process.pid)
            returncode = await ended
        except asyncio.CancelledError:
            _kill_group(process.pid)
            raise
        duration = time.monotonic() - started
        exit_code, killed_by = _decode_status(returncode)
        if confinement is not None and exit_code == CONFINEMENT_FAILED:
            failure = confinement_failure(folder.logs / "stderr")
            if failure is not None:
                return SandboxOutcome(None, None, False, duration, isolation, failure=failure)
        return SandboxOutcome(exit_code, killed_by, timed_out, duration, isolation)

    def command(
        self, request: SandboxRequest, isolation: str, seccomp_fd: int | None = None
    ) -> tuple[list[str], dict[str, str]]:
        """The argv and environment that start the executor with ``isolation``; for ``bwrap``, ``seccomp_fd`` is
        the descriptor the child inherits with the seccomp filter (:func:`~berth.execution.seccomp.program_pipe`)."""
        folder = request.folder
        sandbox_socket = f"{SANDBOX_SOCKET_DIR}/{SOCKET_NAME}" if request.with_supervisor else None
        visible = executor_environment(request.exec_id, request.bundle_id, socket_path=sandbox_socket)
        python = [self.python, *EXECUTOR_FLAGS, "-c", EXECUTOR_BOOTSTRAP]
        if isolation == "bwrap":
            argv = ["bwrap", "--unshare-all", *hardening_arguments(seccomp_fd)]
            argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv"]
            argv += [*system_root_arguments(), "--proc", "/proc", "--dev", "/dev"]
            argv += ["--size", str(request.limits.shared_memory_mb * MIB), "--tmpfs", "/dev/shm"]  # noqa: S108 - the sandbox's own
            argv += ["--ro-bind", str(package_folder()), f"{SANDBOX_PACKAGE_DIR}/berth_exec"]
            argv += ["--ro-bind", str(folder.program.parent), SANDBOX_PROGRAM_DIR]
            argv += ["--bind", str(folder.work), SANDBOX_WORKDIR, "--bind", str(folder.out), SANDBOX_OUTPUT_DIR]
            if request.with_supervisor:
                argv += ["--bind", str(folder.socket_dir), SANDBOX_SOCKET_DIR]
            argv += ["--remount-ro", "/"]
            for key, value in visible.items():
                argv += ["--setenv", key, value]
            argv += ["--chdir", SANDBOX_WORKDIR, "--", *python]
            return argv, {}
        # landlock, unshare and none see the host's paths: point the variables at the real folders.
        visible = executor_environment(
            request.exec_id,
            request.bundle_id,
            socket_path=str(folder.socket) if request.with_supervisor else None,
            workdir=str(folder.work),
            output_dir=str(folder.out),
        )
        bootstrap = EXECUTOR_BOOTSTRAP.replace(repr(SANDBOX_PACKAGE_DIR), repr(str(package_folder().parent)))
        python = [self.python, *EXECUTOR_FLAGS, "-c", bootstrap]
        if isolation == "unshare":
            unshare = ["unshare", "--user", "--net", "--pid", "--ipc", "--uts", "--mount", "--fork", "--mount-proc"]
            return [*unshare, "--kill-child", "--", *python], visible
        return python, visible

    def doctor(self) -> list[DoctorFinding]:
        """Which isolation runs get here (``auto``: the strongest that works) and what it needs: bubblewrap and root
        for ``bwrap``, a Landlock ABI for ``landlock``; the sandbox's Python, cgroups and the disk quota."""
        isolation = self.isolation
        findings = [
            DoctorFinding(
                "running as root",
                os.geteuid() == 0 or isolation == "landlock",
                "a uid of its own for each run"
                if os.geteuid() == 0
                else f"not root: runs share this process's uid {os.getuid()}"
                + (", separated from it by Landlock and seccomp" if isolation == "landlock" else ""),
            )
        ]
        if isolation in ("bwrap", "unshare"):
            findings.append(
                DoctorFinding("bubblewrap installed", shutil.which("bwrap") is not None, "apt-get install bubblewrap")
            )
            if shutil.which("bwrap"):
                findings.append(
                    DoctorFinding(
                        "bubblewrap sandbox starts", bwrap_works(), "unprivileged user namespaces must be allowed"
                    )
                )
                findings.append(seccomp_finding())
        if isolation in ("landlock", "unshare") or self.requested == "auto":
            findings += landlock_findings(self.landlock_min_abi)
        findings.append(DoctorFinding("python in the sandbox", Path(self.python).is_file(), self.python))
        findings.append(
            DoctorFinding(
                "cgroup v1 limits (memory of all processes, pids, CPU)",
                self.use_cgroups and cgroups_writable(),
                "writable" if cgroups_writable() else "/sys/fs/cgroup/{memory,pids,cpu} not writable: rlimits only",
            )
        )
        findings.append(quota_finding())
        findings.append(isolation_finding(isolation, self.requested, self.landlock_min_abi))
        return findings


ISOLATION_SUMMARY: Final = {
    "bwrap": "own user, network, pid and mount namespaces, a root of /usr only, seccomp",
    "landlock": "Landlock and seccomp on the host's namespaces{uid}: files beneath /usr, the program, work/ and out/ "
    "only; no TCP, UDP or signals outside the run",
    "unshare": "own network and pid namespaces, but the host's file system stays visible to the program",
    "none": "a plain subprocess, for trusted code only",
}


def isolation_finding(isolation: str, requested: str, minimum_abi: int) -> DoctorFinding:
    """``berth exec doctor``'s line saying which isolation is in force, and whether it is a sandbox at all."""
    uid = "" if os.geteuid() == 0 else f", the host's uid {os.getuid()}"
    summary = ISOLATION_SUMMARY[isolation].format(uid=uid)
    ok = isolation == "bwrap" or (isolation == "landlock" and landlock_refusal(minimum_abi) is None)
    return DoctorFinding("isolation", ok, f"{isolation} (requested {requested}): {summary}")


def confinement_failure(stderr: Path) -> str | None:
    """What the bootstrap said when it could not confine itself (:data:`FAILURE_MARK`), from the run's stderr."""
    try:
        with open(stderr, encoding="utf-8", errors="replace") as handle:
            first = handle.readline(4096)
    except OSError:
        return None
    if not first.startswith(FAILURE_MARK):
        return None  # the status is the program's own (it never gets to run after a failed confinement)
    return first[len(FAILURE_MARK) :].strip() or "no reason given"


def _owns_uids() -> bool:
    """Whether this host gives each run a uid of its own (root), rather than sharing its own uid with them."""
    return os.geteuid() == 0


def hardening_arguments(seccomp_fd: int | None) -> list[str]:
    """bwrap arguments that keep the program from the kernel's larger surface: no user namespace of its own
    (``--disable-userns`` needs the sandbox's own, ``--unshare-user``) and, given its descriptor, the seccomp
    filter."""
    arguments = ["--unshare-user", "--disable-userns"]
    if seccomp_fd is not None:
        arguments += ["--seccomp", str(seccomp_fd)]
    return arguments


def seccomp_finding() -> DoctorFinding:
    """``berth exec doctor``'s line on the seccomp filter: whether this architecture has one, what it refuses."""
    try:
        detail = describe()
    except SeccompUnsupportedError as error:
        return DoctorFinding("seccomp filter and no nested user namespaces", False, str(error))
    return DoctorFinding("seccomp filter and no nested user namespaces", bwrap_works(), detail)


def system_root_arguments() -> list[str]:
    """bwrap arguments for a root holding only ``/usr`` (read-only) and the merged-usr links into it."""
    arguments = ["--ro-bind", "/usr", "/usr"]
    for link in USR_LINKS:
        if Path(f"/{link}").is_symlink():
            arguments += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
        elif Path(f"/{link}").is_dir():
            arguments += ["--ro-bind", f"/{link}", f"/{link}"]
    return arguments


_bwrap_state: dict[str, bool] = {}
_bwrap_lock = threading.Lock()


def bwrap_works() -> bool:
    """Whether ``bwrap`` is installed and can build a sandbox here (checked once per process)."""
    with _bwrap_lock:
        if "works" not in _bwrap_state:
            path = shutil.which("bwrap")
            ok = False
            if path:
                ok = _bwrap_probe(path)
            _bwrap_state["works"] = ok
        return _bwrap_state["works"]


def _bwrap_probe(path: str) -> bool:
    """Whether bwrap starts ``true`` in a sandbox hardened as the runs' are (user namespaces off, seccomp on)."""
    try:
        seccomp_fd = program_pipe(filter_program())
    except SeccompUnsupportedError:
        return False
    probe = [path, "--unshare-all", *hardening_arguments(seccomp_fd), *system_root_arguments()]
    try:
        done = subprocess.run(  # noqa: S603 - a fixed probe
            [*probe, "--die-with-parent", "/usr/bin/true"],
            capture_output=True,
            timeout=10,
            check=False,
            pass_fds=(seccomp_fd,),
        )
        return done.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        os.close(seccomp_fd)


def _start(
    argv: list[str], env: dict[str, str], request: SandboxRequest, launch: bytes, seccomp_fd: int | None
) -> subprocess.Popen[bytes]:
    """Start the executor as the run's uid in a process group of its own, and hand it the launch lines (and the
    seccomp filter's descriptor, inherited: bwrap reads it).

    ``subprocess.Popen`` in a worker thread, not asyncio's subprocess API: uvloop (what uvicorn runs on) refuses
    ``user``/``group``/``process_group``, and a fork must not block the host's event loop.
    """
    folder = request.folder
    stdout, stderr = (_log_file(folder.logs / name) for name in ("stdout", "stderr"))
    try:
        process = subprocess.Popen(  # noqa: S603 - argv is built here, the program is a file
            argv,
            stdin=subprocess.PIPE,
            stdout=stdout,
            stderr=stderr,
            env=env,
            cwd=folder.work,
            **_identity(request),
            process_group=0,
            pass_fds=() if seccomp_fd is None else (seccomp_fd,),
        )
    finally:
        os.close(stdout)
        os.close(stderr)
    assert process.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        process.stdin.write(launch)  # a few hundred bytes: the pipe's buffer takes them at once
        process.stdin.close()
    return process


def _identity(request: SandboxRequest) -> dict[str, Any]:
    """The uid switch of the executor: to the run's own uid with no groups where this host is root; nothing where
    it is not (the run keeps the host's uid, and dropping supplementary groups would need ``CAP_SETGID``)."""
    if not _owns_uids():
        return {}
    return {"user": request.uid, "group": request.gid, "extra_groups": []}


def _log_file(path: Path) -> int:
    """A file descriptor the executor writes its stdout or stderr through (the host reads the file after)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _decode_status(returncode: int) -> tuple[int | None, int | None]:
    """``(exit code, signal)``: a negative code is a signal; bwrap reports its child's signal as 128 + n."""
    if returncode < 0:
        return None, -returncode
    if returncode > 128 and returncode - 128 in signal.Signals._value2member_map_:
        return returncode, returncode - 128
    return returncode, None


@hookimpl
def berth_exec_backends() -> dict[str, Any]:
    """Register ``local``."""
    return {BACKEND_NAME: LocalBackend.from_profile}
