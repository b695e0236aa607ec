"""What the deploy tests and ``bench/deploy.py`` share to run ``deploy/compose.yaml`` for real: a compose project of
the file as it is, with only what no registry here can give replaced through the file's own variables (the
PostgreSQL, Redis and moto images by local stand-ins, the model by a scripted one in the descriptors folder, the
secrets by test values); and the turn helpers (a turn's events over SSE, a worker's health document).

The script every turn of the stack replays (``by_round``): round 1 runs a program with ``exec.python`` that writes
``report.txt`` (an announced artifact, stored in the stack's S3 store), round 2 answers after
:data:`ANSWER_DELAY_S` seconds — the window in which a worker is killed mid-turn, its artifact already announced.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from berth.config.environment import docker_host

REPOSITORY = Path(__file__).resolve().parents[2]
DEPLOY = REPOSITORY / "deploy"
PG_PASSWORD = "stack-test-password"
API_KEY = "acme-ops-dev-key"
ANSWER_DELAY_S = 4.0
PROGRAM = """\
import os, pathlib, socket
pathlib.Path(os.environ["OUTPUT_DIR"], "report.txt").write_text(f"host={socket.gethostname()} uid={os.getuid()}")
print("report written")
"""


def script() -> dict[str, Any]:
    """The scripted model's two rounds: exec.python writes the report, then the answer (after a pause)."""
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
            {"text": answer, "delay_s": ANSWER_DELAY_S},
        ],
    }


def compose_command() -> list[str] | None:
    """Debian's docker-compose (v1), else the docker CLI's compose plugin (v2); None without either."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if subprocess.run(["docker", "compose", "version"], capture_output=True, check=False).returncode == 0:
        return ["docker", "compose"]
    return None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ComposeStack:
    """One compose project of ``deploy/compose.yaml`` with its variables."""

    def __init__(self, command: list[str], variables: dict[str, str]) -> None:
        self.project = f"berthtest{uuid.uuid4().hex[:6]}"
        self.command = [*command, "-p", self.project, "-f", str(DEPLOY / "compose.yaml")]
        self.environment = {**os.environ, **variables}

    @property
    def api_url(self) -> str:
        """The API service's published address."""
        return f"http://127.0.0.1:{self.environment['BERTH_PORT']}"

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """Run a compose command on the project; fail with its output when it fails."""
        done = subprocess.run(
            [*self.command, *args], env=self.environment, capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise AssertionError(f"compose {' '.join(args)}: {done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

    def down(self) -> None:
        """Remove the project's containers, networks and volumes (whatever state it is in)."""
        subprocess.run(
            [*self.command, "down", "-v", "--remove-orphans"], env=self.environment, capture_output=True, check=False
        )

    def psql(self, query: str) -> str:
        """One query's unaligned output, through the stack's own PostgreSQL container."""
        return self.run("exec", "-T", "postgres", "psql", "-U", "berth", "-d", "berth", "-tAc", query).stdout.strip()

    def containers(self, engine: Any, service: str) -> list[Any]:
        """The service's containers (running or not)."""
        labels = [f"com.docker.compose.project={self.project}", f"com.docker.compose.service={service}"]
        return list(engine.containers.list(all=True, filters={"label": labels}))


@dataclass(frozen=True)
class StackFolders:
    """The host folders a stack mounts: descriptors, secrets, and the exec run folders (same path inside)."""

    descriptors: Path
    secrets: Path
    runs: Path


def prepare_folders(root: Path) -> StackFolders:
    """The example descriptors with the scripted model, test secrets and a run folder owned by the image's uid."""
    descriptors = root / "descriptors"
    shutil.copytree(DEPLOY / "compose" / "descriptors", descriptors)
    assembly = yaml.safe_load((descriptors / "assembly.yaml").read_text())
    assembly["platform"]["models"] = {
        "default": {"provider": "scripted", "model": "/etc/berth/descriptors/script.yaml"}
    }
    assembly["platform"]["react"] = {"conversation_titles": False}
    (descriptors / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    (descriptors / "script.yaml").write_text(yaml.safe_dump(script()))
    secrets = root / "secrets"
    shutil.copytree(DEPLOY / "compose" / "secrets.example", secrets)
    (secrets / "pg_password").write_text(PG_PASSWORD)
    (secrets / "pg_dsn").write_text(f"postgresql://berth:{PG_PASSWORD}@postgres:5432/berth")
    for path in [root, descriptors, secrets, *descriptors.iterdir(), *secrets.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    # the same path inside the worker and on the host (sibling binds), short: a socket's path has 107 bytes at most
    runs = Path(tempfile.mkdtemp(prefix="bx-", dir="/tmp"))
    os.chown(runs, 10001, 10001)
    return StackFolders(descriptors, secrets, runs)


def stack_of(command: list[str], tag: str, stand_ins: dict[str, str], folders: StackFolders) -> ComposeStack:
    """A compose project of the images at ``tag`` with two workers, on a free port (not started)."""
    socket_path = (docker_host() or "unix:///var/run/docker.sock").removeprefix("unix://")
    return ComposeStack(
        command,
        {
            **stand_ins,
            "BERTH_TAG": tag,
            "BERTH_WORKERS": "2",
            "BERTH_PORT": str(free_port()),
            "BERTH_DESCRIPTORS_DIR": str(folders.descriptors),
            "BERTH_SECRETS_DIR": str(folders.secrets),
            "BERTH_EXEC_RUNS": str(folders.runs),
            "DOCKER_SOCKET": socket_path,
            "DOCKER_GID": str(os.stat(socket_path).st_gid),
        },
    )


async def until_ok(url: str, timeout_s: float = 180) -> dict[str, Any]:
    """``url``'s JSON once it answers 200."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=5) as client:
        while True:
            try:
                response = await client.get(url)
                if response.status_code == 200:
                    return dict(response.json())
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{url} never answered 200")
            await asyncio.sleep(0.25)


async def follow(
    client: httpx.AsyncClient, events_url: str, seen: list[tuple[str, dict[str, Any]]] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """A turn's events (SSE) up to its end; appended to ``seen`` as they come when given."""
    events: list[tuple[str, dict[str, Any]]] = [] if seen is None else seen
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


def worker_readiness(container: Any) -> dict[str, Any]:
    """A worker container's health document (its --health-port, read from inside it)."""
    probe = (
        "import urllib.request; "
        "print(urllib.request.urlopen('http://127.0.0.1:8001/readyz', timeout=4).read().decode())"
    )
    exit_code, output = container.exec_run(["python3", "-c", probe])
    if exit_code != 0:
        raise AssertionError(output)
    return dict(json.loads(output))


def kill_9(container: Any) -> None:
    """``kill -9`` of the container's main process from the host, as a crash: the engine's restart policy applies."""
    container.reload()
    os.kill(int(container.attrs["State"]["Pid"]), 9)
