"""The ``local`` backend's ``landlock`` isolation: what a run may reach, and whether this kernel can confine it.

Where neither a user namespace nor bubblewrap is available (a Kubernetes pod under the chart's restricted security
context: non-root, no capability, ``RuntimeDefault`` seccomp, read-only root), the executor bootstrap confines
itself (:mod:`berth_exec.confinement`) with what any process may do to itself:

* **Landlock** (:mod:`berth_exec.landlock`): read and run beneath ``/usr`` (and the interpreter's prefix, the
  ``berth_exec`` package, the program's folder, ``/proc``, a few public files of ``/etc``); everything beneath
  the run's ``work/`` and ``out/``; ``/dev/null`` and the random devices; files of known name in ``/dev/shm``.
  Nothing else: not another run's folder, not the descriptors, not ``/run/secrets``, not the host's home. TCP
  ``bind``/``connect`` refused, and (ABI 6) no signal to, and no abstract socket of, any process outside the run;
  the kernel also refuses it ``ptrace`` and the ``/proc`` files of every process outside (``environ``, ``fd/``);
* **Berth's seccomp filter** with ``shared_host`` (:mod:`berth.execution.seccomp`): no namespace, mount, ptrace,
  keyring, bpf …, no socket but ``AF_UNIX`` (no UDP, raw or netlink either), no leaving the process group;
* the **rlimits** of every run, and ``oom_score_adj`` 1000 so the OOM killer picks the run before the host.

The run's processes keep the host's uid where the host is not root (in the chart's pod, uid 10001): what separates
them from the host is Landlock and seccomp, not the uid. Where the host is root, the run also gets a uid of its own
and a cgroup, as with bubblewrap.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from berth.execution.sandbox import DoctorFinding, RunFolder
from berth.execution.seccomp import SeccompUnsupportedError, describe, filter_program
from berth_exec import landlock
from berth_exec.confinement import Confinement

MINIMUM_ABI: Final = landlock.FULL_ABI
"""The Landlock ABI a ``landlock`` run needs by default: 6 (Linux 6.12), the first that also scopes signals and
abstract Unix sockets, which matters where the run shares the host's uid."""
SYSTEM_FOLDERS: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib64")
"""Read and run: the system's programs and libraries (on a merged-usr system the last four lead into ``/usr``)."""
PUBLIC_ETC_FILES: Final = (
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/mime.types",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
)
"""Read only: files of ``/etc`` that hold nothing secret and that libraries open when they exist (``mimetypes``
reads ``/etc/mime.types`` and fails on a refusal; the time zone; the dynamic loader's cache; user names)."""
READABLE_DEVICES: Final = ("/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
WRITABLE_DEVICES: Final = ("/dev/null",)
SHARED_MEMORY: Final = "/dev/shm"  # noqa: S108 - the machine's, reached by name only
OOM_SCORE_ADJ: Final = 1000
"""The run's processes are the OOM killer's first choice (a process may raise its own score without privilege)."""


KERNEL_OF_ABI: Final = {1: "5.13", 2: "5.19", 3: "6.2", 4: "6.7", 5: "6.10", 6: "6.12", 7: "6.15"}
"""The first Linux release of each Landlock ABI."""
WHAT_EACH_ABI_ADDS: Final = {
    1: "files",
    2: "links and renames",
    3: "truncation",
    4: "TCP bind/connect",
    5: "device ioctl",
    6: "signals and abstract sockets",
}
"""What each Landlock ABI confines beyond the one before (7 adds logging only)."""


def run_confinement(folder: RunFolder, *, python: str, package: Path, minimum_abi: int) -> Confinement:
    """What the bootstrap of the run in ``folder`` confines itself to (``python``: the interpreter it runs on;
    ``package``: the ``berth_exec`` folder it imports)."""
    reads = [*SYSTEM_FOLDERS, *interpreter_prefix(python), str(package), str(folder.program.parent), "/proc"]
    reads += [*PUBLIC_ETC_FILES, *READABLE_DEVICES]
    rules = [("landlock_read", path) for path in existing(reads)]
    rules += [("landlock_write", path) for path in existing([str(folder.work), str(folder.out), *WRITABLE_DEVICES])]
    rules += [("landlock_unlisted", path) for path in existing([SHARED_MEMORY])]
    return Confinement(
        rules, minimum_abi=minimum_abi, seccomp=filter_program(shared_host=True), oom_score_adj=OOM_SCORE_ADJ
    )


def interpreter_prefix(python: str) -> list[str]:
    """The prefix of ``python`` (its standard library lies beneath) when it is not under a system folder: a
    ``python`` of ``/opt/python3.12/bin/python3`` reads ``/opt/python3.12``."""
    prefix = Path(os.path.realpath(python)).parent.parent
    if prefix == Path("/") or any(prefix.is_relative_to(folder) for folder in SYSTEM_FOLDERS):
        return []
    return [str(prefix)]


def existing(paths: Iterable[str]) -> list[str]:
    """``paths`` that exist here, in order, each once (a rule needs the path opened)."""
    return list(dict.fromkeys(path for path in paths if os.path.exists(path)))


_abi: dict[str, int] = {}
_abi_lock = threading.Lock()


def landlock_abi() -> int:
    """This kernel's Landlock ABI (0: none), asked once per process."""
    with _abi_lock:
        if "abi" not in _abi:
            _abi["abi"] = landlock.abi_version()
        return _abi["abi"]


def landlock_refusal(minimum_abi: int) -> str | None:
    """Why a ``landlock`` run cannot start here (None when it can): what the kernel lacks and what to do."""
    abi = landlock_abi()
    if abi >= minimum_abi:
        return None
    found = f"Landlock ABI {abi}" if abi else "no Landlock"
    return (
        f"this kernel has {found} and the profile's landlock isolation needs ABI {minimum_abi} (Linux "
        f"{KERNEL_OF_ABI.get(minimum_abi, '5.13')} or later, Landlock in the kernel's lsm= list, the landlock_* "
        "system calls allowed by the container's seccomp profile); run `berth exec doctor`, or lower the profile's "
        "landlock_min_abi to accept a weaker confinement"
    )


def landlock_findings(minimum_abi: int) -> list[DoctorFinding]:
    """``berth exec doctor``'s lines on the ``landlock`` isolation: the kernel's ABI and what it covers, and the
    seccomp filter that goes with it."""
    abi = landlock_abi()
    covered = [what for version, what in WHAT_EACH_ABI_ADDS.items() if version <= abi]
    missing = [what for version, what in WHAT_EACH_ABI_ADDS.items() if version > abi]
    detail = f"ABI {abi}: confines {', '.join(covered)}" if abi else "none (Linux 5.13+, lsm=…,landlock)"
    if missing and abi:
        detail += f"; not {', '.join(missing)}"
    detail += f" (the profile needs ABI {minimum_abi})"
    findings = [DoctorFinding("Landlock", abi >= minimum_abi, detail)]
    try:
        findings.append(DoctorFinding("seccomp filter", True, describe(shared_host=True)))
    except SeccompUnsupportedError as error:
        findings.append(DoctorFinding("seccomp filter", False, str(error)))
    return findings


def tasks_of_uid(uid: int) -> int:
    """How many tasks (processes and their threads) ``uid`` runs on this machine, as far as ``/proc`` shows: what
    RLIMIT_NPROC counts, so a run that shares the host's uid is given its process limit on top of them."""
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid == uid:
                count += len(os.listdir(f"/proc/{name}/task"))
        except OSError:  # ended meanwhile, or not ours to list
            continue
    return count
