"""The docker backend as operators and the host use it: building the image, checking the engine, running a
bundle's tools from a container, and never leaving a container behind (a real Docker engine; ``docker`` marker).

The isolation itself (network, secrets, writes, limits, supervisor checks) is proven for every backend by
``tests/integration/exec/test_sandbox_isolation.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from berth_docker.backend import DockerBackend
from berth_docker.engine import CONTAINER_LABEL, DEADLINE_LABEL, client_for, reap_expired
from berth_docker.image import build_exec_image, default_context

from berth.execution.limits import ExecLimits
from berth.execution.reaping import reap_stale_run_folders
from berth.execution.runs import ExecService

pytestmark = pytest.mark.usefixtures("clean_berth_env")

REPO = Path(__file__).resolve().parents[3]
IMAGE = "berth-exec:latest"  # the example descriptors' docker profile


def berth(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    executable = Path(sys.executable).parent / "berth"
    return subprocess.run([str(executable), *args], capture_output=True, text=True, cwd=cwd, check=False, timeout=300)


@pytest.fixture(scope="module")
def latest_image() -> str:
    build_exec_image(
        client_for(None), tag=IMAGE, base="berth-exec-base:offline", context=default_context(), progress=lambda _: None
    )
    return IMAGE


@pytest.fixture
def service() -> ExecService:
    return ExecService(root=Path("/tmp") / f"berth-docker-test-{os.getpid()}")


def leftover_containers() -> list[str]:
    return [c.name for c in client_for(None).containers.list(all=True, filters={"label": CONTAINER_LABEL})]


@pytest.mark.docker
def test_build_image_shows_the_builds_progress(tmp_path: Path) -> None:
    result = berth(
        "exec", "build-image", "--descriptors", str(REPO / "descriptors"), "--profile", "docker", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "Step 1/" in result.stdout and "COPY berth_exec /opt/berth/berth_exec" in result.stdout
    assert "Successfully tagged berth-exec:latest" in result.stdout
    assert "built berth-exec:latest" in result.stderr


@pytest.mark.docker
def test_build_image_on_a_missing_base_says_how_to_get_one(tmp_path: Path) -> None:
    result = berth(
        "exec", "build-image", "--descriptors", str(REPO / "descriptors"), "--profile", "docker", "--base", "nope:0",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1
    assert "the base image 'nope:0' is not on this engine" in result.stderr


@pytest.mark.docker
@pytest.mark.sandbox
def test_a_program_in_a_container_calls_the_bundles_tool_in_its_scope(tmp_path: Path, latest_image: str) -> None:
    program = tmp_path / "greet.py"
    program.write_text(
        "import os\nfrom berth_exec import tools\n"
        "greeting = tools.call('hello.greet', name='Ann')\n"
        "open(os.path.join(os.environ['OUTPUT_DIR'], 'greeting.txt'), 'w').write(greeting)\n"
        "print(greeting)\n"
    )
    result = berth(
        "exec", "run", str(program), "--descriptors", str(REPO / "descriptors"), "--profile", "docker",
        "--bundle", "hello", "--tenant", "acme", "--project", "internal", "--out", "kept",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    envelope = json.loads(result.stdout)
    assert envelope["ok"] is True, envelope["report_text"]
    assert envelope["backend"] == "docker"
    assert "(docker-split)" in envelope["report_text"]
    assert envelope["user_out_tail"] == "Hello, Ann!\n"
    assert (tmp_path / "kept" / "greeting.txt").read_text() == "Hello, Ann!"
    assert leftover_containers() == []


@pytest.mark.docker
def test_doctor_sees_the_engine_and_the_image(tmp_path: Path, latest_image: str) -> None:
    result = berth("exec", "doctor", "--descriptors", str(REPO / "descriptors"), cwd=tmp_path)
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("docker")]
    assert rows, result.stdout
    assert all("yes" in row for row in rows), result.stdout
    assert any("Docker engine reachable" in line for line in result.stdout.splitlines())


def test_doctor_says_when_the_engine_is_unreachable(tmp_path: Path) -> None:
    backend = DockerBackend(docker_host=f"unix://{tmp_path}/no-engine.sock")
    findings = backend.doctor()
    assert [(f.check, f.ok) for f in findings] == [("Docker engine reachable", False)]
    assert "no-engine.sock" in findings[0].detail


@pytest.mark.docker
@pytest.mark.sandbox
async def test_a_missing_image_fails_the_run_with_the_fix(service: ExecService) -> None:
    run = await service.run(
        "print(1)", backend=DockerBackend(image="berth-exec:absent"), limits=ExecLimits(), bundle_id="b"
    )
    assert run.envelope.error is not None
    assert run.envelope.error.code == "sandbox_failed"
    assert "berth-exec:absent" in run.envelope.error.message
    assert "berth exec build-image" in run.envelope.error.message


@pytest.mark.docker
@pytest.mark.sandbox
async def test_no_container_outlives_its_run_timed_out_or_cancelled(service: ExecService, latest_image: str) -> None:
    backend = DockerBackend(image=latest_image)
    timed_out = await service.run(
        "import time\ntime.sleep(60)", backend=backend, limits=ExecLimits(timeout_s=1), bundle_id="b"
    )
    assert timed_out.envelope.error is not None and timed_out.envelope.error.code == "timeout"
    assert leftover_containers() == []
    events = client_for(None).events(filters={"label": CONTAINER_LABEL, "event": "start"}, decode=True)
    running = asyncio.ensure_future(
        service.run("import time\ntime.sleep(60)", backend=backend, limits=ExecLimits(timeout_s=30), bundle_id="b")
    )
    await asyncio.to_thread(next, events)  # the executor container started
    events.close()
    assert len(leftover_containers()) == 1
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert leftover_containers() == []


@pytest.mark.docker
@pytest.mark.sandbox
def test_combined_serves_the_bundles_tool_from_its_own_descriptors(tmp_path: Path, latest_image: str) -> None:
    example_descriptors = tmp_path / "descriptors"
    shutil.copytree(REPO / "descriptors", example_descriptors, ignore=shutil.ignore_patterns("schema"))
    base = Path(sys.base_prefix).resolve()
    assembly = example_descriptors / "assembly.yaml"
    profile = {
        "backend": "docker",
        "image": latest_image,
        "strategy": "combined",
        "supervisor_python": sys.executable,
        "mounts": [f"{REPO}:{REPO}:ro", f"{base}:{base}:ro"],
    }
    text = assembly.read_text()
    anchor = "    profiles:\n"
    assert anchor in text
    assembly.write_text(text.replace(anchor, anchor + f"      combined: {json.dumps(profile)}\n", 1))
    (example_descriptors / "bundles.secrets.yaml").write_text(
        yaml.safe_dump({"bundles": {"docs": {"search_api_key": "literal:docs-only-7777"}}})
    )
    program = tmp_path / "greet.py"
    program.write_text(
        "import json, os\nfrom berth_exec import tools\n"
        "def listing(path):\n"
        "    try:\n        return os.listdir(path)\n"
        "    except OSError as error:\n        return type(error).__name__\n"
        "print(json.dumps({'greeting': tools.call('hello.greet', name='Ann'), 'environ': sorted(os.environ),\n"
        f"                  'hidden': {{p: listing(p) for p in ('/tmp', '/root', {str(REPO)!r})}}}}))\n"
    )
    result = berth(
        "exec", "run", str(program), "--descriptors", str(example_descriptors), "--profile", "combined",
        "--bundle", "hello", "--tenant", "acme", "--project", "support",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr + result.stdout
    envelope = json.loads(result.stdout)
    assert "(docker-combined)" in envelope["report_text"]
    seen = json.loads(envelope["user_out_tail"])
    assert seen["greeting"] == "Hello, Ann!"
    ours = {"BUNDLE_ID", "EXECUTION_ID", "OUTPUT_DIR", "SUPERVISOR_SOCKET_PATH", "WORKDIR"}
    assert set(seen["environ"]) - {"LC_CTYPE"} == ours  # LC_CTYPE: Python's own C-locale coercion (PEP 538)
    # the materialized descriptors (/tmp) and the supervisor's Python (the checkout, /root) are out of reach
    hidden = seen["hidden"]
    assert hidden.pop("/tmp") == [] and hidden.pop("/root") == "PermissionError"
    assert hidden[str(REPO)] in ([], "FileNotFoundError")  # covered (or gone with /tmp, for a checkout in /tmp)
    assert "docs-only-7777" not in result.stdout + result.stderr
    assert leftover_containers() == []


@pytest.mark.docker
@pytest.mark.sandbox
def test_a_killed_hosts_container_is_removed_by_the_sweep_past_its_deadline(tmp_path: Path, latest_image: str) -> None:
    """SIGKILL of the host leaves its run's container running past its wall time; any host's exec sweep removes
    it once past the deadline on its label (and not before: a live host may still be running it)."""
    program = tmp_path / "waits.py"
    program.write_text("import time\ntime.sleep(600)\n")
    client = client_for(None)
    events = client.events(filters={"label": CONTAINER_LABEL, "event": "start"}, decode=True)
    executable = Path(sys.executable).parent / "berth"
    host = subprocess.Popen(  # the docker profile of the example descriptors: a 120 s wall time
        [
            str(executable),
            "exec",
            "run",
            str(program),
            "--descriptors",
            str(REPO / "descriptors"),
            "--profile",
            "docker",
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        started = next(iter(events))
        # the host dies mid-run: once the program runs (the bootstrap, the container's init, has read its launch
        # lines and forked the program), not while the container starts
        within = time.monotonic() + 60
        while len(client.api.top(started["id"])["Processes"] or []) < 2 and time.monotonic() < within:
            time.sleep(0.05)
    finally:
        host.kill()
        host.wait()
        events.close()
    container = client.containers.get(started["id"])
    try:
        container.reload()
        assert container.status == "running"  # the host is gone; its run goes on
        deadline = float(container.labels[DEADLINE_LABEL])
        assert deadline > time.time()
        assert reap_expired(client, deadline - 1) == 0
        assert reap_expired(client, deadline + 1) == 1
        assert leftover_containers() == []
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)
        reap_stale_run_folders(ExecService().root)  # the killed host's run folder, and its disk quota's mount
