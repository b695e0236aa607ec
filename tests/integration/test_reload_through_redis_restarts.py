"""Host processes' background tasks live through Redis restarts, and ``berth bundles reload`` says whom it reached.

Real processes on a Redis of the test's own: two ``berth worker`` processes (with their health ports) and one
``berth run`` API process. Redis is killed with ``SIGKILL`` and started again, once keeping its data (append-only
file) and once losing it; each time the reload bus subscribes again and the worker reports come back, so a
reload reaches every process and ``berth bundles list`` shows the workers. A Redis that stays down makes
``/readyz`` answer 503 naming the reload bus; a reload that reaches no process, or a process that does not
answer, exits 1 and says so.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
import yaml

from berth.host.broadcast import RELOAD_CHANNEL, read_worker_reports
from berth.testing.redis import RedisServer, free_port

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.usefixtures("clean_berth_env")]

BERTH = str(Path(sys.executable).parent / "berth")

BUNDLE = """
from berth import BundleInfo, hookimpl

@hookimpl
def berth_bundle():
    return BundleInfo(id="alpha", version="1.0")
"""


@dataclass
class Deployment:
    """The test's Redis, descriptors and host processes (by name: ``w1``, ``w2``, ``api``)."""

    root: Path
    redis: RedisServer
    descriptors: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)
    """Each process's worker id, as its report and its reload acknowledgement name it."""

    def start(self, name: str, command: list[str], port: int, worker_id: str | None = None) -> None:
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - the process owns it
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self.processes[name], self.ports[name] = process, port
        self.ids[name] = worker_id or f"{socket.gethostname()}-{process.pid}"

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}" for path in self.root.glob("*.log")
        )

    def stop(self) -> None:
        for process in self.processes.values():
            process.send_signal(signal.SIGCONT)  # a test may have paused one
            process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def until(condition: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    """Await ``condition()`` (a coroutine function's result or a value) until it is truthy; fail at the deadline."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = condition()
            if asyncio.iscoroutine(last):
                last = await last
        except (httpx.TransportError, aioredis.RedisError, OSError) as error:
            last = error
        else:
            if last:
                return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s:g} s (last: {last!r})")


async def berth(*args: str, timeout_s: float = 120) -> tuple[int, str, str]:
    """Run the ``berth`` CLI; its exit code, stdout and stderr."""
    process = await asyncio.create_subprocess_exec(
        BERTH, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout_s)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def readyz(port: int) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.get(f"http://127.0.0.1:{port}/readyz")


def write_descriptors(root: Path, dsn: str, redis_url: str) -> Path:
    bundle = root / "alpha"
    bundle.mkdir()
    (bundle / "__init__.py").write_text(BUNDLE)
    descriptors = root / "descriptors"
    descriptors.mkdir()
    storage = {
        "kind": "distributed",
        "postgres": {"dsn": dsn},
        "redis": {"url": "secret:redis_url"},
        "artifacts": {"kind": "local", "root": str(root / "artifacts")},
    }
    (descriptors / "assembly.yaml").write_text(yaml.safe_dump({"platform": {"storage": storage}}))
    (descriptors / "secrets.yaml").write_text(yaml.safe_dump({"redis_url": redis_url}))
    (descriptors / "bundles.yaml").write_text(yaml.safe_dump({"bundles": {"alpha": {"source": {"path": str(bundle)}}}}))
    return descriptors


@pytest.fixture
def database() -> Iterator[str]:
    """A scratch PostgreSQL database with the schema migrated (a distributed host refuses one that is behind)."""
    from berth_postgres.testing import scratch_database

    with scratch_database(migrated=True) as dsn:
        yield dsn


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test's own, with an append-only file (so a restart may keep its data)."""
    server = RedisServer(appendonly=True, data_dir=tmp_path / "redis")
    server.data_dir.mkdir()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def deployment(tmp_path: Path, database: str, redis_server: RedisServer) -> AsyncIterator[Deployment]:
    """Two workers and an API process, all ready (every one subscribed to the reload channel and reported)."""
    running = Deployment(tmp_path, redis_server, write_descriptors(tmp_path, database, redis_server.url))
    base = ["--descriptors", str(running.descriptors)]
    for name in ("w1", "w2"):
        port = free_port()
        health = ["--health-port", str(port), "--health-host", "127.0.0.1"]
        running.start(name, [BERTH, "worker", *base, "--worker-id", name, "--no-watch", "--demo", *health], port, name)
    port = free_port()
    running.start("api", [BERTH, "run", *base, "--port", str(port), "--demo"], port)
    try:
        for name, port in running.ports.items():
            await until(lambda port=port: _ok(readyz(port)), f"{name} ready", timeout_s=120)
        await until(lambda: everyone_back(running), "every process subscribed and reported")
        yield running
    except BaseException:
        print(running.logs())
        raise
    finally:
        running.stop()


async def _ok(response: Any) -> bool:
    return (await response).status_code == 200


async def everyone_back(running: Deployment) -> bool:
    """Every process is subscribed to the reload channel and has its report in Redis."""
    client = aioredis.from_url(running.redis.url)
    try:
        subscribed = dict(await client.pubsub_numsub(RELOAD_CHANNEL))
        reported = {report.worker_id for report in await read_worker_reports(client)}
    finally:
        await client.aclose()
    return subscribed.get(RELOAD_CHANNEL.encode(), 0) == 3 and reported == set(running.ids.values())


async def reload_reaches_everyone(running: Deployment, generation: int) -> None:
    code, out, err = await berth("bundles", "reload", "alpha", "--descriptors", str(running.descriptors))
    assert code == 0, (out, err)
    assert sorted(out.splitlines()) == sorted(
        f"{worker}: generation {generation} loaded" for worker in running.ids.values()
    )


async def list_shows_the_workers(running: Deployment) -> None:
    code, out, err = await berth("bundles", "list", "--descriptors", str(running.descriptors))
    assert code == 0, (out, err)
    for worker in running.ids.values():
        assert f"worker {worker}:" in out, out


@pytest.mark.slow  # real API and worker processes through Redis restarts: .ci/run's slow step
async def test_reloads_reach_every_process_after_redis_restarts_with_and_without_its_data(
    deployment: Deployment,
) -> None:
    await reload_reaches_everyone(deployment, generation=2)

    deployment.redis.restart(lose_data=False)  # kill -9; the append-only file brings the keys back
    await until(lambda: everyone_back(deployment), "every process back after a restart keeping the data")
    await reload_reaches_everyone(deployment, generation=3)
    await list_shows_the_workers(deployment)

    deployment.redis.restart(lose_data=True)  # kill -9 and an empty Redis: the reports are gone with the rest
    await until(lambda: everyone_back(deployment), "every process back after a restart losing the data")
    await reload_reaches_everyone(deployment, generation=4)
    await list_shows_the_workers(deployment)

    for name in ("w1", "api"):
        ready = await readyz(deployment.ports[name])
        assert ready.status_code == 200, ready.text
        background = ready.json()["checks"]["background"]
        assert {"reload bus", "worker report"} <= set(background), background
        assert all(task["ok"] and task["state"] == "running" for task in background.values()), background


@pytest.mark.slow  # real API and worker processes through Redis restarts: .ci/run's slow step
async def test_a_redis_that_stays_down_makes_readyz_name_the_dead_task_until_it_is_back(
    deployment: Deployment,
) -> None:
    deployment.redis.kill()

    async def down() -> dict[str, Any] | None:
        response = await readyz(deployment.ports["w1"])
        background = response.json()["checks"]["background"]
        return response.json() if response.status_code == 503 and not background["reload bus"]["ok"] else None

    body = await until(down, "the worker's /readyz reporting its reload bus down")
    bus = body["checks"]["background"]["reload bus"]
    assert bus["state"] == "retrying" and bus["failures"] >= 1 and bus["failing_for_s"] >= 5, bus
    assert "Error" in bus["last_error"], bus
    assert body["checks"]["services"]["redis"]["ok"] is False
    api = await readyz(deployment.ports["api"])
    assert api.status_code == 503 and api.json()["checks"]["background"]["reload bus"]["ok"] is False, api.text

    deployment.redis.start()
    await until(lambda: _ok(readyz(deployment.ports["w1"])), "the worker ready again")
    await until(lambda: everyone_back(deployment), "every process back")
    await reload_reaches_everyone(deployment, generation=2)


@pytest.mark.slow  # real API and worker processes through Redis restarts: .ci/run's slow step
async def test_a_process_that_does_not_answer_is_named_and_the_reload_exits_1(deployment: Deployment) -> None:
    paused = deployment.processes["w2"]
    paused.send_signal(signal.SIGSTOP)  # alive, reported and subscribed, but it answers nothing
    try:
        code, out, err = await berth(
            "bundles", "reload", "alpha", "--descriptors", str(deployment.descriptors), "--wait", "3"
        )
    finally:
        paused.send_signal(signal.SIGCONT)
    assert code == 1, (out, err)
    assert "w1: generation 2 loaded" in out
    assert "w2: no answer within 3 s" in err


async def test_a_reload_that_reaches_no_process_exits_1(
    tmp_path: Path, database: str, redis_server: RedisServer
) -> None:
    descriptors = write_descriptors(tmp_path, database, redis_server.url)
    code, out, err = await berth("bundles", "reload", "alpha", "--descriptors", str(descriptors), "--wait", "3")
    assert (code, out) == (1, "")
    assert "alpha: the reload reached no process" in err
