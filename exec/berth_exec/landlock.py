"""Landlock, the kernel's unprivileged access control, called through ``ctypes`` (standard library only).

A process restricts itself, and every process it starts, to a set of rules; no privilege is needed, only
``no_new_privs``. What the ABI version of the running kernel handles (each version adds to the previous):

====  =======  ==========================================================================================
ABI   Linux    handles
====  =======  ==========================================================================================
1     5.13     the file system: execute, read, write, list, create, remove (of files beneath given folders)
2     5.19     linking and renaming between folders (``REFER``)
3     6.2      truncating files
4     6.7      TCP: ``bind`` and ``connect`` (by port)
5     6.10     ``ioctl`` on devices
6     6.12     scoping: no signal, and no connection to an abstract Unix socket, outside the sandbox
7     6.15     audit logging of denials (nothing more is restricted)
====  =======  ==========================================================================================

A restricted process is also refused ``ptrace`` and the ``/proc`` files of any process outside its sandbox
(``environ``, ``mem``, ``fd/``, ``maps``, ``cwd``…), whatever their uid. What it never restricts: ``stat`` and path
walking, connecting to a **pathname** Unix socket, UDP and other socket families (Berth's seccomp filter refuses
those), and descriptors opened before the restriction.

:func:`restrict_self` restricts the calling thread (and what it starts afterwards): call it while the process
has one thread. https://docs.kernel.org/userspace-api/landlock.html is the reference.
"""

from __future__ import annotations

import ctypes
import os
import stat

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
"""The three system calls' numbers: the same on every architecture (the generic table)."""
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13
TRUNCATE = 1 << 14
IOCTL_DEV = 1 << 15

NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
"""Every file-system right an ABI handles (rights of later ABIs are unknown to an older kernel)."""
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
"""The rights a rule on a file (not a folder) may carry."""
READ = EXECUTE | READ_FILE | READ_DIR
"""Read, list and run what is beneath: the interpreter, its standard library, the program."""
WRITE = (1 << 16) - 1
"""Everything beneath: the run's ``work/`` and ``out/``."""
UNLISTED = READ_FILE | WRITE_FILE | MAKE_REG | REMOVE_FILE | TRUNCATE
"""Create, use and remove files of a known name without listing the folder (``/dev/shm``, where
``multiprocessing``'s semaphores live, shared with every process of the machine: names are random)."""
FULL_ABI = 6
"""The first ABI that confines a process sharing the host's uid: files, TCP, signals and abstract sockets."""


class LandlockError(OSError):
    """The kernel has no Landlock (or an older ABI than required), or refused a rule or the restriction."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The running kernel's Landlock ABI version; 0 when it has none (not built, not enabled in the ``lsm=`` list,
    or the system call refused by a seccomp profile)."""
    result = _libc().syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(int(result), 0)


def handled_fs_rights(abi: int) -> int:
    """The file-system rights ABI ``abi`` handles (so restricts)."""
    return FS_RIGHTS_BY_ABI[max(version for version in FS_RIGHTS_BY_ABI if version <= abi)]


def restrict_self(rules: dict[str, int], *, minimum_abi: int = FULL_ABI) -> int:
    """Restrict this thread (and every process it starts) to ``rules``, a path and the rights granted beneath it
    (:data:`READ`, :data:`WRITE`, :data:`UNLISTED`; a file's are cut to :data:`FILE_RIGHTS`): whatever else the
    file system holds is refused, and so are TCP ``bind``/``connect`` (ABI 4), signals and abstract Unix sockets
    outside the sandbox (ABI 6). Sets ``no_new_privs`` first. Returns the ABI version in force.

    :class:`LandlockError` when the kernel's ABI is below ``minimum_abi``, or a step fails (a missing path included):
    the caller must then not run what it meant to confine."""
    libc = _libc()
    abi = abi_version()
    if abi < minimum_abi:
        found = f"ABI {abi}" if abi else "no Landlock"
        raise LandlockError(f"this kernel has {found}; the sandbox needs ABI {minimum_abi} or later")
    handled = handled_fs_rights(abi)
    attr = _RulesetAttr(
        handled,
        NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0,
    )
    # the whole struct on every ABI: an older kernel accepts the fields it does not know when they are zero
    size = ctypes.c_size_t(ctypes.sizeof(_RulesetAttr))
    ruleset = _check(libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), size, ctypes.c_uint32(0)), "create")
    try:
        for path, rights in rules.items():
            _add_rule(libc, ruleset, path, rights & handled)
        _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        _check(libc.syscall(SYS_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)), "restrict_self")
    finally:
        os.close(ruleset)
    return abi


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
    try:
        descriptor = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as error:
        raise LandlockError(error.errno, f"rule for {path}: {error.strerror}") from None
    try:
        if not stat.S_ISDIR(os.fstat(descriptor).st_mode):
            rights &= FILE_RIGHTS
        rule = _PathBeneathAttr(rights, descriptor)
        _check(libc.syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), 0), f"rule for {path}")
    finally:
        os.close(descriptor)


def _check(result: int, what: str) -> int:
    if result < 0:
        error = ctypes.get_errno()
        raise LandlockError(error, f"landlock {what}: {os.strerror(error)}")
    return int(result)
