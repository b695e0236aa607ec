"""The combined entry: supervisor and executor in one container, ``python -m berth.execution.combined``.

The container (docker ``combined`` strategy) starts this as root with ``CAP_SYS_ADMIN``, ``CAP_SETUID`` and
``CAP_SETGID`` only, given on its stdin ``BERTH_EXEC_PAYLOAD`` and the run's descriptors as one JSON line, then the
executor's launch lines (:func:`berth.execution.payload.supervisor_input`: nothing of the run is in the container's
environment, which ``docker inspect`` shows and ``/proc/<pid>/environ`` keeps). With ``--supervisor-log FILE`` its
own stderr (the supervisor's logs, a tool's warnings) goes to ``FILE`` and the executor alone writes the run's
stderr. It

1. serves the bundle's tools on the payload's socket (:func:`berth.execution.supervisor_process.supervising`),
   from descriptors materialized in a private folder, when the payload names descriptors;
2. starts the executor as a child that, before it runs anything, enters a new **network** namespace (only a
   down ``lo``: nothing is reachable, not even the supervisor's network) and a new **mount** namespace in which an
   empty read-only tmpfs covers ``/tmp`` (the materialized descriptors) and every ``hidden_paths`` folder (the
   supervisor's own Python, the supervisor's log), then drops to the payload's unprivileged uid with no groups and
   ``no_new_privs``, and installs the executor's seccomp filter (:mod:`berth.execution.seccomp`: the container's
   ``CAP_SYS_ADMIN`` relaxed Docker's own profile, so without it the program could make a user namespace of its own
   and mount, or ptrace, keyctl, bpf …); its environment is exactly ``WORKDIR``, ``OUTPUT_DIR``,
   ``EXECUTION_ID``, ``BUNDLE_ID`` and the socket path;
3. hands the launch lines on, waits for the executor and exits with its status (``128 + n`` for a signal).

The wall-time limit stays the host's: it kills the container. Memory, pids and CPU are the container's limits
(supervisor and executor together); the bootstrap's rlimits bound the executor inside.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from berth.execution import seccomp
from berth.execution.payload import DESCRIPTOR_VARIABLES, PAYLOAD_VARIABLE, LaunchPayload, read_supervisor_input
from berth.execution.sandbox import EXECUTOR_BOOTSTRAP, EXECUTOR_FLAGS, executor_environment
from berth.execution.supervisor_process import SupervisorStartError, supervising
from berth.execution.waits import process_exit

CLONE_NEWNS: Final = 0x00020000
CLONE_NEWNET: Final = 0x40000000
MS_RDONLY: Final = 0x1
MS_NOSUID: Final = 0x2
MS_NODEV: Final = 0x4
MS_NOEXEC: Final = 0x8
MS_REC: Final = 0x4000
MS_PRIVATE: Final = 0x40000
PR_SET_NO_NEW_PRIVS: Final = 38
ISOLATION_FAILED: Final = 125
"""The combined entry's status when the executor could not be isolated (so the program never ran)."""
ISOLATION_FAILURE: Final = (
    "the executor could not be isolated: its own network and mount namespaces need CAP_SYS_ADMIN (and the uid "
    "drop CAP_SETUID/CAP_SETGID); where the container or task cannot have them, set executor_namespaces: false"
)


def isolate_child(uid: int, gid: int, hidden: Sequence[str], namespaces: bool = True) -> Callable[[], None]:
    """The executor child's first steps (run between fork and exec): new network and mount namespaces, the
    hidden folders covered (unless ``namespaces`` is off: where the task's own network is the boundary), then the
    uid drop, ``no_new_privs`` and the seccomp filter. Any failure aborts the exec, so the program never runs
    half-isolated; :class:`~berth.execution.seccomp.SeccompUnsupportedError` when this architecture has no filter."""
    libc = ctypes.CDLL(None, use_errno=True)
    install_filter = seccomp.installer(seccomp.filter_program())  # built before the fork: the child only calls it
    # the mounts first: one may lie under /tmp (a checkout in /tmp), which is gone once /tmp is covered
    paths = [path.encode() for path in [*hidden, "/tmp"]]  # noqa: S108 - the container's own /tmp

    def check(result: int, what: str) -> None:
        if result != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"{what}: {os.strerror(error)}")

    def isolate() -> None:
        if namespaces:
            check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET), "unshare")
            check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
            for path in paths:
                flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
                check(libc.mount(b"tmpfs", path, b"tmpfs", flags, b"size=4k,mode=0555"), f"cover {path.decode()}")
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        install_filter()

    return isolate


def start_executor(
    payload: LaunchPayload, launch: bytes, supervised: bool, stderr: int | None = None, hidden: Sequence[str] = ()
) -> subprocess.Popen[bytes] | None:
    """Start the executor child with ``launch`` on its stdin (and ``stderr`` as its stderr, default this process's);
    None when it could not be isolated (it never ran; why is on this process's stderr). ``hidden`` are folders
    covered besides the payload's ``hidden_paths``."""
    uid = payload.executor_uid if payload.executor_uid is not None else 65534
    try:
        isolate = isolate_child(uid, uid, [*payload.hidden_paths, *hidden], payload.executor_namespaces)
        process = subprocess.Popen(  # noqa: S603 - argv is fixed here; the program is a file
            [payload.executor_python, *EXECUTOR_FLAGS, "-c", EXECUTOR_BOOTSTRAP],
            stdin=subprocess.PIPE,
            env=executor_environment(
                payload.exec_id, payload.bundle_id, socket_path=payload.socket_path if supervised else None
            ),
            cwd="/",
            stderr=stderr,
            preexec_fn=isolate,
            close_fds=True,
        )
    except (subprocess.SubprocessError, seccomp.SeccompUnsupportedError) as error:
        sys.stderr.write(f"berth.execution.combined: {ISOLATION_FAILURE} ({error})\n")
        return None
    assert process.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        process.stdin.write(launch)
        process.stdin.close()
    return process


async def run_executor(
    payload: LaunchPayload, launch: bytes, supervised: bool, stderr: int | None = None, hidden: Sequence[str] = ()
) -> int:
    """Run the executor child to its end: its status (``128 + n`` for a signal, :data:`ISOLATION_FAILED` when the
    child could not be isolated and never ran). Its start takes a thread for a moment; its end is awaited on a
    pidfd (:func:`~berth.execution.waits.process_exit`), so the supervisor's threads stay free for the tools.
    ``stderr`` and ``hidden``: :func:`start_executor`'s."""
    process = await asyncio.to_thread(start_executor, payload, launch, supervised, stderr, hidden)
    if process is None:
        return ISOLATION_FAILED
    returncode = await process_exit(process)
    return 128 - returncode if returncode < 0 else returncode


async def run(
    environment: Mapping[str, str], launch: bytes, stderr: int | None = None, hidden: Sequence[str] = ()
) -> int:
    """Serve the tools (when the payload brings descriptors) while the executor runs; the executor's status.
    ``stderr`` and ``hidden``: :func:`run_executor`'s."""
    if PAYLOAD_VARIABLE not in environment:
        sys.stderr.write(f"berth.execution.combined: {PAYLOAD_VARIABLE} is not set\n")
        return 2
    payload = LaunchPayload.from_json(environment[PAYLOAD_VARIABLE])
    if not any(variable in environment for variable in DESCRIPTOR_VARIABLES.values()):
        return await run_executor(payload, launch, False, stderr, hidden)
    with tempfile.TemporaryDirectory(prefix="berth-supervisor-") as folder:
        try:
            async with supervising(environment, Path(folder) / "descriptors"):
                return await run_executor(payload, launch, True, stderr, hidden)
        except SupervisorStartError as error:
            sys.stderr.write(f"berth.execution.combined: the supervisor did not start: {error}\n")
            return 2


def divert_stderr(log: Path) -> int:
    """Point this process's stderr (fd 2) at ``log`` (created 0600, appended to); return a descriptor of the
    stderr it had, for the executor."""
    kept = os.dup(2)
    written = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(written, 2)
    os.close(written)
    return kept


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: the launch variables and lines from stdin (:func:`~berth.execution.payload.supervisor_input`)."""
    parser = argparse.ArgumentParser(prog="python -m berth.execution.combined")
    parser.add_argument("--supervisor-log", type=Path, help="where the supervisor's own stderr goes")
    options = parser.parse_args(argv)
    try:
        environment, launch = read_supervisor_input(sys.stdin.buffer.read())
    except ValueError as error:
        sys.stderr.write(f"berth.execution.combined: unreadable input: {error}\n")
        sys.exit(2)
    stderr: int | None = None
    hidden: tuple[str, ...] = ()
    if options.supervisor_log is not None:
        stderr, hidden = divert_stderr(options.supervisor_log), (str(options.supervisor_log.parent),)
    sys.exit(asyncio.run(run(environment, launch, stderr, hidden)))


if __name__ == "__main__":
    main()
