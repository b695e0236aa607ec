"""What the executor bootstrap confines itself to before the program runs, where no sandbox was built around it.

The ``local`` backend's ``landlock`` isolation starts the bootstrap as a plain process (in a Kubernetes pod with
the chart's restricted security context there is no user namespace, no capability, no bubblewrap). The host puts
the confinement into the launch lines, after the limits::

    landlock 6                                    the lowest Landlock ABI the run may start under
    landlock_read /usr                            a path and the rights granted beneath it (read, write, unlisted)
    landlock_write /var/lib/berth/exec/ex_…/work
    landlock_unlisted /dev/shm
    seccomp 2000000004000000150001…               Berth's seccomp filter, as hexadecimal ``struct sock_filter``s
    oom_score_adj 1000

and the bootstrap, still one thread, applies it in that order: ``oom_score_adj`` (the kernel's OOM killer then picks
the run's processes before the host's), ``SIGKILL`` when the host's thread that started it ends (the host died: with
no pid namespace nothing else would end the program), Landlock (:mod:`berth_exec.landlock`, which sets
``no_new_privs``), then the seccomp filter. A step that fails ends the bootstrap with :data:`CONFINEMENT_FAILED`
and one line on stderr starting with :data:`FAILURE_MARK`, before the program is even read: a run is never half
confined.
"""

from __future__ import annotations

import os

CONFINEMENT_FAILED = 125
"""The bootstrap's exit status when it could not confine itself (the program never ran)."""
FAILURE_MARK = "berth_exec: the sandbox could not be confined: "
"""How the bootstrap's stderr starts when it could not confine itself (the host reports what follows)."""
RIGHTS = {"landlock_read": "READ", "landlock_write": "WRITE", "landlock_unlisted": "UNLISTED"}
"""The launch-line keys of Landlock rules and the :mod:`berth_exec.landlock` rights each grants."""
PR_SET_SECCOMP = 22
PR_SET_PDEATHSIG = 1
SIGKILL = 9
SECCOMP_MODE_FILTER = 2


class Confinement:
    """Landlock rules, a seccomp filter and an OOM score: what a bootstrap applies to itself."""

    __slots__ = ("minimum_abi", "oom_score_adj", "rules", "seccomp")

    def __init__(
        self,
        rules: list[tuple[str, str]] | None = None,
        *,
        minimum_abi: int = 6,
        seccomp: bytes = b"",
        oom_score_adj: int | None = None,
    ) -> None:
        self.rules = list(rules or [])
        """``(key, path)`` pairs, a key of :data:`RIGHTS`."""
        self.minimum_abi = minimum_abi
        self.seccomp = seccomp
        self.oom_score_adj = oom_score_adj

    def lines(self) -> list[str]:
        """The launch lines :func:`read_line` reads back."""
        lines = [f"landlock {self.minimum_abi}", *(f"{key} {path}" for key, path in self.rules)]
        if self.seccomp:
            lines.append(f"seccomp {self.seccomp.hex()}")
        if self.oom_score_adj is not None:
            lines.append(f"oom_score_adj {self.oom_score_adj}")
        return lines

    def read_line(self, key: str, value: str) -> bool:
        """Take one launch line's ``key`` and ``value`` if it is a confinement line; whether it was."""
        if key == "landlock":
            self.minimum_abi = int(value)
        elif key in RIGHTS:
            self.rules.append((key, value))
        elif key == "seccomp":
            self.seccomp = bytes.fromhex(value)
        elif key == "oom_score_adj":
            self.oom_score_adj = int(value)
        else:
            return False
        return True

    def apply(self) -> None:
        """Confine this process (one thread) and all it starts; :class:`OSError` if any step fails."""
        import ctypes

        from berth_exec import landlock

        if self.oom_score_adj is not None:
            with open("/proc/self/oom_score_adj", "w") as handle:  # raising it needs no privilege
                handle.write(str(self.oom_score_adj))
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"parent death signal: {os.strerror(error)}")
        rules = {path: getattr(landlock, RIGHTS[key]) for key, path in self.rules}
        landlock.restrict_self(rules, minimum_abi=self.minimum_abi)
        if self.seccomp:
            install_seccomp(self.seccomp)


def install_seccomp(program: bytes) -> None:
    """Install the classic-BPF ``program`` (packed ``struct sock_filter``) on this thread; ``no_new_privs`` must
    be set (:func:`berth_exec.landlock.restrict_self` sets it)."""
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"seccomp filter: {os.strerror(error)}")
