"""The ``fargate`` exec backend end to end against moto's server (ECS, S3, Secrets Manager) with each task
played for real in Docker by :class:`berth_aws.testing.TaskPlayer`: snapshot, payload secret, ``run_task``,
polling, the task entry serving the bundle's tools to its executor, restore, and the cleanup, on success and on
every failure path. Markers ``aws`` and ``docker``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from berth_docker.engine import client_for
from berth_docker.testing import build_test_image

from berth.execution.limits import ExecLimits
from berth.execution.runs import ExecService
from berth.execution.sandbox import SandboxRequest
from berth_aws.fargate import FargateBackend, RunLocation
from berth_aws.testing import TaskPlayer, create_exec_world

pytestmark = [pytest.mark.aws, pytest.mark.docker, pytest.mark.usefixtures("clean_berth_env")]

REPO = Path(__file__).resolve().parents[3]
BASE = Path(sys.base_prefix).resolve()
REGION = "eu-west-1"
ACCOUNT = "123456789012"  # moto's default account
IMAGE = "berth-exec:test"
TASK_VARIABLES = {
    "BERTH_EXEC_PAYLOAD_SECRET_ID",
    "BERTH_EXEC_INPUT_URI",
    "BERTH_EXEC_OUTPUT_URI",
    "BERTH_EXEC_REGION",
    "BERTH_EXEC_ENDPOINT_URL",
    "BERTH_EXEC_DEADLINE_S",
}


@pytest.fixture(scope="module")
def exec_image() -> str:
    return build_test_image(IMAGE)


@pytest.fixture
def aws(moto_endpoint: str, aws_credentials: None) -> dict[str, Any]:
    """A VPC with a subnet and security group, an ECS cluster with the exec task definitions, a bucket; a profile
    as Fargate needs it (``executor_namespaces: false``: a Fargate task cannot be granted ``CAP_SYS_ADMIN``)."""
    world = create_exec_world(moto_endpoint, IMAGE, region=REGION)
    world["profile"].update(
        supervisor_python=sys.executable, hidden_paths=[str(REPO), str(BASE)], executor_namespaces=False
    )
    return world


@pytest.fixture
def player(aws: dict[str, Any], exec_image: str, moto_endpoint: str) -> Iterator[TaskPlayer]:
    from moto.ecs.models import ecs_backends

    task_player = TaskPlayer(
        backend=ecs_backends[ACCOUNT][REGION],
        docker=client_for(None),
        mounts={str(REPO): {"bind": str(REPO), "mode": "ro"}, str(BASE): {"bind": str(BASE), "mode": "ro"}},
        credentials={"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"},
        endpoint=moto_endpoint,
    )
    task_player.install()
    try:
        yield task_player
    finally:
        task_player.uninstall()


def left_behind(aws: dict[str, Any]) -> dict[str, list[str]]:
    """Every secret and every object of the run's bucket still there."""
    secrets = [s["Name"] for s in aws["clients"]["secretsmanager"].list_secrets().get("SecretList", [])]
    objects = [o["Key"] for o in aws["clients"]["s3"].list_objects_v2(Bucket=aws["bucket"]).get("Contents", [])]
    return {"secrets": [name for name in secrets if name.startswith("berth-exec/")], "objects": objects}


NOTHING = {"secrets": [], "objects": []}


def run(aws: dict[str, Any], code: str, tmp_path: Path, **overrides: Any) -> Any:
    profile = {**aws["profile"], **overrides}
    backend = FargateBackend.from_profile(profile)
    service = ExecService(root=tmp_path / "runs")
    limits = ExecLimits(timeout_s=float(profile["timeout_s"]), memory_mb=2048)
    return asyncio.run(service.run(code, backend=backend, limits=limits, bundle_id="hello"))


def test_a_program_in_a_task_calls_the_bundles_tool_and_nothing_is_left(
    tmp_path: Path, aws: dict[str, Any], player: TaskPlayer
) -> None:
    player.capabilities = ("SYS_ADMIN",)  # a task definition that grants it (ECS on EC2; Fargate cannot)
    profile = {**aws["profile"], "executor_namespaces": True}
    descriptors = tmp_path / "descriptors"
    shutil.copytree(REPO / "descriptors", descriptors, ignore=shutil.ignore_patterns("schema"))
    assembly = descriptors / "assembly.yaml"
    text = assembly.read_text()
    anchor = "    profiles:\n"
    assembly.write_text(text.replace(anchor, anchor + f"      task: {json.dumps(profile)}\n", 1))
    (descriptors / "bundles.secrets.yaml").write_text("bundles:\n  docs: {search_api_key: 'literal:docs-only-7777'}\n")
    program = tmp_path / "greet.py"
    program.write_text(
        "import json, os\nfrom berth_exec import tools\n"
        "greeting = tools.call('hello.greet', name='Ann')\n"
        "open(os.path.join(os.environ['OUTPUT_DIR'], 'greeting.txt'), 'w').write(greeting)\n"
        "print(json.dumps({'greeting': greeting, 'environ': sorted(os.environ), 'uid': os.getuid()}))\n"
    )
    executable = Path(sys.executable).parent / "berth"
    result = subprocess.run(
        [str(executable), "exec", "run", str(program), "--descriptors", str(descriptors), "--profile", "task",
         "--bundle", "hello", "--tenant", "acme", "--project", "support", "--out", "kept"],
        capture_output=True, text=True, cwd=tmp_path, check=False, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    envelope = json.loads(result.stdout)
    assert envelope["ok"] is True, envelope["report_text"]
    assert envelope["backend"] == "fargate"
    assert "(fargate-namespaces)" in envelope["report_text"]
    seen = json.loads(envelope["user_out_tail"])
    assert seen["greeting"] == "Hello, Ann!"
    assert set(seen["environ"]) - {"LC_CTYPE"} == {
        "BUNDLE_ID", "EXECUTION_ID", "OUTPUT_DIR", "SUPERVISOR_SOCKET_PATH", "WORKDIR",
    }  # fmt: skip
    assert seen["uid"] != 0
    assert (tmp_path / "kept" / "greeting.txt").read_text() == "Hello, Ann!"
    # the task was started with where its payload is, never the payload: no token, no descriptor, no secret
    (task,) = player.played
    override = task.overrides["containerOverrides"][0]
    assert {item["name"] for item in override["environment"]} == TASK_VARIABLES
    assert "docs-only-7777" not in json.dumps(task.overrides) + result.stdout + result.stderr
    assert "BERTH_DESCRIPTOR" not in json.dumps(task.overrides)
    assert task.stop_code == "EssentialContainerExited"
    assert left_behind(aws) == NOTHING


def test_a_failing_program_hands_back_its_status_stderr_and_files(
    tmp_path: Path, aws: dict[str, Any], player: TaskPlayer
) -> None:
    code = (
        "import os, sys\nopen(os.path.join(os.environ['OUTPUT_DIR'], 'partial.csv'), 'w').write('a,b\\n1,2\\n')\n"
        "sys.stderr.write('bad row 3\\n')\nsys.exit(3)\n"
    )
    envelope = run(aws, code, tmp_path).envelope
    assert envelope.error is not None and envelope.error.code == "nonzero_exit", envelope.report_text
    assert envelope.exit_code == 3
    assert "bad row 3" in envelope.runtime_err_tail
    assert [a.path for a in envelope.artifacts] == ["out/partial.csv"]
    assert left_behind(aws) == NOTHING


def test_a_missing_image_is_a_failed_start_with_ecs_reason(
    tmp_path: Path, aws: dict[str, Any], player: TaskPlayer
) -> None:
    envelope = run(aws, "print(1)", tmp_path, task_definition=f"absent-{aws['suffix']}").envelope
    assert envelope.error is not None and envelope.error.code == "sandbox_failed"
    assert "image could not be pulled" in envelope.error.message
    assert "berth-exec:absent" in envelope.error.message
    assert left_behind(aws) == NOTHING


def test_no_capacity_is_a_failed_start(
    tmp_path: Path, aws: dict[str, Any], player: TaskPlayer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.core.responses import ActionResult
    from moto.ecs.responses import EC2ContainerServiceResponse

    def no_capacity(self: Any) -> ActionResult:  # ECS's answer when Fargate has no capacity for the task
        reason = "Capacity is unavailable at this time. Please try again later or in a different availability zone"
        return ActionResult({"tasks": [], "failures": [{"reason": reason}]})

    monkeypatch.setattr(EC2ContainerServiceResponse, "run_task", no_capacity)
    envelope = run(aws, "print(1)", tmp_path).envelope
    assert envelope.error is not None and envelope.error.code == "sandbox_failed"
    assert "no capacity to start the task: Capacity is unavailable" in envelope.error.message
    assert left_behind(aws) == NOTHING


def test_a_task_that_never_starts_is_stopped_and_reported(
    tmp_path: Path, aws: dict[str, Any], player: TaskPlayer
) -> None:
    player.mode = "hold"
    envelope = run(aws, "print(1)", tmp_path, start_timeout_s=0.5).envelope
    assert envelope.error is not None and envelope.error.code == "sandbox_failed"
    assert "did not start within 0.5 s" in envelope.error.message
    (task,) = player.played
    assert task.desired_status == "STOPPED" and task.stopped_reason == "berth: the task did not start in time"
    assert left_behind(aws) == NOTHING


def test_the_wall_time_stops_the_task_and_keeps_what_the_program_wrote(
    tmp_path: Path, aws: dict[str, Any], player: TaskPlayer
) -> None:
    code = (
        "import os, time\nopen(os.path.join(os.environ['OUTPUT_DIR'], 'progress.txt'), 'w').write('step 1')\n"
        "print('working', flush=True)\ntime.sleep(600)\n"
    )
    envelope = run(aws, code, tmp_path, timeout_s=4).envelope
    assert envelope.error is not None and envelope.error.code == "timeout", envelope.report_text
    assert [a.path for a in envelope.artifacts] == ["out/progress.txt"]
    assert envelope.user_out_tail == "working\n"
    (task,) = player.played
    assert task.stopped_reason == "berth: exec timeout"
    assert left_behind(aws) == NOTHING


def test_a_task_whose_host_is_gone_ends_the_run_itself_at_its_deadline(
    tmp_path: Path, aws: dict[str, Any], player: TaskPlayer
) -> None:
    # the host launches the task and dies: nobody polls the task or calls stop_task
    backend = FargateBackend.from_profile({**aws["profile"], "executor_namespaces": False, "task_deadline_grace_s": 1})
    limits = ExecLimits(timeout_s=2, memory_mb=2048)
    code = (
        "import os, time\nopen(os.path.join(os.environ['OUTPUT_DIR'], 'progress.txt'), 'w').write('step 1')\n"
        "time.sleep(600)\n"
    )
    service = ExecService(root=tmp_path / "runs")
    folder, owner = service._prepare("ex_orphaned", code, [], None)
    request = SandboxRequest("ex_orphaned", "hello", folder, "token", limits, 61000, 61000, False)
    location = RunLocation(backend.bucket, backend.prefix, request.exec_id)
    task_arn, failure = backend.launch(request, location)
    assert task_arn is not None, failure
    player.join()  # the task's container ends by itself, or this gives up after 120 s
    (task,) = player.played
    assert task.status == "STOPPED"
    report = backend.restore_output(request, location)
    assert report["overdue"] is True and report["stopped"] is True
    assert (folder.out / "progress.txt").read_text() == "step 1"
    backend.clean_up(location)
    os.close(owner)
    assert left_behind(aws) == NOTHING


def test_a_spot_interruption_is_a_stopped_run(tmp_path: Path, aws: dict[str, Any], player: TaskPlayer) -> None:
    player.mode = "interrupt"
    envelope = run(aws, "import time\ntime.sleep(600)", tmp_path).envelope
    assert envelope.error is not None and envelope.error.code == "sandbox_stopped", envelope.report_text
    assert "SpotInterruption: Your Spot Task was interrupted." in envelope.error.message
    assert left_behind(aws) == NOTHING


def test_a_memory_bomb_ends_as_the_tasks_memory_limit(tmp_path: Path, aws: dict[str, Any], player: TaskPlayer) -> None:
    code = "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))\n"
    envelope = run(aws, code, tmp_path).envelope
    assert envelope.error is not None and envelope.error.code == "memory_limit", envelope.report_text
    assert left_behind(aws) == NOTHING


def test_a_lost_input_snapshot_fails_the_run_before_the_program(
    tmp_path: Path, aws: dict[str, Any], player: TaskPlayer
) -> None:
    def drop_input(environment: dict[str, str]) -> None:
        bucket, _, key = environment["BERTH_EXEC_INPUT_URI"].removeprefix("s3://").partition("/")
        aws["clients"]["s3"].delete_object(Bucket=bucket, Key=key)

    player.mode = "drop-input"
    player.on_input = drop_input
    envelope = run(aws, "print(1)", tmp_path).envelope
    assert envelope.error is not None and envelope.error.code == "sandbox_failed"
    assert "the task could not prepare the run: the input snapshot could not be read (404)" in envelope.error.message
    assert left_behind(aws) == NOTHING


def test_cancelling_the_run_stops_the_task_and_cleans_up(
    tmp_path: Path, aws: dict[str, Any], player: TaskPlayer
) -> None:
    backend = FargateBackend.from_profile(aws["profile"])
    service = ExecService(root=tmp_path / "runs")

    async def cancel_once_running() -> None:
        running = asyncio.ensure_future(
            service.run("import time\ntime.sleep(600)", backend=backend, limits=ExecLimits(), bundle_id="hello")
        )
        await asyncio.to_thread(player.running.wait, 60)  # the task's container started
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(cancel_once_running())
    (task,) = player.played
    assert task.status == "STOPPED" and task.stopped_reason == "berth: run cancelled"
    assert left_behind(aws) == NOTHING


def test_doctor_checks_the_cluster_task_definition_and_bucket(aws: dict[str, Any]) -> None:
    findings = {f.check: f for f in FargateBackend.from_profile(aws["profile"]).doctor()}
    profile = aws["profile"]
    assert findings[f"ECS cluster {profile['cluster']}"].ok
    assert findings[f"task definition {profile['task_definition']}"].ok
    assert findings[f"artifacts bucket {profile['artifacts_bucket']}"].ok
    broken = FargateBackend.from_profile({**profile, "container_name": "worker", "artifacts_bucket": "nope-bucket"})
    bad = {f.check: f for f in broken.doctor()}
    assert not bad[f"task definition {profile['task_definition']}"].ok
    assert "has no container 'worker' (has: exec)" in bad[f"task definition {profile['task_definition']}"].detail
    assert not bad["artifacts bucket nope-bucket"].ok


def test_without_namespaces_the_executor_is_still_another_uid_that_reads_no_root_process(
    tmp_path: Path, aws: dict[str, Any], player: TaskPlayer
) -> None:
    code = (
        "import json, os\n"
        "def readable(path):\n"
        "    try:\n        open(path, 'rb').read(1)\n        return True\n"
        "    except OSError:\n        return False\n"
        "print(json.dumps({'uid': os.getuid(), 'init_environ': readable('/proc/1/environ'),\n"
        "                  'task_environ': any(readable(f'/proc/{p}/environ') for p in os.listdir('/proc')\n"
        "                                      if p.isdigit() and int(p) != os.getpid())}))\n"
    )
    envelope = run(aws, code, tmp_path, executor_namespaces=False).envelope
    assert envelope.ok, envelope.report_text
    assert "(fargate-uid)" in envelope.report_text
    seen = json.loads(envelope.user_out_tail)
    assert seen["uid"] != 0
    assert seen["init_environ"] is False and seen["task_environ"] is False  # the task entry's and the supervisor's
    assert left_behind(aws) == NOTHING


def test_namespaces_the_task_cannot_make_fail_the_run_closed(
    tmp_path: Path, aws: dict[str, Any], player: TaskPlayer
) -> None:
    player.capabilities = ()  # as on Fargate: CAP_SYS_ADMIN cannot be added
    envelope = run(aws, "print('ran half-isolated')", tmp_path, executor_namespaces=True).envelope
    assert envelope.error is not None and envelope.error.code == "sandbox_failed", envelope.report_text
    assert "the executor could not be isolated" in envelope.error.message
    assert "executor_namespaces: false" in envelope.error.message
    assert "ran half-isolated" not in envelope.user_out_tail
    assert left_behind(aws) == NOTHING


def host_addresses() -> list[str]:
    """This machine's own addresses other than loopback and link-local ones: IPv4 from the kernel's local routes,
    IPv6 from ``/proc/net/if_inet6``."""
    found: set[str] = set()
    lines = Path("/proc/net/fib_trie").read_text().splitlines()
    for line, following in itertools.pairwise(lines):
        if line.strip().startswith("|--") and following.strip() == "/32 host LOCAL":
            found.add(line.split()[-1])
    for line in Path("/proc/net/if_inet6").read_text().splitlines():
        found.add(str(ipaddress.IPv6Address(bytes.fromhex(line.split()[0]))))
    addresses = [ipaddress.ip_address(a) for a in found]
    return sorted(str(a) for a in addresses if not (a.is_loopback or a.is_link_local))


def test_a_program_in_a_task_reaches_the_aws_endpoint_and_nothing_of_the_host(
    tmp_path: Path, aws: dict[str, Any], player: TaskPlayer, moto_endpoint: str
) -> None:
    moto = urlparse(moto_endpoint)
    with socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True) as listener:
        # a service on every address of the host, so "unreachable" below is the task's network, not a closed port
        port = listener.getsockname()[1]
        targets = [
            ("127.0.0.1", 5432),  # PostgreSQL
            ("127.0.0.1", 6379),  # Redis
            ("127.0.0.1", port),
            ("::1", port),
            *((address, port) for address in host_addresses()),
            ("169.254.169.254", 80),  # an instance metadata service
            (moto.hostname, moto.port),  # the AWS endpoint: the task's own way out, as on Fargate
        ]
        code = (
            "import json, socket\n"
            "def reach(host, port):\n"
            "    try:\n"
            "        socket.create_connection((host, port), timeout=10).close()\n"
            "        return 'connected'\n"
            "    except OSError as error:\n"
            "        return type(error).__name__\n"
            f"print(json.dumps({{f'{{h}} {{p}}': reach(h, p) for h, p in {targets!r}}}))\n"
        )
        envelope = run(aws, code, tmp_path).envelope
    assert envelope.ok, envelope.report_text
    assert "(fargate-uid)" in envelope.report_text  # the executor shares the task's network, as on Fargate
    reached = json.loads(envelope.user_out_tail)
    assert reached.pop(f"{moto.hostname} {moto.port}") == "connected"
    assert len(reached) >= 6
    assert {target: outcome for target, outcome in reached.items() if outcome == "connected"} == {}
    assert left_behind(aws) == NOTHING
    player.join()  # the task's container and its pause container are gone with it
    (task,) = player.played
    assert client_for(None).containers.list(all=True, filters={"label": f"berth.test.ecs_task={task.id}"}) == []
