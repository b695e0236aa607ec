"""The ``landlock`` isolation where it matters most: the run shares the host's uid (a non-root pod), so the uid
separates nothing and Landlock and seccomp must.

Here the test process stands in for the machine: it starts a "host" process of uid :data:`SHARED_UID` holding a
secret in its environment and listening on an abstract Unix socket, gives that uid a folder of secrets and
another run's folder, then starts the executor bootstrap **as the same uid** with the launch lines the ``local``
backend writes (:func:`~berth.default_plugins.exec.landlocked.run_confinement`), and a hostile program tries
everything. The same program run without the confinement, as the same uid, succeeds at each attack: the
refusals are Landlock's and seccomp's, not the uid's.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.default_plugins.exec.landlocked import landlock_abi, run_confinement
from berth.default_plugins.exec.local import LocalBackend, confinement_failure, package_folder
from berth.execution.limits import ExecLimits
from berth.execution.runs import ExecService
from berth.execution.sandbox import RunFolder, SandboxRequest
from berth_exec.confinement import CONFINEMENT_FAILED, FAILURE_MARK, Confinement
from berth_exec.landlock import FULL_ABI
from berth_exec.runner import launch_lines

pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(landlock_abi() < FULL_ABI, reason=f"needs Landlock ABI {FULL_ABI} (Linux 6.12+)"),
]

SHARED_UID = 61900
"""The host's and the run's uid in these tests (outside the leased range 61000-61063)."""
PYTHON = "/usr/bin/python3"
HOST_SECRET = "host-environ-secret-0001"
FILE_SECRET = "descriptor-secret-0002"
OTHER_RUN_SECRET = "other-run-secret-0003"
ABSTRACT_SOCKET = b"\0berth-landlock-test"
HOST = f"""
import signal, socket, sys, time
signal.signal(signal.SIGTERM, lambda *_: (print("host got SIGTERM", flush=True), sys.exit(3)))
server = socket.socket(socket.AF_UNIX)
server.bind({ABSTRACT_SOCKET!r})
server.listen()
print("ready", flush=True)
time.sleep(120)
"""
"""The host stand-in (a secret in its environment): a handler for SIGTERM that says so, an abstract socket."""

ATTACKS = """
import ctypes, errno, json, os, signal, socket, sys

host, secrets_file, other_run, listener = TARGETS
libc = ctypes.CDLL(None, use_errno=True)
seen = {}

def attempt(name, action):
    try:
        result = action()
        seen[name] = "allowed" if result is None else str(result)[:200]
    except OSError as error:
        seen[name] = errno.errorcode.get(error.errno, type(error).__name__)

def abstract():
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(b"\\0berth-landlock-test")

def ptrace():
    if libc.ptrace(16, host, None, None) != 0:  # PTRACE_ATTACH
        raise OSError(ctypes.get_errno(), "ptrace")
    libc.ptrace(17, host, None, None)  # PTRACE_DETACH

def unshare():
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        raise OSError(ctypes.get_errno(), "unshare")

def listed(path):
    return sorted(os.listdir(path))

attempt("host environ", lambda: open(f"/proc/{host}/environ", "rb").read().decode(errors="replace"))
attempt("host fd", lambda: os.readlink(f"/proc/{host}/fd/1"))  # its stdout
attempt("host memory", lambda: open(f"/proc/{host}/mem", "rb").read(1))
attempt("ptrace host", ptrace)
attempt("secret file", lambda: open(secrets_file).read())
attempt("other run's file", lambda: open(other_run).read())
attempt("other run's folder", lambda: listed(os.path.dirname(other_run)))
attempt("runs root", lambda: listed(os.path.dirname(os.path.dirname(os.environ["WORKDIR"]))))
attempt("write beside the secrets", lambda: open(secrets_file + ".planted", "w").write("x"))
attempt("write /tmp", lambda: open("/tmp/berth-landlock-planted", "w").write("x"))
attempt("tcp connect", lambda: socket.create_connection(("127.0.0.1", listener), timeout=2).close())
attempt("tcp bind", lambda: socket.socket().bind(("127.0.0.1", 0)))
attempt("udp socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close())
attempt("abstract socket of the host", abstract)
attempt("setsid", os.setsid)
attempt("write work", lambda: open(os.path.join(os.environ["WORKDIR"], "ok"), "w").write("ok"))
attempt("write out", lambda: open(os.path.join(os.environ["OUTPUT_DIR"], "ok"), "w").write("ok"))
attempt("unshare user namespace", unshare)  # last: unconfined, it succeeds and the process is another user's
attempt("signal the host", lambda: os.kill(host, signal.SIGTERM))
print(json.dumps(seen))
"""


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """A runs root with this run's folder and another run's, and a folder of secrets, all of :data:`SHARED_UID`."""
    root = Path("/tmp") / f"berth-landlock-{os.getpid()}"
    runs = root / "runs"
    folder = RunFolder(runs / "ex_this_run")
    for path in (folder.work, folder.out, folder.program.parent, folder.logs, runs / "ex_other_run", root / "etc"):
        path.mkdir(parents=True)
    (runs / "ex_other_run" / "notes.txt").write_text(OTHER_RUN_SECRET)
    (root / "etc" / "secrets.yaml").write_text(f"db: literal:{FILE_SECRET}\n")
    for inner, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            os.chown(os.path.join(inner, name), SHARED_UID, SHARED_UID)
    os.chown(root, SHARED_UID, SHARED_UID)
    os.chmod(root, 0o755)
    yield {"root": root, "run": folder.root, "secrets": root / "etc" / "secrets.yaml",
           "other": runs / "ex_other_run" / "notes.txt"}  # fmt: skip
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def host() -> Iterator[int]:
    """The host stand-in, running as :data:`SHARED_UID`: its pid."""
    process = subprocess.Popen(
        [PYTHON, "-c", HOST],
        env={"BERTH_TEST_SECRET": HOST_SECRET},
        user=SHARED_UID,
        group=SHARED_UID,
        extra_groups=[],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    yield process.pid
    process.kill()
    process.wait()


def run_bootstrap(
    machine: dict[str, Path], host: int, listener: int, confinement: Confinement | None
) -> subprocess.CompletedProcess[str]:
    """The ``local`` backend's ``landlock`` executor for the attacks, started as the host's own uid."""
    folder = RunFolder(machine["run"])
    request = SandboxRequest("ex_this_run", "probe", folder, "token", ExecLimits(), SHARED_UID, SHARED_UID, False)
    argv, env = LocalBackend(isolation="landlock", python=PYTHON).command(request, "landlock")
    targets = (host, str(machine["secrets"]), str(machine["other"]), listener)
    folder.program.write_text(f"TARGETS = {targets!r}\n{ATTACKS}")
    launch = launch_lines("token", str(folder.program), {"cpu_s": 30}, confinement)
    return subprocess.run(
        argv,
        input=launch,
        env=env,
        cwd=folder.work,
        user=SHARED_UID,
        group=SHARED_UID,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def attacks_of(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert done.returncode == 0, done.stderr
    seen: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def test_a_run_sharing_the_hosts_uid_reaches_nothing_of_the_host(
    machine: dict[str, Path], host: int, listener: int
) -> None:
    folder = RunFolder(machine["run"])
    confinement = run_confinement(folder, python=PYTHON, package=package_folder(), minimum_abi=FULL_ABI)
    seen = attacks_of(run_bootstrap(machine, host, listener, confinement))
    assert seen == {
        "host environ": "EACCES",  # Landlock: /proc of a process outside the sandbox
        "host fd": "EACCES",
        "host memory": "EACCES",
        "ptrace host": "EPERM",
        "secret file": "EACCES",  # Landlock: nothing beneath the allowed folders
        "other run's file": "EACCES",
        "other run's folder": "EACCES",
        "runs root": "EACCES",
        "write beside the secrets": "EACCES",
        "write /tmp": "EACCES",
        "tcp connect": "EPERM",  # seccomp: no socket but AF_UNIX (and Landlock refuses TCP behind it)
        "tcp bind": "EPERM",
        "udp socket": "EPERM",
        "abstract socket of the host": "EPERM",  # Landlock's scoping (ABI 6)
        "unshare user namespace": "EPERM",  # seccomp
        "setsid": "EPERM",  # seccomp: the run stays in the process group the host kills
        "signal the host": "EPERM",  # Landlock's scoping (ABI 6)
        "write work": "2",
        "write out": "2",
    }


def test_without_the_confinement_the_same_uid_reaches_all_of_it(
    machine: dict[str, Path], host: int, listener: int
) -> None:
    """The control: what the test above refuses, the uid alone allows (so the refusals prove the confinement)."""
    seen = attacks_of(run_bootstrap(machine, host, listener, None))
    assert HOST_SECRET in seen["host environ"]
    assert FILE_SECRET in seen["secret file"]
    assert OTHER_RUN_SECRET in seen["other run's file"]
    allowed = {"tcp connect", "tcp bind", "udp socket", "abstract socket of the host", "setsid", "ptrace host"}
    assert {name for name in allowed if seen[name] == "allowed"} == allowed
    os.unlink(str(machine["secrets"]) + ".planted")
    os.unlink("/tmp/berth-landlock-planted")


def test_a_confinement_that_fails_ends_the_bootstrap_before_the_program(machine: dict[str, Path]) -> None:
    folder = RunFolder(machine["run"])
    folder.program.write_text(f"open({str(folder.out / 'ran')!r}, 'w').write('the program ran')\n")
    confinement = Confinement([("landlock_read", "/no/such/folder")], minimum_abi=1)
    launch = launch_lines("token", str(folder.program), {}, confinement)
    request = SandboxRequest("ex_this_run", "probe", folder, "token", ExecLimits(), SHARED_UID, SHARED_UID, False)
    argv, env = LocalBackend(isolation="landlock", python=PYTHON).command(request, "landlock")
    with open(folder.logs / "stderr", "w") as stderr:
        done = subprocess.run(argv, input=launch, env=env, stderr=stderr, text=True, timeout=60, check=False)
    assert done.returncode == CONFINEMENT_FAILED
    assert not (folder.out / "ran").exists()
    assert (folder.logs / "stderr").read_text().startswith(FAILURE_MARK)
    assert confinement_failure(folder.logs / "stderr") == "rule for /no/such/folder: No such file or directory"


async def test_a_kernel_below_the_profiles_abi_refuses_the_run_and_says_why() -> None:
    service = ExecService(root=Path("/tmp") / f"berth-landlock-refused-{os.getpid()}")
    backend = LocalBackend(isolation="landlock", landlock_min_abi=landlock_abi() + 1)
    result = await service.run("open('/tmp/berth-never', 'w')", backend=backend, limits=ExecLimits(), bundle_id="p")
    envelope = result.envelope
    assert not envelope.ok
    assert envelope.error is not None
    assert envelope.error.code == "sandbox_failed"
    assert f"needs ABI {landlock_abi() + 1}" in envelope.error.message
    assert "landlock_min_abi" in envelope.error.message
    assert envelope.exit_code is None  # nothing was started


def test_doctor_says_landlock_is_in_force_and_what_it_confines() -> None:
    findings = {f.check: f for f in LocalBackend(isolation="landlock").doctor()}
    assert findings["Landlock"].ok
    assert findings["Landlock"].detail.startswith(f"ABI {landlock_abi()}: confines files")
    assert "sockets but AF_UNIX refused" in findings["seccomp filter"].detail
    assert findings["isolation"].ok
    assert findings["isolation"].detail.startswith("landlock (requested landlock): Landlock and seccomp on the host's")
    refused = {f.check: f for f in LocalBackend(isolation="landlock", landlock_min_abi=99).doctor()}
    assert not refused["Landlock"].ok
    assert not refused["isolation"].ok


def test_signals_from_the_host_still_end_the_run(machine: dict[str, Path]) -> None:
    """Scoping stops the run's signals going out, never the host's coming in: the wall-time kill works."""
    folder = RunFolder(machine["run"])
    folder.program.write_text("import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    confinement = run_confinement(folder, python=PYTHON, package=package_folder(), minimum_abi=FULL_ABI)
    request = SandboxRequest("ex_this_run", "probe", folder, "token", ExecLimits(), SHARED_UID, SHARED_UID, False)
    argv, env = LocalBackend(isolation="landlock", python=PYTHON).command(request, "landlock")
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, user=SHARED_UID,
        group=SHARED_UID, extra_groups=[], process_group=0,
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(launch_lines("token", str(folder.program), {}, confinement))
    process.stdin.close()
    assert process.stdout.readline().strip() == "started"
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(timeout=10) == -signal.SIGKILL


def test_the_run_dies_with_the_host_thread_that_started_it(machine: dict[str, Path]) -> None:
    """With no pid namespace, the parent-death signal is what ends a run whose host died (SIGKILL, OOM)."""
    folder = RunFolder(machine["run"])
    folder.program.write_text("import time\ntime.sleep(60)\n")
    confinement = run_confinement(folder, python=PYTHON, package=package_folder(), minimum_abi=FULL_ABI)
    request = SandboxRequest("ex_this_run", "probe", folder, "token", ExecLimits(), SHARED_UID, SHARED_UID, False)
    argv, env = LocalBackend(isolation="landlock", python=PYTHON).command(request, "landlock")
    launch = launch_lines("token", str(folder.program), {}, confinement)
    host_stand_in = (
        "import subprocess, sys\n"
        f"run = subprocess.Popen({argv!r}, stdin=subprocess.PIPE, env={env!r}, user={SHARED_UID}, "
        f"group={SHARED_UID}, extra_groups=[], text=True)\n"
        f"run.stdin.write({launch!r}); run.stdin.close()\n"
        "print(run.pid, flush=True)\n"
        "sys.stdin.read()\n"  # until the test says: then this host dies without waiting for its run
    )
    host = subprocess.Popen(
        [sys.executable, "-c", host_stand_in], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert host.stdin is not None and host.stdout is not None
    run_pid = int(host.stdout.readline())
    run_ended = os.pidfd_open(run_pid)
    try:
        assert not select.select([run_ended], [], [], 0.5)[0]  # the run lives while its host does
        host.kill()
        host.wait()
        assert select.select([run_ended], [], [], 10)[0], "the run outlived its host"
    finally:
        os.close(run_ended)
