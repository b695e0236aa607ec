"""The combined entry: supervisor and executor in one container, ``python -m berth.execution.combined``.

The container (docker ``combined`` strategy) starts this as root with ``CAP_SYS_ADMIN``, ``CAP_SETUID`` and
``CAP_SETGID`` only, given ``BERTH_EXEC_PAYLOAD`` and the run's descriptors in its environment and the executor's
launch lines on stdin. It

1. serves the bundle's tools on the payload's socket (:func:`berth.execution.supervisor_process.supervising`),
   from descriptors materialized in a private folder, when the payload names descriptors;
2. starts the executor as a child that, before it runs anything, enters a new **network** namespace (only a
   down ``lo``: nothing is reachable, not even the supervisor's network) and a new **mount** namespace in which an
   empty read-only tmpfs covers ``/tmp`` (the materialized descriptors) and every ``hidden_paths`` folder (the
   supervisor's own Python), then drops to the payload's unprivileged uid with no groups and ``no_new_privs``;
   its environment is exactly ``WORKDIR``, ``OUTPUT_DIR``, ``EXECUTION_ID``, ``BUNDLE_ID`` and the socket path;
3. hands the launch lines on, waits for the executor and exits with its status (``128 + n`` for a signal).

The wall-time limit stays the host's: it kills the container. Memory, pids and CPU are the container's limits
(supervisor and executor together); the bootstrap's rlimits bound the executor inside.
"""

from __future__ import annotations

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

from berth.config.environment import exec_launch_variables
from berth.execution.payload import DESCRIPTOR_VARIABLES, PAYLOAD_VARIABLE, LaunchPayload
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
    uid drop. Any failure aborts the exec, so the program never runs half-isolated."""
    libc = ctypes.CDLL(None, use_errno=True)
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

    return isolate


def start_executor(payload: LaunchPayload, launch: bytes, supervised: bool) -> subprocess.Popen[bytes] | None:
    """Start the executor child with ``launch`` on its stdin; None when it could not be isolated (it never ran)."""
    uid = payload.executor_uid if payload.executor_uid is not None else 65534
    try:
        process = subprocess.Popen(  # noqa: S603 - argv is fixed here; the program is a file
            [payload.executor_python, *EXECUTOR_FLAGS, "-c", EXECUTOR_BOOTSTRAP],
            stdin=subprocess.PIPE,
            env=executor_environment(
                payload.exec_id, payload.bundle_id, socket_path=payload.socket_path if supervised else None
            ),
            cwd="/",
            preexec_fn=isolate_child(uid, uid, payload.hidden_paths, payload.executor_namespaces),
            close_fds=True,
        )
    except subprocess.SubprocessError:
        return None
    assert process.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        process.stdin.write(launch)
        process.stdin.close()
    return process


async def run_executor(payload: LaunchPayload, launch: bytes, supervised: bool) -> int:
    """Run the executor child to its end: its status (``128 + n`` for a signal, :data:`ISOLATION_FAILED` when the
    child could not be isolated and never ran). Its start takes a thread for a moment; its end is awaited on a
    pidfd (:func:`~berth.execution.waits.process_exit`), so the supervisor's threads stay free for the tools."""
    process = await asyncio.to_thread(start_executor, payload, launch, supervised)
    if process is None:
        sys.stderr.write(f"berth.execution.combined: {ISOLATION_FAILURE}\n")
        return ISOLATION_FAILED
    returncode = await process_exit(process)
    return 128 - returncode if returncode < 0 else returncode


async def run(environment: Mapping[str, str], launch: bytes) -> int:
    """Serve the tools (when the payload brings descriptors) while the executor runs; the executor's status."""
    if PAYLOAD_VARIABLE not in environment:
        sys.stderr.write(f"berth.execution.combined: {PAYLOAD_VARIABLE} is not set\n")
        return 2
    payload = LaunchPayload.from_json(environment[PAYLOAD_VARIABLE])
    if not any(variable in environment for variable in DESCRIPTOR_VARIABLES.values()):
        return await run_executor(payload, launch, False)
    with tempfile.TemporaryDirectory(prefix="berth-supervisor-") as folder:
        try:
            async with supervising(environment, Path(folder) / "descriptors"):
                return await run_executor(payload, launch, True)
        except SupervisorStartError as error:
            sys.stderr.write(f"berth.execution.combined: the supervisor did not start: {error}\n")
            return 2


def main() -> None:
    """Entry point: the launch lines from stdin, the payload from the environment."""
    launch = sys.stdin.buffer.read()
    sys.exit(asyncio.run(run(exec_launch_variables(), launch)))


if __name__ == "__main__":
    main()
