"""The executor's seccomp filter on its own: installed by a real child process (as the combined entry does), it
answers each kind of syscall as :mod:`berth.execution.seccomp` says (the sandbox tests attack it through bwrap and
the combined container)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from berth.execution.seccomp import AARCH64, X86_64, filter_program

CHILD = """
import ctypes, errno, json, os, threading
from berth.execution import seccomp

libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS, as the combined entry sets it first
seccomp.installer(seccomp.filter_program())()
numbers = seccomp.host_architecture().numbers

def call(number, *args):
    result = libc.syscall(number, *args)
    return "allowed" if result >= 0 else errno.errorcode[ctypes.get_errno()]

seen = {
    "clone3": call(numbers["clone3"], None, 0),
    "unshare": call(numbers["unshare"], 0x10000000),
    "setns": call(numbers["setns"], 0, 0),
    "open_by_handle_at": call(numbers["open_by_handle_at"], 0, None, 0),
    "getpid": call(39 if seccomp.host_architecture().name == "x86_64" else 172),
}
if seccomp.host_architecture().has_x32:
    seen["x32 getpid"] = call(0x40000000 | 39)
ran = []
thread = threading.Thread(target=lambda: ran.append(True))
thread.start()
thread.join()
seen["thread"] = ran == [True]
print(json.dumps(seen))
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="the filter knows x86_64 and aarch64")
def test_the_filter_refuses_namespaces_answers_clone3_enosys_and_allows_the_rest() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen.pop("clone3") == "ENOSYS"  # glibc then falls back to clone, whose flags the filter reads
    assert seen.pop("getpid") == "allowed"
    assert seen.pop("thread") is True
    assert seen == dict.fromkeys(seen, "EPERM")  # unshare, setns, open_by_handle_at and, on x86_64, x32


def test_both_architectures_assemble_into_whole_instructions() -> None:
    for architecture in (X86_64, AARCH64):
        program = filter_program(architecture)
        assert len(program) % 8 == 0
        assert architecture.audit_arch.to_bytes(4, "little") in program


SHARING_CHILD = """
import ctypes, errno, json, os, socket
from berth.execution import seccomp

libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0
seccomp.installer(seccomp.filter_program(shared_host=True))()

def attempt(action):
    try:
        action()
        return "allowed"
    except OSError as error:
        return errno.errorcode[error.errno]

def unix_pair():
    left, right = socket.socketpair()
    left.sendall(b"x")
    assert right.recv(1) == b"x"

seen = {
    "tcp": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()),
    "udp over ipv6": attempt(lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close()),
    "netlink": attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close()),
    "unix": attempt(lambda: socket.socket(socket.AF_UNIX).close()),
    "unix pair": attempt(unix_pair),
    "setsid": attempt(os.setsid),
    "setpgid": attempt(lambda: os.setpgid(0, 0)),
}
child = os.fork()
if child == 0:
    os._exit(7)
seen["fork"] = os.WEXITSTATUS(os.waitpid(child, 0)[1])
print(json.dumps(seen))
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="the filter knows x86_64 and aarch64")
def test_sharing_the_host_refuses_sockets_but_unix_and_leaving_the_process_group() -> None:
    """The filter of the landlock isolation (no network or pid namespace of its own): no TCP, UDP or netlink
    socket, no new session or process group; Unix sockets and forks work."""
    done = subprocess.run(
        [sys.executable, "-c", SHARING_CHILD], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "tcp": "EPERM",
        "udp over ipv6": "EPERM",
        "netlink": "EPERM",
        "unix": "allowed",
        "unix pair": "allowed",
        "setsid": "EPERM",
        "setpgid": "EPERM",
        "fork": 7,
    }


def test_the_sharing_filter_assembles_on_both_architectures() -> None:
    for architecture in (X86_64, AARCH64):
        plain, sharing = filter_program(architecture), filter_program(architecture, shared_host=True)
        assert len(sharing) % 8 == 0
        assert len(sharing) == len(plain) + 6 * 8  # the socket check, its three instructions, setsid, setpgid
