"""The deployed stack, for real: ``deploy/compose.yaml`` as it is, run by compose (Debian's ``docker-compose``, or
``docker compose`` v2) with the images ``deploy/build-images`` makes. Only what no registry here can give is
replaced, through the file's own variables: the PostgreSQL, Redis and moto images by local stand-ins
(:mod:`stand_ins`), the model by the scripted one (the descriptors folder), and the secrets by test values.

Two workers (the file's ``BERTH_WORKERS``, kept by a plain ``up -d``); one turn goes through the API container, is
run by a worker container, is persisted in the stack's PostgreSQL, and runs a program with ``exec.python`` in a
sibling container the worker starts through the engine's socket; the file it writes is stored in the stack's S3
store and served by the API. Then an API key added to the mounted ``gateway.yaml`` works without a restart.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker  # type: ignore[import-untyped, unused-ignore]
import httpx
import pytest
import yaml
from stand_ins import ensure_stand_ins

from berth.config.environment import docker_host, running_in_ci

pytestmark = [pytest.mark.deploy, pytest.mark.docker]

REPOSITORY = Path(__file__).resolve().parents[2]
DEPLOY = REPOSITORY / "deploy"
PG_PASSWORD = "stack-test-password"
API_KEY = "acme-ops-dev-key"
PROGRAM = """\
import os, pathlib, socket
pathlib.Path(os.environ["OUTPUT_DIR"], "report.txt").write_text(f"host={socket.gethostname()} uid={os.getuid()}")
print("report written")
"""


def script() -> dict[str, Any]:
    call = {
        "action": "call_tool",
        "notes": "report",
        "tool_call": {"tool_id": "exec.python", "params": {"purpose": "write the report", "outputs": ["report.txt"]}},
    }
    answer = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Report ready.</channel:answer>'
    return {
        "by_round": True,
        "responses": [
            {"text": f"<channel:action>{json.dumps(call)}</channel:action><channel:code>{PROGRAM}</channel:code>"},
            {"text": answer},
        ],
    }


def compose_command() -> list[str]:
    """Debian's docker-compose, else the docker CLI's compose plugin; skip (fail under CI) without either."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if subprocess.run(["docker", "compose", "version"], capture_output=True, check=False).returncode == 0:
        return ["docker", "compose"]
    reason = "no compose: apt-get install docker-compose (.ci/run does)"
    if running_in_ci():
        pytest.fail(reason)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    client = docker.DockerClient(base_url=docker_host() or "unix:///var/run/docker.sock")
    yield client
    client.close()


@pytest.fixture(scope="module")
def images() -> tuple[str, str]:
    """berth:latest and berth-exec:latest, built offline from the local base by the script operators use."""
    built = subprocess.run(
        [str(DEPLOY / "build-images")], cwd=REPOSITORY, capture_output=True, text=True, timeout=1800, check=False
    )
    assert built.returncode == 0, built.stderr[-4000:]
    berth, exec_image = built.stdout.split()
    return berth, exec_image


class ComposeStack:
    """One compose project of ``deploy/compose.yaml`` with its variables."""

    def __init__(self, command: list[str], variables: dict[str, str]) -> None:
        self.project = f"berthtest{uuid.uuid4().hex[:6]}"
        self.command = [*command, "-p", self.project, "-f", str(DEPLOY / "compose.yaml")]
        self.environment = {**os.environ, **variables}

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self.command, *args], env=self.environment, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, f"compose {' '.join(args)}: {done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done

    def psql(self, query: str) -> str:
        return self.run("exec", "-T", "postgres", "psql", "-U", "berth", "-d", "berth", "-tAc", query).stdout.strip()

    def containers(self, engine: Any, service: str) -> list[Any]:
        labels = [f"com.docker.compose.project={self.project}", f"com.docker.compose.service={service}"]
        return list(engine.containers.list(all=True, filters={"label": labels}))


@pytest.fixture
def stack(images: tuple[str, str], engine: Any, tmp_path: Path) -> Iterator[ComposeStack]:
    command = compose_command()
    stand_ins = ensure_stand_ins(engine)
    descriptors = tmp_path / "descriptors"
    shutil.copytree(DEPLOY / "compose" / "descriptors", descriptors)
    assembly = yaml.safe_load((descriptors / "assembly.yaml").read_text())
    assembly["platform"]["models"] = {
        "default": {"provider": "scripted", "model": "/etc/berth/descriptors/script.yaml"}
    }
    assembly["platform"]["react"] = {"conversation_titles": False}
    (descriptors / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    (descriptors / "script.yaml").write_text(yaml.safe_dump(script()))
    secrets = tmp_path / "secrets"
    shutil.copytree(DEPLOY / "compose" / "secrets.example", secrets)
    (secrets / "pg_password").write_text(PG_PASSWORD)
    (secrets / "pg_dsn").write_text(f"postgresql://berth:{PG_PASSWORD}@postgres:5432/berth")
    for path in [tmp_path, descriptors, secrets, *descriptors.iterdir(), *secrets.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    # the same path inside the worker and on the host (sibling binds), short: a socket's path has 107 bytes at most
    runs = Path(tempfile.mkdtemp(prefix="bx-", dir="/tmp"))
    os.chown(runs, 10001, 10001)
    socket_path = (docker_host() or "unix:///var/run/docker.sock").removeprefix("unix://")
    running = ComposeStack(
        command,
        {
            **stand_ins,
            "BERTH_TAG": images[0].partition(":")[2],
            "BERTH_WORKERS": "2",
            "BERTH_PORT": str(free_port()),
            "BERTH_DESCRIPTORS_DIR": str(descriptors),
            "BERTH_SECRETS_DIR": str(secrets),
            "BERTH_EXEC_RUNS": str(runs),
            "DOCKER_SOCKET": socket_path,
            "DOCKER_GID": str(os.stat(socket_path).st_gid),
        },
    )
    try:
        running.run("up", "-d", timeout=900)
        yield running
    except BaseException:
        print(running.run("logs", "--tail", "60").stdout)
        raise
    finally:
        subprocess.run([*running.command, "down", "-v", "--remove-orphans"], env=running.environment, check=False)
        shutil.rmtree(runs, ignore_errors=True)


async def until_ok(url: str, timeout_s: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=5) as client:
        while True:
            try:
                response = await client.get(url)
                if response.status_code == 200:
                    return dict(response.json())
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"{url} never answered 200"
            await asyncio.sleep(0.25)


async def follow(client: httpx.AsyncClient, events_url: str) -> list[tuple[str, dict[str, Any]]]:
    """A turn's events (SSE) up to its end."""
    events: list[tuple[str, dict[str, Any]]] = []
    async with client.stream("GET", events_url, timeout=None) as response:
        frame: dict[str, str] = {}
        async for line in response.aiter_lines():
            if line.startswith(":"):
                continue
            if line:
                name, _, value = line.partition(": ")
                frame[name] = value
                continue
            if frame.get("event"):
                events.append((frame["event"], json.loads(frame.get("data", "{}"))))
                if frame["event"] in ("turn.completed", "turn.failed"):
                    break
            frame = {}
    return events


async def wait_healthy(containers: list[Any], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    for container in containers:
        while container.attrs["State"].get("Health", {}).get("Status") != "healthy":
            assert time.monotonic() < deadline, (container.name, container.attrs["State"])
            await asyncio.sleep(1)
            container.reload()


def worker_readiness(container: Any) -> dict[str, Any]:
    probe = (
        "import urllib.request; "
        "print(urllib.request.urlopen('http://127.0.0.1:8001/readyz', timeout=4).read().decode())"
    )
    exit_code, output = container.exec_run(["python3", "-c", probe])
    assert exit_code == 0, output
    return dict(json.loads(output))


async def test_a_turn_runs_through_the_compose_stack_with_exec_in_a_sibling_container(
    stack: ComposeStack, images: tuple[str, str], engine: Any
) -> None:
    _, exec_image = images
    api_url = f"http://127.0.0.1:{stack.environment['BERTH_PORT']}"
    ready = await until_ok(f"{api_url}/readyz")
    assert {"postgres", "redis", "artifacts"} <= set(ready["checks"]["services"]), ready
    assert ready["checks"]["services"]["artifacts"]["detail"].startswith("s3: bucket "), ready
    workers = stack.containers(engine, "worker")
    assert len(workers) == 2
    await wait_healthy([*stack.containers(engine, "api"), *workers])  # the image's health check, per service

    started_at = int(time.time()) - 1
    async with httpx.AsyncClient(
        base_url=api_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30
    ) as client:
        created = await client.post("/v1/acme/ops/conversations", json={})
        assert created.status_code == 201, created.text
        conversation = created.json()["id"]
        turn = await client.post(f"/v1/acme/ops/conversations/{conversation}/turns", json={"message": "report"})
        assert turn.status_code == 202, turn.text
        turn_id = turn.json()["turn_id"]
        events = await asyncio.wait_for(follow(client, turn.json()["events_url"]), 180)
        assert [kind for kind, _ in events][-1] == "turn.completed", events
        result = next(data for kind, data in events if kind == "tool.result" and data["tool_id"] == "exec.python")
        assert result["ok"], result
        artifact = next(data for kind, data in events if kind == "artifact")
        served = await client.get(f"/v1/acme/ops/conversations/{conversation}/files/{artifact['path']}")
        assert served.status_code == 200, served.text
        report = served.text

    # the program ran in a sibling container of the exec image, started through the engine's socket
    started = [
        event
        for event in engine.events(
            since=started_at, until=int(time.time()) + 1, decode=True, filters={"type": "container", "event": "start"}
        )
        if event["Actor"]["Attributes"].get("image") == exec_image
    ]
    assert len(started) == 1, started
    assert report == f"host={started[0]['id'][:12]} uid=10001"

    # run by one of the worker containers (an API process runs no turn), persisted in the stack's PostgreSQL,
    # its file in the stack's S3 store
    assert sum(worker_readiness(worker)["checks"]["worker"]["turns_run"] for worker in workers) == 1
    assert stack.psql(f"SELECT state FROM berth_turns WHERE turn_id='{turn_id}'") == "completed"
    location = stack.psql(f"SELECT location FROM berth_artifacts WHERE turn_id='{turn_id}' AND path LIKE '%report.txt'")
    assert re.fullmatch(r"acme/ops/.+/[0-9a-f]{64}", location), location

    # an API key added to the mounted gateway.yaml on the host works at once: the API container follows its descriptors
    gateway_file = Path(stack.environment["BERTH_DESCRIPTORS_DIR"]) / "gateway.yaml"
    gateway = yaml.safe_load(gateway_file.read_text())
    new_key = "acme-ops-added-key"
    gateway["auth"]["keys"].append(
        {"id": "added", "sha256": hashlib.sha256(new_key.encode()).hexdigest(), "tenant": "acme", "roles": ["user"]}
    )
    gateway_file.write_text(yaml.safe_dump(gateway))
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(base_url=api_url, headers={"Authorization": f"Bearer {new_key}"}, timeout=10) as added:
        while (listed := await added.get("/v1/acme/ops/conversations")).status_code == 401:
            assert time.monotonic() < deadline, "the API never adopted the key added to gateway.yaml"
            await asyncio.sleep(0.25)
        assert listed.status_code == 200, listed.text
