"""The executor bootstrap: the first code that runs inside the sandbox, before the agent's program.

The backend starts ``python3 -I`` with this module and writes the launch lines to its stdin, then closes it::

    token <run token>
    program /workspace/program/main.py
    limit memory_bytes 1073741824
    limit cpu_s 60
    limit processes 128
    limit file_size_bytes 67108864

(plain lines, not JSON: a program's start-up should not pay for importing ``json`` and ``re``). Where no sandbox
was built around it (the ``local`` backend's ``landlock`` isolation) the lines also say what to confine itself to
(:mod:`berth_exec.confinement`); it does so after the limits, before it reads the program.

It lowers its own resource limits (a process may always lower them; the program can never raise them again),
points :mod:`berth_exec.tools` at the supervisor's socket with the token, and runs the program as ``__main__``
with ``WORKDIR`` as its working directory. The token travels on stdin, never in the environment or on a command
line, so no other process can read it from ``/proc``. The exit status is the program's: 0, its ``sys.exit``
code, or 1 with the traceback on stderr when it raised.
"""

from __future__ import annotations

import os
import resource
import sys

from berth_exec import environment, tools
from berth_exec.confinement import CONFINEMENT_FAILED, FAILURE_MARK, Confinement

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


def read_launch(lines: list[str]) -> tuple[str, str, dict[str, int], Confinement | None]:
    """``(token, program, limits, confinement)`` from the launch lines (no confinement: a sandbox was built
    around the bootstrap)."""
    token = program = ""
    limits: dict[str, int] = {}
    confinement = Confinement()
    confined = False
    for line in lines:
        key, _, value = line.rstrip("\n").partition(" ")
        if key == "token":
            token = value
        elif key == "program":
            program = value
        elif key == "limit":
            name, _, number = value.partition(" ")
            limits[name] = int(number)
        else:
            confined = confinement.read_line(key, value) or confined
    if not program:
        raise SystemExit("berth_exec.runner: the launch lines name no program")
    return token, program, limits, confinement if confined else None


def launch_lines(token: str, program: str, limits: dict[str, int], confinement: Confinement | None = None) -> str:
    """The launch lines :func:`read_launch` reads (what a backend writes to the bootstrap's stdin)."""
    lines = [f"token {token}", f"program {program}", *(f"limit {name} {value}" for name, value in limits.items())]
    if confinement is not None:
        lines += confinement.lines()
    return "\n".join(lines) + "\n"


def main() -> None:
    """Read the launch lines, apply the limits (and the confinement), connect the tools client, run the program."""
    token, program, limits, confinement = read_launch(sys.stdin.readlines())
    sys.stdin.close()
    apply_limits(limits)
    if confinement is not None:
        try:
            confinement.apply()
        except OSError as error:
            reason = (error.strerror or str(error)) + (f": {error.filename}" if error.filename else "")
            sys.stderr.write(f"{FAILURE_MARK}{reason}\n")
            sys.stderr.flush()
            os._exit(CONFINEMENT_FAILED)
    environment.keep_documented_only()
    if os.getpid() == 1:
        run_under_init()
    socket_path = environment.supervisor_socket_path()
    if socket_path:
        tools.configure(socket_path, token)
    working_directory = environment.workdir()
    if working_directory:
        os.chdir(working_directory)
    sys.argv = [program]
    sys.path.insert(0, os.path.dirname(program))
    try:
        run_as_main(program)
    except SystemExit:
        raise
    except BaseException as error:
        print_program_traceback(error, program)
        sys.stderr.flush()
        os._exit(1)


def run_as_main(program: str) -> None:
    """Run the file ``program`` as the ``__main__`` module, as ``python3 program`` would.

    Not ``runpy.run_path``: it imports ``pkgutil``, and with it ``re``, ``typing`` and ``weakref`` (about 7 ms, a
    third of a trivial program's whole start-up here) to support zip files and packages a program never is. The
    module is a real one in ``sys.modules`` with ``__file__`` set, so ``multiprocessing``'s spawn and pickling of
    the program's own classes find it.
    """
    with open(program, "rb") as handle:
        source = handle.read()
    code = compile(source, program, "exec", dont_inherit=True)
    module = type(sys)("__main__")
    module.__file__ = program
    module.__loader__ = None
    module.__spec__ = None
    module.__package__ = None
    sys.modules["__main__"] = module
    exec(code, module.__dict__)  # noqa: S102 - running the program is this module's purpose


def run_under_init() -> None:
    """When the bootstrap is its pid namespace's init (a container's first process), fork the program into a
    child and stay as init: reap the run's orphans and exit with the program's status (``128 + n`` when a signal
    ended it) as soon as the program ends; the kernel then ends every process left in the namespace.

    The kernel does not deliver signals an init has no handler for (``SIGXCPU`` at the CPU limit would be lost and
    only the hard limit's ``SIGKILL`` would end the program), and an init that is the program leaves zombies. The
    child returns from this function and runs the program; the parent never returns.
    """
    child = os.fork()
    if child == 0:
        return
    while True:
        pid, status = os.wait()
        if pid == child:
            break
    sys.stdout.flush()
    os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def print_program_traceback(error: BaseException, program: str) -> None:
    """Print ``error``'s traceback from the program's first frame on (the bootstrap's frames are noise)."""
    import traceback

    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != program:
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb or error.__traceback__)


if __name__ == "__main__":
    main()
