"""The executor's isolation, proven with the attacks a model would write, against every sandbox backend.

Each test runs a real program in the real sandbox (bubblewrap; the Landlock-confined bootstrap; a container of a
real Docker engine, split and combined) and asserts on what the program could or could not do, as the envelope
and its output report.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import textwrap
from collections.abc import AsyncIterator, Collection
from pathlib import Path
from typing import Any

import pytest
from berth_docker.backend import DockerBackend

from berth.default_plugins.exec.local import LocalBackend
from berth.execution.limits import ExecLimits
from berth.execution.runs import ExecRun, ExecService
from berth.execution.sandbox import ExecBackend
from berth.execution.supervisor import SupervisorRefusal

pytestmark = pytest.mark.sandbox

# cpu_s well under timeout_s: on a loaded 2-core machine a busy loop (in a CPU-quota container started within the
# wall time) must reach its CPU limit long before the wall clock runs out
LIMITS = ExecLimits(timeout_s=4, memory_mb=256, cpu_s=1, processes=32, file_size_mb=4)


class EchoTools:
    """A tool table that answers ``t.echo`` with its params (the turn-level test uses a real bundle)."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []

    @property
    def tool_ids(self) -> Collection[str]:
        return {"t.echo"}

    async def call(self, tool_id: str, params: dict[str, Any]) -> Any:
        self.received.append(params)
        return {"echo": params}

    async def read(self, path: str) -> str:
        raise SupervisorRefusal("read_paths_missing", f"{path} does not exist")


@pytest.fixture(
    params=[
        "local",
        "local-landlock",
        pytest.param("docker-split", marks=pytest.mark.docker),
        pytest.param("docker-combined", marks=pytest.mark.docker),
    ]
)
def backend(request: pytest.FixtureRequest) -> ExecBackend:
    if request.param == "local":
        return LocalBackend(isolation="bwrap")
    if request.param == "local-landlock":
        return LocalBackend(isolation="landlock")
    image = request.getfixturevalue("exec_image")
    if request.param == "docker-split":
        return DockerBackend(image=image, strategy="split")
    return DockerBackend(image=image, strategy="combined", **request.getfixturevalue("combined_supervisor"))


@pytest.fixture
def service(tmp_path: Path) -> ExecService:
    return ExecService(root=Path("/tmp") / f"berth-exec-test-{os.getpid()}")


def landlocked(backend: ExecBackend) -> bool:
    """Whether ``backend`` confines the run with Landlock on the host's namespaces (no sandbox of its own)."""
    return isinstance(backend, LocalBackend) and backend.isolation == "landlock"


def run_folders(outcome: dict[str, str]) -> tuple[str, str]:
    """The run's real ``work/`` and ``out/`` among the paths a probe tried (a Landlock run sees the host's paths)."""
    tried = [path.rpartition("/")[0] for path in outcome]
    return next(p for p in tried if p.endswith("/work")), next(p for p in tried if p.endswith("/out"))


async def run(service: ExecService, backend: ExecBackend, code: str, **kwargs: Any) -> ExecRun:
    kwargs.setdefault("limits", LIMITS)
    return await service.run(textwrap.dedent(code), backend=backend, bundle_id="probe", **kwargs)


def printed(result: ExecRun) -> dict[str, Any]:
    """The JSON object the probe printed last."""
    return json.loads(result.envelope.user_out_tail.strip().splitlines()[-1])


async def test_a_clean_program_succeeds_and_hands_back_its_files(service: ExecService, backend: ExecBackend) -> None:
    result = await run(
        service,
        backend,
        """
        import os, pathlib
        pathlib.Path(os.environ["OUTPUT_DIR"], "charts").mkdir()
        pathlib.Path(os.environ["OUTPUT_DIR"], "charts", "a.csv").write_text("x,y\\n1,2\\n")
        print("done")
        """,
    )
    envelope = result.envelope
    assert envelope.ok, envelope.report_text
    assert envelope.exit_code == 0
    assert envelope.user_out_tail == "done\n"
    assert [(a.path, a.mime, a.size) for a in envelope.artifacts] == [("out/charts/a.csv", "text/csv", 8)]
    assert envelope.backend == backend.name


async def test_no_network_not_even_the_hosts_loopback(
    service: ExecService, backend: ExecBackend, listener: int
) -> None:
    result = await run(
        service,
        backend,
        f"""
        import json, socket
        outcome = {{}}
        for name, address in {{"api": ("127.0.0.1", {listener}), "public": ("1.1.1.1", 53),
                               "dns": ("8.8.8.8", 53)}}.items():
            try:
                socket.create_connection(address, timeout=2).close()
                outcome[name] = "connected"
            except OSError as error:
                outcome[name] = type(error).__name__
        try:
            outcome["interfaces"] = [name for _, name in socket.if_nameindex()]
        except OSError as error:
            outcome["interfaces"] = type(error).__name__
        print(json.dumps(outcome))
        """,
    )
    outcome = printed(result)
    assert outcome["api"] != "connected"
    assert outcome["public"] != "connected"
    assert outcome["dns"] != "connected"
    if landlocked(backend):  # the host's network namespace, but no socket to see it with (netlink is refused too)
        assert outcome["interfaces"] == "PermissionError"
    else:
        assert outcome["interfaces"] == ["lo"]


async def test_no_secrets_in_the_environment_proc_or_files(
    service: ExecService, backend: ExecBackend, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-value-0001")
    descriptors = tmp_path / "descriptors"
    descriptors.mkdir()
    (descriptors / "secrets.yaml").write_text("db: literal:secret-value-0002\n")
    other_tenant = Path(service.root) / "ex_other_tenant"
    other_tenant.mkdir(parents=True, exist_ok=True)
    (other_tenant / "notes.txt").write_text("globex secret-value-0003")
    result = await run(
        service,
        backend,
        f"""
        import json, os
        seen = {{"environ": dict(os.environ), "proc": {{}}, "files": {{}}}}
        for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
            for part in ("environ", "cmdline"):
                try:
                    data = open(f"/proc/{{pid}}/{{part}}", "rb").read()
                    seen["proc"][pid + "/" + part] = data.decode(errors="replace")
                except OSError as error:
                    seen["proc"][pid + "/" + part] = type(error).__name__
        for path in [{str(descriptors / "secrets.yaml")!r}, {str(other_tenant / "notes.txt")!r}, "/etc/shadow",
                     "/root/.bashrc", "/proc/1/root/etc/shadow", {str(Path.cwd() / "pyproject.toml")!r}]:
            try:
                seen["files"][path] = open(path).read()
            except OSError as error:
                seen["files"][path] = type(error).__name__
        with open(os.path.join(os.environ["OUTPUT_DIR"], "seen.json"), "w") as handle:  # more than stdout's tail
            json.dump(seen, handle)
        """,
    )
    seen = json.loads(next(f.data for f in result.outputs if f.relative == "seen.json"))
    assert set(seen["environ"]) == {"WORKDIR", "OUTPUT_DIR", "EXECUTION_ID", "BUNDLE_ID"}  # exactly, nothing else
    everything = json.dumps(seen)
    for secret in ("sk-ant-secret-value-0001", "secret-value-0002", "secret-value-0003"):
        assert secret not in everything
    assert all(outcome in {"FileNotFoundError", "PermissionError"} for outcome in seen["files"].values()), seen["files"]
    if landlocked(backend):  # the host's pid namespace: it sees the processes, never what they hold
        environments = {key: what for key, what in seen["proc"].items() if key.endswith("/environ")}
        assert sum(what != "PermissionError" for what in environments.values()) <= 3  # the run's own processes
    else:
        assert len([key for key in seen["proc"] if key.endswith("/cmdline")]) <= 3  # the sandbox's own processes only


async def test_writes_outside_work_and_out_fail(service: ExecService, backend: ExecBackend) -> None:
    result = await run(
        service,
        backend,
        """
        import json, os, sys
        outcome = {}
        shared_memory = "/dev/shm/x-" + os.environ["EXECUTION_ID"]
        for path in ["/x", "/usr/x", "/tmp/x", "/opt/berth/x", os.path.join(os.path.dirname(sys.argv[0]), "x"),
                     shared_memory, "/proc/x", os.path.join(os.environ["WORKDIR"], "ok"),
                     os.path.join(os.environ["OUTPUT_DIR"], "ok")]:
            try:
                open(path, "w").write("x")
                outcome[path] = "written"
            except OSError as error:
                outcome[path] = type(error).__name__
        if outcome[shared_memory] == "written":
            os.remove(shared_memory)
        print(json.dumps(outcome))
        """,
    )
    outcome = printed(result)
    written = sorted(path.rpartition("/")[0] for path, what in outcome.items() if what == "written")
    # /dev/shm is the run's own tmpfs (multiprocessing needs it), bounded and gone with the run; with Landlock, the
    # machine's, where the run may use files whose name it knows but list none
    work, out = ("/workspace/work", "/workspace/out") if not landlocked(backend) else run_folders(outcome)
    assert written == sorted(["/dev/shm", out, work]), outcome


@pytest.mark.parametrize(
    ("attack", "code", "limit"),
    [
        ("fork bomb", "import os\nwhile True:\n    os.fork()", "process_limit"),
        ("memory bomb", "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))", "memory_limit"),
        ("infinite loop", "while True:\n    pass", "cpu_limit"),
        ("sleeper", "import time\ntime.sleep(60)", "timeout"),
        (
            "huge file",
            "import os\nopen(os.environ['OUTPUT_DIR'] + '/big', 'wb').write(b'x' * (64 << 20))",
            "file_size_limit",
        ),
        ("output flood", "while True:\n    print('x' * 65536)", "file_size_limit"),
    ],
)
async def test_limits_stop_the_attack_and_say_which(
    service: ExecService, backend: ExecBackend, attack: str, code: str, limit: str
) -> None:
    # the CPU-time limit must bind before the wall time does: on a loaded machine a run gets less than a core (and
    # docker combined starts its supervisor first), so its wall time is given room over its one CPU second
    limits = dataclasses.replace(LIMITS, timeout_s=20) if limit == "cpu_limit" else LIMITS
    result = await run(service, backend, code, limits=limits)
    envelope = result.envelope
    assert not envelope.ok, attack
    assert envelope.error is not None
    assert envelope.error.code == limit, (attack, envelope.report_text)
    assert envelope.duration_s < limits.timeout_s + 2


async def test_a_child_process_sees_only_the_documented_variables(service: ExecService, backend: ExecBackend) -> None:
    result = await run(
        service,
        backend,
        """
        import subprocess
        print(subprocess.run(["/usr/bin/env"], capture_output=True, text=True).stdout, end="")
        """,
    )
    assert result.envelope.ok, result.envelope.report_text
    names = sorted(line.split("=", 1)[0] for line in result.envelope.user_out_tail.splitlines())
    assert names == ["BUNDLE_ID", "EXECUTION_ID", "OUTPUT_DIR", "WORKDIR"]


KERNEL_ATTACKS = """
import ctypes, errno, json, multiprocessing, os, platform, signal, subprocess, threading, time

libc = ctypes.CDLL(None, use_errno=True)
KEYCTL, BPF, CLONE = {"x86_64": (250, 321, 56), "aarch64": (219, 280, 220)}[platform.machine()]
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000

def outcome(result):
    return "allowed" if result >= 0 else errno.errorcode[ctypes.get_errno()]

def clone_new_user():
    pid = libc.syscall(CLONE, CLONE_NEWUSER | signal.SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
    return outcome(pid)

def ptrace_own_child():
    child = os.fork()
    if child == 0:
        time.sleep(30)
        os._exit(0)
    try:
        return outcome(libc.ptrace(16, child, None, None))  # PTRACE_ATTACH
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)

def unshare_command():
    try:
        done = subprocess.run(["unshare", "-U", "true"], capture_output=True, text=True)
    except OSError as error:
        return type(error).__name__
    return "allowed" if done.returncode == 0 else done.stderr.strip()

def square(n):
    return n * n

attacks = {  # in this order: once unshare(CLONE_NEWUSER) is allowed, the process is root in its new namespace
    "unshare -U": unshare_command(),
    "clone(CLONE_NEWUSER)": clone_new_user(),
    "unshare(CLONE_NEWUSER)": outcome(libc.unshare(CLONE_NEWUSER)),
    "unshare(CLONE_NEWNS)": outcome(libc.unshare(CLONE_NEWNS)),
    "mount": outcome(libc.mount(b"none", os.environ["WORKDIR"].encode(), b"tmpfs", 0, None)),
    "ptrace": ptrace_own_child(),
    "keyctl": outcome(libc.syscall(KEYCTL, 0, -3, 1)),  # KEYCTL_GET_KEYRING_ID of the session keyring
    "bpf": outcome(libc.syscall(BPF, 0, None, 0)),  # BPF_MAP_CREATE
}
seen = []
worker = threading.Thread(target=lambda: seen.append("thread"))
worker.start()
worker.join()
with multiprocessing.Pool(2) as pool:
    squares = pool.map(square, [1, 2, 3])
child = subprocess.run(["/usr/bin/env"], capture_output=True, text=True).returncode
print(json.dumps({"attacks": attacks, "ordinary": {"thread": seen, "pool": squares, "subprocess": child}}))
"""


async def test_namespaces_mounts_ptrace_keyring_and_bpf_are_refused(service: ExecService, backend: ExecBackend) -> None:
    """A program that tries to make a user namespace of its own (to be root in it and mount), ptrace, or reach the
    keyring or bpf is refused each with EPERM (bwrap's --disable-userns and seccomp filter; the combined entry's
    filter), while threads, a process pool and subprocesses still work."""
    if isinstance(backend, DockerBackend) and backend.strategy == "split":
        pytest.skip("split's executor has no capability at all and runs under Docker's own default seccomp profile")
    result = await run(service, backend, KERNEL_ATTACKS)
    assert result.envelope.ok, result.envelope.report_text
    seen = printed(result)
    attacks = seen.pop("attacks")
    assert attacks.pop("unshare -U") == "unshare: unshare failed: Operation not permitted", attacks
    assert attacks == dict.fromkeys(attacks, "EPERM")
    assert seen["ordinary"] == {"thread": ["thread"], "pool": [1, 4, 9], "subprocess": 0}


async def test_what_a_program_printed_before_its_timeout_is_in_the_envelope(
    service: ExecService, backend: ExecBackend
) -> None:
    result = await run(
        service,
        backend,
        """
        import sys, time
        print("step 1 done")
        sys.stdout.write("step 2 half")
        time.sleep(60)
        """,
    )
    envelope = result.envelope
    assert envelope.error is not None
    assert envelope.error.code == "timeout", envelope.report_text
    assert envelope.user_out_tail == "step 1 done\nstep 2 half"


async def test_a_fork_bomb_that_catches_the_refusal_still_reports_the_process_limit(
    service: ExecService, backend: ExecBackend
) -> None:
    if not isinstance(backend, LocalBackend) or not backend.use_cgroups:
        pytest.skip("only the local backend's pids cgroup counts refused forks (docs/exec.md)")
    result = await run(
        service,
        backend,
        """
        import os
        read_end, write_end = os.pipe()
        children = []
        try:
            while True:
                pid = os.fork()
                if pid == 0:
                    os.close(write_end)
                    os.read(read_end, 1)  # hold the slot until the parent closes the pipe
                    os._exit(0)
                children.append(pid)
        except OSError:
            pass
        os.close(write_end)
        for pid in children:
            os.waitpid(pid, 0)
        print(len(children), "children, then the refusal was caught")
        """,
    )
    envelope = result.envelope
    assert envelope.exit_code == 0
    assert "children, then the refusal was caught" in envelope.user_out_tail
    assert not envelope.ok
    assert envelope.error is not None
    assert (envelope.error.code, envelope.error.limit) == ("process_limit", "processes"), envelope.report_text


async def test_tool_calls_reach_the_dispatch_and_others_are_refused(service: ExecService, backend: ExecBackend) -> None:
    if getattr(backend, "runs_supervisor", False):
        pytest.skip("combined serves the bundle's own tools from its descriptors: plugins/docker/tests calls them")
    tools = EchoTools()
    result = await run(
        service,
        backend,
        """
        import json
        from berth_exec import tools
        from berth_exec.tools import SupervisorClient, ToolCallError
        import os
        outcome = {"echo": tools.call("t.echo", text="hi")}
        for name, action in {
            "other_tool": lambda: tools.call("react.write", path="files/x", content="x"),
            "read": lambda: tools.read("fi:turn_1.files/none.md"),
            "forged_token": lambda: SupervisorClient(os.environ["SUPERVISOR_SOCKET_PATH"], "forged").request(
                {"op": "call", "tool_id": "t.echo", "params": {}}),
        }.items():
            try:
                action()
                outcome[name] = "allowed"
            except ToolCallError as error:
                outcome[name] = error.code
        print(json.dumps(outcome))
        """,
        dispatch=tools,
    )
    outcome = printed(result)
    assert outcome == {
        "echo": {"echo": {"text": "hi"}},
        "other_tool": "tool_not_allowed",
        "read": "read_paths_missing",
        "forged_token": "unauthorized",
    }
    assert tools.received == [{"text": "hi"}]


async def test_a_process_of_another_uid_is_refused(tmp_path: Path) -> None:
    from berth.execution.supervisor import Supervisor
    from berth_exec.tools import SupervisorClient, ToolCallError

    socket_path = tmp_path / "s.sock"
    supervisor = Supervisor(socket_path, "the-token", 61999, EchoTools())
    await supervisor.start()
    try:
        client = SupervisorClient(str(socket_path), "the-token")
        with pytest.raises(ToolCallError) as refused:
            await asyncio.to_thread(client.request, {"op": "call", "tool_id": "t.echo", "params": {}})
        assert refused.value.code == "unauthorized"
    finally:
        await supervisor.aclose()


@pytest.fixture(autouse=True)
async def _no_leftover_runs(service: ExecService) -> AsyncIterator[None]:
    yield
    leftovers = (
        [p.name for p in service.root.glob("ex_*") if p.name != "ex_other_tenant"] if service.root.exists() else []
    )
    shutil.rmtree(service.root, ignore_errors=True)
    assert leftovers == []
