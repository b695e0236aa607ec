"""The executor bootstrap: the first code that runs inside the sandbox, before the agent's program.

The backend starts ``python3 -I`` with this module and writes one JSON line to its stdin::

    {"token": "<run token>", "program": "/workspace/program/main.py",
     "limits": {"memory_bytes": 1073741824, "cpu_s": 60, "processes": 128, "file_size_bytes": 67108864}}

It lowers its own resource limits (a process may always lower them; the program can never raise them again),
points :mod:`berth_exec.tools` at the supervisor's socket with the token, and runs the program as ``__main__``
with ``WORKDIR`` as its working directory. The token travels on stdin, never in the environment or on a command
line, so no other process can read it from ``/proc``. The exit status is the program's: 0, its ``sys.exit``
code, or 1 with the traceback on stderr when it raised.
"""

from __future__ import annotations

import json
import os
import resource
import runpy
import sys
import traceback
from typing import Any

from berth_exec import tools

LIMITS = {
    "memory_bytes": resource.RLIMIT_AS,
    "cpu_s": resource.RLIMIT_CPU,
    "processes": resource.RLIMIT_NPROC,
    "file_size_bytes": resource.RLIMIT_FSIZE,
}
"""Launch-limit names and the rlimit each sets."""


def apply_limits(limits: dict[str, int]) -> None:
    """Set each given limit as both soft and hard (never above the inherited hard limit)."""
    for name, value in limits.items():
        which = LIMITS[name]
        _, hard = resource.getrlimit(which)
        ceiling = value if hard == resource.RLIM_INFINITY else min(value, hard)
        soft = ceiling
        if which == resource.RLIMIT_CPU:
            # SIGXCPU at the soft limit says "CPU time" clearly; the hard limit one second later is SIGKILL.
            hard_cpu = ceiling + 1 if hard == resource.RLIM_INFINITY else min(ceiling + 1, hard)
            resource.setrlimit(which, (soft, hard_cpu))
        else:
            resource.setrlimit(which, (soft, ceiling))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main() -> None:
    """Read the launch line, apply the limits, connect the tools client, run the program."""
    launch: dict[str, Any] = json.loads(sys.stdin.readline())
    sys.stdin.close()
    apply_limits({key: int(value) for key, value in launch.get("limits", {}).items()})
    socket_path = os.environ.get(tools.SOCKET_VARIABLE)
    if socket_path:
        tools.configure(socket_path, str(launch["token"]))
    program = str(launch["program"])
    workdir = os.environ.get("WORKDIR")
    if workdir:
        os.chdir(workdir)
    sys.argv = [program]
    sys.path.insert(0, os.path.dirname(program))
    try:
        runpy.run_path(program, run_name="__main__")
    except SystemExit:
        raise
    except BaseException as error:
        print_program_traceback(error, program)
        sys.stderr.flush()
        os._exit(1)


def print_program_traceback(error: BaseException, program: str) -> None:
    """Print ``error``'s traceback from the program's first frame on (the bootstrap's frames are noise)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != program:
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb or error.__traceback__)


if __name__ == "__main__":
    main()
