"""The deployed stack, for real: the images ``deploy/build-images`` makes, started with the services, commands,
environment, mounts and hardening of ``deploy/compose.yaml`` (through the docker SDK: no compose v2 here, and this
engine has no bridge, so every container is on the host's network and talks to this machine's PostgreSQL, Redis and
a moto S3 server instead of the stack's own).

One turn goes through the API container, is run by a worker container, is persisted in PostgreSQL, and runs a
program with ``exec.python`` in a sibling container the worker starts through the engine's socket; the file it
writes is stored in S3 and served back by the API.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import boto3
import docker  # type: ignore[import-untyped, unused-ignore]
import httpx
import pytest
import yaml
from berth_postgres.testing import async_scratch_database

from berth.config.environment import docker_host

pytestmark = [pytest.mark.deploy, pytest.mark.docker, pytest.mark.postgres, pytest.mark.redis]

REPOSITORY = Path(__file__).resolve().parents[2]
DEPLOY = REPOSITORY / "deploy"
REDIS_DB = 11
BUCKET = "berth-artifacts"
EXEC_IMAGE_LABEL = "org.berth.exec"
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


def interpolate(text: str, variables: Mapping[str, str]) -> str:
    """Compose's ``${NAME:-default}`` and ``${NAME}`` substitution."""

    def value(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(3)
        return variables.get(name) or (default if default is not None else "")

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}", value, text)


def compose_services(variables: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    document = yaml.safe_load(interpolate((DEPLOY / "compose.yaml").read_text(), variables))
    return dict(document["services"])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def images() -> tuple[str, str]:
    """berth:latest and berth-exec:latest, built offline from the local base by the script operators use."""
    built = subprocess.run(
        [str(DEPLOY / "build-images")], cwd=REPOSITORY, capture_output=True, text=True, timeout=1800, check=False
    )
    assert built.returncode == 0, built.stderr[-4000:]
    berth, exec_image = built.stdout.split()
    return berth, exec_image


@dataclass
class Stack:
    """The running containers and how to reach them."""

    engine: Any
    api_url: str
    worker_url: str
    dsn: str
    containers: dict[str, Any] = field(default_factory=dict)

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}\n{container.logs(tail=60).decode(errors='replace')}"
            for name, container in self.containers.items()
        )


def run_service(
    engine: Any,
    name: str,
    service: Mapping[str, Any],
    *,
    binds: Mapping[str, str],
    secrets: Path,
    command: list[str] | None = None,
    environment: Mapping[str, str] | None = None,
    detach: bool = True,
) -> Any:
    """Start ``service`` of compose.yaml as compose would, but on the host's network, with ``binds`` replacing the
    sources of its volumes (by target) and its secrets read from ``secrets/<name>``."""
    volumes: dict[str, dict[str, str]] = {}
    for volume in service.get("volumes", []):
        source, target, *mode = str(volume).split(":")
        source = binds.get(target, source)
        volumes[source] = {"bind": target, "mode": mode[0] if mode else "rw"}
    for secret in service.get("secrets", []):
        volumes[str(secrets / secret)] = {"bind": f"/run/secrets/{secret}", "mode": "ro"}
    tmpfs = {}
    for entry in service.get("tmpfs", []):
        path, _, options = str(entry).partition(":")
        tmpfs[path] = options
    return engine.containers.run(
        service["image"],
        command if command is not None else service.get("command"),
        name=f"berth-stack-{name}-{uuid.uuid4().hex[:6]}",
        detach=detach,
        network_mode="host",
        environment={
            **{key: str(value) for key, value in service.get("environment", {}).items()},
            **(environment or {}),
        },
        volumes=volumes,
        tmpfs=tmpfs,
        read_only=bool(service.get("read_only")),
        cap_drop=service.get("cap_drop"),
        security_opt=service.get("security_opt"),
        group_add=[str(group) for group in service.get("group_add", [])] or None,
    )


@asynccontextmanager
async def stack(tmp_path: Path, moto_endpoint: str) -> AsyncIterator[Stack]:
    engine = docker.DockerClient(base_url=docker_host() or "unix:///var/run/docker.sock")
    socket_path = (docker_host() or "unix:///var/run/docker.sock").removeprefix("unix://")
    # the same path inside the worker and on the host (sibling binds), short: a socket's path has 107 bytes at most
    runs = Path(tempfile.mkdtemp(prefix="bx-", dir="/tmp"))
    os.chown(runs, 10001, 10001)
    variables = {
        "BERTH_EXEC_RUNS": str(runs),
        "DOCKER_SOCKET": socket_path,
        "DOCKER_GID": str(os.stat(socket_path).st_gid),
    }
    services = compose_services(variables)
    async with async_scratch_database(migrated=False) as dsn:
        # the compose stack's descriptors, with the scripted model and this machine's S3 endpoint
        descriptors = tmp_path / "descriptors"
        shutil.copytree(DEPLOY / "compose" / "descriptors", descriptors)
        assembly = yaml.safe_load((descriptors / "assembly.yaml").read_text())
        assembly["platform"]["models"] = {
            "default": {"provider": "scripted", "model": "/etc/berth/descriptors/script.yaml"}
        }
        assembly["platform"]["react"] = {"conversation_titles": False}
        assembly["platform"]["storage"]["artifacts"]["endpoint_url"] = moto_endpoint
        (descriptors / "assembly.yaml").write_text(yaml.safe_dump(assembly))
        (descriptors / "script.yaml").write_text(yaml.safe_dump(script()))
        secrets = tmp_path / "secrets"
        secrets.mkdir()
        (secrets / "pg_dsn").write_text(dsn)
        (secrets / "redis_url").write_text(f"redis://127.0.0.1:6379/{REDIS_DB}")
        (secrets / "aws_credentials").write_text(
            "[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
        )
        (secrets / "anthropic_api_key").write_text("unused")
        for path in [descriptors, secrets, *descriptors.iterdir(), *secrets.iterdir()]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        binds = {"/etc/berth/descriptors": str(descriptors)}
        api_port, health_port = free_port(), free_port()
        running = Stack(engine, f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{health_port}", dsn)
        try:
            migrate = run_service(engine, "migrate", services["migrate"], binds=binds, secrets=secrets)
            running.containers["migrate"] = migrate
            exit_status = await asyncio.to_thread(migrate.wait, timeout=120)
            assert exit_status["StatusCode"] == 0, running.logs()
            api_command = [str(api_port) if part == "8000" else part for part in services["api"]["command"]]
            running.containers["api"] = run_service(
                engine,
                "api",
                services["api"],
                binds=binds,
                secrets=secrets,
                command=api_command,
                environment={"BERTH_HEALTHCHECK_URL": f"{running.api_url}/readyz"},
            )
            worker_command = [str(health_port) if part == "8001" else part for part in services["worker"]["command"]]
            running.containers["worker"] = run_service(
                engine,
                "worker",
                services["worker"],
                binds=binds,
                secrets=secrets,
                command=worker_command,
                environment={"BERTH_HEALTHCHECK_URL": f"{running.worker_url}/readyz"},
            )
            yield running
        except BaseException:
            print(running.logs())
            raise
        finally:
            for container in running.containers.values():
                container.remove(force=True)
            engine.close()
            shutil.rmtree(runs, ignore_errors=True)


async def until_ok(url: str, timeout_s: float = 120) -> dict[str, Any]:
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
                    return events
            frame = {}
    return events


@pytest.fixture
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{server._server.server_port}"  # type: ignore[union-attr]
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.create_bucket(Bucket=BUCKET)
    try:
        yield endpoint
    finally:
        server.stop()


async def test_a_turn_runs_through_the_api_and_worker_containers_with_exec_in_a_sibling(
    images: tuple[str, str], moto_endpoint: str, tmp_path: Path
) -> None:
    _, exec_image = images
    async with stack(tmp_path, moto_endpoint) as running:
        ready = await until_ok(f"{running.api_url}/readyz")
        assert {"postgres", "redis"} <= set(ready["checks"]["services"]), ready
        worker = await until_ok(f"{running.worker_url}/readyz")
        assert worker["checks"]["bundles"] == ["hello", "ops-copilot"] or set(worker["checks"]["bundles"]) == {
            "hello",
            "ops-copilot",
        }

        started_at = int(time.time()) - 1
        headers = {"Authorization": "Bearer acme-ops-dev-key"}
        async with httpx.AsyncClient(base_url=running.api_url, headers=headers, timeout=30) as client:
            created = await client.post("/v1/acme/ops/conversations", json={})
            assert created.status_code == 201, created.text
            conversation = created.json()["id"]
            turn = await client.post(f"/v1/acme/ops/conversations/{conversation}/turns", json={"message": "report"})
            assert turn.status_code == 202, turn.text
            turn_id = turn.json()["turn_id"]
            events = await asyncio.wait_for(follow(client, turn.json()["events_url"]), 180)
            kinds = [kind for kind, _ in events]
            assert kinds[-1] == "turn.completed", events
            result = next(data for kind, data in events if kind == "tool.result" and data["tool_id"] == "exec.python")
            assert result["ok"], result
            artifact = next(data for kind, data in events if kind == "artifact")
            served = await client.get(f"/v1/acme/ops/conversations/{conversation}/files/{artifact['path']}")
            assert served.status_code == 200, served.text
            report = served.text

        # the program ran in a sibling container of the exec image, started through the engine's socket
        ended_at = int(time.time()) + 1
        started = [
            event
            for event in running.engine.events(
                since=started_at, until=ended_at, decode=True, filters={"type": "container", "event": "start"}
            )
            if event["Actor"]["Attributes"].get("image") == exec_image
        ]
        assert len(started) == 1, started
        assert report == f"host={started[0]['id'][:12]} uid=10001"

        # run by the worker container (the API runs no turn in distributed mode), persisted in PostgreSQL
        worker = await until_ok(f"{running.worker_url}/readyz")
        assert worker["checks"]["worker"]["turns_run"] == 1
        connection = await asyncpg.connect(running.dsn)
        try:
            state = await connection.fetchval("SELECT state FROM berth_turns WHERE turn_id=$1", turn_id)
            location = await connection.fetchval(
                "SELECT location FROM berth_artifacts WHERE turn_id=$1 AND path LIKE '%report.txt'", turn_id
            )
        finally:
            await connection.close()
        assert state == "completed"
        assert location is not None and re.fullmatch(r"acme/ops/.+/[0-9a-f]{64}", location), location

        # the image's own health check passes on the API and the worker container
        deadline = time.monotonic() + 90
        for name in ("api", "worker"):
            container = running.containers[name]
            while container.attrs["State"].get("Health", {}).get("Status") != "healthy":
                assert time.monotonic() < deadline, (name, container.attrs["State"])
                await asyncio.sleep(1)
                container.reload()
