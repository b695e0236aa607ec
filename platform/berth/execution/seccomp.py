"""The executor's seccomp filter: a classic-BPF program, built here without libseccomp.

The same program guards the executor of every backend that builds its own sandbox: bubblewrap loads it with
``--seccomp FD`` (the ``local`` backend), and the combined entry installs it in the executor child itself
(:func:`install`, after ``no_new_privs``) where the container's ``CAP_SYS_ADMIN`` has relaxed Docker's own
profile. Modelled on Docker's default profile and Flatpak's, it

* kills the process on any architecture but the host's (a 32-bit ``int 0x80`` on x86-64 included);
* refuses the x32 ABI's syscalls (numbers with bit 30 set on x86-64);
* refuses with ``EPERM`` what only serves to reach the kernel's larger surface or other processes: new
  namespaces (``unshare``, ``setns``, ``clone`` with any ``CLONE_NEW*`` flag), mounts (old and new API),
  ``ptrace`` and ``process_vm_*``, the keyring, ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring``,
  kernel modules, ``kexec``, ``open_by_handle_at``, swap, reboot, ``acct``, ``syslog``, the clocks, quotas;
* answers ``clone3`` with ``ENOSYS``: its flags sit in memory a filter cannot read, and glibc then falls back to
  ``clone``, whose flags it can;
* allows everything else.

Where the executor shares the host's network and session (the ``local`` backend's ``landlock`` isolation, which
builds no namespace), :func:`filter_program` with ``shared_host=True`` also refuses with ``EPERM``

* ``socket`` of any family but ``AF_UNIX``: no TCP, UDP, raw or netlink socket (Landlock governs TCP only), while
  the supervisor's Unix socket and ``multiprocessing``'s pipes keep working;
* ``setsid`` and ``setpgid``: every process of the run stays in the process group the host kills at the
  wall-time limit (with no pid namespace of its own, a process that left it would outlive the run).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6] (little-endian hosts)
NR_OFFSET: Final = 0
ARCH_OFFSET: Final = 4
ARG0_LOW_OFFSET: Final = 16
AF_UNIX: Final = 1

BPF_LD_W_ABS: Final = 0x20
BPF_JEQ_K: Final = 0x15
BPF_JGE_K: Final = 0x35
BPF_JSET_K: Final = 0x45
BPF_RET_K: Final = 0x06

SECCOMP_RET_KILL_PROCESS: Final = 0x80000000
SECCOMP_RET_ERRNO: Final = 0x00050000
SECCOMP_RET_ALLOW: Final = 0x7FFF0000

PR_SET_SECCOMP: Final = 22
SECCOMP_MODE_FILTER: Final = 2

X32_SYSCALL_BIT: Final = 0x40000000
NAMESPACE_CLONE_FLAGS: Final = 0x7E020000
"""``CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET``."""

REFUSED: Final = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "mount_setattr",
    "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
    "ptrace", "process_vm_readv", "process_vm_writev",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "open_by_handle_at", "name_to_handle_at",
    "swapon", "swapoff", "reboot", "acct", "syslog", "quotactl", "lookup_dcookie", "vhangup",
    "settimeofday", "clock_settime",
)  # fmt: skip
"""The syscalls the executor is refused with ``EPERM`` whatever their arguments."""
REFUSED_SHARING_THE_HOST: Final = ("setsid", "setpgid")
"""Refused as well where the executor shares the host's session (``filter_program(shared_host=True)``)."""


@dataclass(frozen=True, slots=True)
class Architecture:
    """One architecture's audit number, its syscall numbers, and whether it has the x32 ABI beside it."""

    name: str
    audit_arch: int
    numbers: Mapping[str, int]
    has_x32: bool


X86_64: Final = Architecture(
    "x86_64",
    0xC000003E,
    {
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "mount_setattr": 442,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "keyctl": 250, "add_key": 248, "request_key": 249,
        "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
        "open_by_handle_at": 304, "name_to_handle_at": 303,
        "swapon": 167, "swapoff": 168, "reboot": 169, "acct": 163, "syslog": 103, "quotactl": 179,
        "lookup_dcookie": 212, "vhangup": 153, "settimeofday": 164, "clock_settime": 227,
        "clone": 56, "clone3": 435, "socket": 41, "setsid": 112, "setpgid": 109,
    },
    has_x32=True,
)  # fmt: skip
AARCH64: Final = Architecture(
    "aarch64",
    0xC00000B7,
    {
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "mount_setattr": 442,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
        "keyctl": 219, "add_key": 217, "request_key": 218,
        "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "open_by_handle_at": 265, "name_to_handle_at": 264,
        "swapon": 224, "swapoff": 225, "reboot": 142, "acct": 89, "syslog": 116, "quotactl": 60,
        "lookup_dcookie": 18, "vhangup": 58, "settimeofday": 170, "clock_settime": 112,
        "clone": 220, "clone3": 435, "socket": 198, "setsid": 157, "setpgid": 154,
    },
    has_x32=False,
)  # fmt: skip
ARCHITECTURES: Final = {"x86_64": X86_64, "amd64": X86_64, "aarch64": AARCH64, "arm64": AARCH64}


class SeccompUnsupportedError(Exception):
    """No filter for this machine's architecture, or the kernel refused to install it."""


def host_architecture() -> Architecture:
    """This machine's architecture; :class:`SeccompUnsupportedError` when the filter has no syscall table for it."""
    machine = platform.machine().lower()
    if machine not in ARCHITECTURES:
        raise SeccompUnsupportedError(f"no seccomp filter for architecture {machine!r} (x86_64 and aarch64 have one)")
    return ARCHITECTURES[machine]


# An instruction before its jumps are resolved: (code, jump if true, jump if false, k); a jump is a label or 0.
_Jump = str | int
_Instruction = tuple[int, _Jump, _Jump, int]


def filter_program(architecture: Architecture | None = None, *, shared_host: bool = False) -> bytes:
    """The filter for ``architecture`` (default: this machine's) as packed ``struct sock_filter`` instructions,
    the form bubblewrap's ``--seccomp`` reads and ``prctl(PR_SET_SECCOMP)`` takes. ``shared_host``: the executor
    has no network or pid namespace of its own, so sockets but ``AF_UNIX`` and leaving the process group are
    refused too."""
    arch = architecture or host_architecture()
    numbers = arch.numbers
    code: list[_Instruction] = [
        (BPF_LD_W_ABS, 0, 0, ARCH_OFFSET),
        (BPF_JEQ_K, 0, "kill", arch.audit_arch),
        (BPF_LD_W_ABS, 0, 0, NR_OFFSET),
    ]
    if arch.has_x32:
        code.append((BPF_JGE_K, "refuse", 0, X32_SYSCALL_BIT))
    code.append((BPF_JEQ_K, "clone", 0, numbers["clone"]))
    code.append((BPF_JEQ_K, "no_such_call", 0, numbers["clone3"]))
    refused = [*REFUSED, *(REFUSED_SHARING_THE_HOST if shared_host else ())]
    if shared_host:
        code.append((BPF_JEQ_K, "socket", 0, numbers["socket"]))
    code += [(BPF_JEQ_K, "refuse", 0, numbers[name]) for name in refused]
    code.append((BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    labels = {"clone": len(code)}  # every jump goes forward: the argument checks before the returns they reach
    code.append((BPF_LD_W_ABS, 0, 0, ARG0_LOW_OFFSET))
    code.append((BPF_JSET_K, "refuse", 0, NAMESPACE_CLONE_FLAGS))
    code.append((BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    if shared_host:
        labels["socket"] = len(code)
        code.append((BPF_LD_W_ABS, 0, 0, ARG0_LOW_OFFSET))  # the family: int, the low word of the first argument
        code.append((BPF_JEQ_K, 0, "refuse", AF_UNIX))
        code.append((BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    labels["refuse"] = len(code)
    code.append((BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM))
    labels["no_such_call"] = len(code)
    code.append((BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS))
    labels["kill"] = len(code)
    code.append((BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS))
    return b"".join(_pack(index, instruction, labels) for index, instruction in enumerate(code))


def _pack(index: int, instruction: _Instruction, labels: Mapping[str, int]) -> bytes:
    operation, if_true, if_false, k = instruction

    def offset(jump: _Jump) -> int:
        if isinstance(jump, int):
            return jump
        distance = labels[jump] - index - 1
        if not 0 <= distance <= 255:  # classic BPF jumps only forward, by at most 255
            raise ValueError(f"jump to {jump} out of a BPF conditional's reach ({distance})")
        return distance

    return struct.pack("=HBBI", operation, offset(if_true), offset(if_false), k)


def program_pipe(program: bytes) -> int:
    """A pipe's read end holding ``program`` and then its end: what ``bwrap --seccomp FD`` reads. The caller
    passes it to the child (``pass_fds``) and closes it after the start. A program fits a pipe's buffer."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, program)
    finally:
        os.close(write_end)
    return read_end


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def installer(program: bytes) -> Callable[[], None]:
    """A function that installs ``program`` on the calling thread's process (``prctl(PR_SET_SECCOMP)``); built
    before a fork so the child only calls into libc. The caller must have set ``no_new_privs`` first."""
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))

    def install() -> None:
        _ = buffer  # kept alive with the closure
        if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"seccomp filter: {os.strerror(error)}")

    return install


def describe(architecture: Architecture | None = None, *, shared_host: bool = False) -> str:
    """One line for ``berth exec doctor``: what the filter refuses."""
    arch = architecture or host_architecture()
    refused = len(REFUSED) + (len(REFUSED_SHARING_THE_HOST) if shared_host else 0)
    return (
        f"{arch.name}: {refused} syscalls refused (EPERM), clone with CLONE_NEW* refused, clone3 ENOSYS"
        + (", sockets but AF_UNIX refused" if shared_host else "")
        + (", x32 refused" if arch.has_x32 else "")
        + ", other architectures killed"
    )
