"""A distributed deployment for fault tests: an API in this process, ``berth worker`` processes, a Redis server
of its own (so it can be restarted) and a scratch PostgreSQL database; and the consistency check every fault
test ends with.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import httpx
import redis.asyncio as aioredis
import uvicorn
import yaml
from berth_postgres.conversations import PostgresConversationStore
from berth_postgres.testing import async_scratch_database

from berth.api import build_services, create_app
from berth.runtime.blocks import Block, BlockType
from berth.runtime.persistence import block_from_record
from berth.storage.scope import ConversationScope

BERTH = str(Path(sys.executable).parent / "berth")
HERE = Path(__file__).resolve().parent
STEPS = 3


def _call(step: int) -> str:
    action = {"action": "call_tool", "tool_call": {"tool_id": "fault.work", "params": {"step": step}}}
    return f"<channel:thinking>step {step}</channel:thinking><channel:action>{json.dumps(action)}</channel:action>"


ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>All steps done.</channel:answer>'
SCRIPT = {
    "by_round": True,
    "chunk_size": 16,
    "responses": [*({"text": _call(n), "delay_s": 0.1} for n in range(1, STEPS + 1)), {"text": ANSWER}],
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A ``redis-server`` on a port of its own, without persistence (as the machine's): restarting it loses all."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _spawn(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def start(self) -> None:
        self._spawn()
        client = aioredis.from_url(self.url)
        try:
            for _ in range(500):
                try:
                    await client.ping()
                    return
                except (aioredis.ConnectionError, OSError):
                    await asyncio.sleep(0.01)
            raise AssertionError("redis-server did not start")
        finally:
            await client.aclose()

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    async def restart(self) -> None:
        self.stop()
        await self.start()


@dataclass
class Cluster:
    """The API's client, the worker processes, the database and what the workers' tool recorded."""

    root: Path
    descriptors: Path
    dsn: str
    redis: RedisServer
    client: httpx.AsyncClient
    ledger: Path
    lease_s: float
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started_workers: int = 0

    def start_worker(self, *extra_args: str) -> str:
        """Start one more ``berth worker`` (it is ready a few seconds later); return its name."""
        self.started_workers += 1
        name = f"w{self.started_workers}"
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - the process owns it
        self.workers[name] = subprocess.Popen(
            [
                BERTH,
                "worker",
                "--descriptors",
                str(self.descriptors),
                "--worker-id",
                name,
                "--no-watch",
                "--lease",
                str(self.lease_s),
                "--concurrency",
                "4",
                *extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        return name

    def kill(self, name: str) -> None:
        """``kill -9`` a worker."""
        process = self.workers.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait()

    def stop_all(self) -> None:
        for process in self.workers.values():
            process.terminate()
        for process in self.workers.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        self.workers.clear()

    async def conversation(self) -> str:
        response = await self.client.post("/v1/acme/support/conversations", json={})
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    async def start_turn(self, conversation: str, message: str = "do the job") -> dict[str, Any]:
        for _ in range(100):
            response = await self.client.post(
                f"/v1/acme/support/conversations/{conversation}/turns", json={"message": message}
            )
            if response.status_code != 503:
                break
            await asyncio.sleep(0.1)
        assert response.status_code == 202, response.text
        return dict(response.json())

    async def ending(self, events_url: str, timeout_s: float = 120) -> tuple[str, dict[str, Any]]:
        """Follow a turn's events (reconnecting with ``Last-Event-ID`` when the stream drops) to its end."""
        last_id: str | None = None

        async def follow() -> tuple[str, dict[str, Any]]:
            nonlocal last_id
            while True:
                headers = {"Last-Event-ID": last_id} if last_id else {}
                try:
                    async with self.client.stream("GET", events_url, headers=headers, timeout=None) as response:
                        frame: dict[str, str] = {}
                        async for line in response.aiter_lines():
                            if line.startswith(":"):
                                continue
                            if line:
                                name, _, value = line.partition(": ")
                                frame[name] = value
                                continue
                            if frame:
                                last_id = frame.get("id", last_id)
                                if frame.get("event") in ("turn.completed", "turn.failed"):
                                    return frame["event"], json.loads(frame["data"])
                                frame = {}
                except httpx.TransportError:
                    await asyncio.sleep(0.1)

        return await asyncio.wait_for(follow(), timeout_s)

    async def runner_of(self, turn_id: str, timeout_s: float = 30) -> str | None:
        """The worker whose pending queue entry is the turn's (None once the turn has ended)."""
        client = aioredis.from_url(self.redis.url)
        try:
            deadline = asyncio.get_running_loop().time() + timeout_s
            while asyncio.get_running_loop().time() < deadline:
                if await turn_state(self.dsn, turn_id) not in ("accepted", "running"):
                    return None
                pending = await client.xpending_range("berth:turns:stream", "workers", "-", "+", 50)
                queued = await client.hget("berth:turns:queued", turn_id)
                for entry in pending:
                    entry_id = entry["message_id"]
                    if queued is not None and entry_id == queued:
                        consumer = entry["consumer"]
                        name = consumer.decode() if isinstance(consumer, bytes) else str(consumer)
                        if name in self.workers:
                            return name
                await asyncio.sleep(0.01)
            raise AssertionError(f"no worker took turn {turn_id}")
        finally:
            await client.aclose()

    def ledger_counts(self) -> Counter[str]:
        """How many times each ``<turn>:<step>`` ran."""
        if not self.ledger.exists():
            return Counter()
        return Counter(line for line in self.ledger.read_text().splitlines() if line)


async def turn_state(dsn: str, turn_id: str) -> str | None:
    connection = await asyncpg.connect(dsn)
    try:
        state: str | None = await connection.fetchval("SELECT state FROM berth_turns WHERE turn_id=$1", turn_id)
        return state
    finally:
        await connection.close()


async def recorded_steps(dsn: str, turn_id: str) -> set[int]:
    """The steps whose tool result the turn's log holds (tool calls recorded as done)."""
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT block FROM berth_turn_log WHERE turn_id=$1 AND type=$2", turn_id, str(BlockType.REACT_TOOL_RESULT)
        )
    finally:
        await connection.close()
    steps = set()
    for row in rows:
        text = json.loads(row["block"]).get("text") or ""
        if text.startswith("step ") and text.endswith(" done"):
            steps.add(int(text.split()[1]))
    return steps


async def check_consistency(dsn: str, expected_turns: dict[str, str]) -> None:
    """Every conversation's timeline is readable; every committed turn is in it exactly once; every turn the API
    acknowledged (``expected_turns``: turn id → conversation id) is committed; no turn-log row is an orphan."""
    connection = await asyncpg.connect(dsn)
    try:
        orphans = await connection.fetchval(
            "SELECT count(*) FROM berth_turn_log l WHERE NOT EXISTS (SELECT 1 FROM berth_turns t WHERE"
            " t.tenant=l.tenant AND t.project=l.project AND t.user_id=l.user_id"
            " AND t.conversation_id=l.conversation_id AND t.turn_id=l.turn_id)"
        )
        assert orphans == 0, f"{orphans} turn-log rows belong to no turn"
        dangling = await connection.fetchval(
            "SELECT count(*) FROM berth_timeline t WHERE t.block IS NULL AND NOT EXISTS (SELECT 1 FROM berth_turn_log l"
            " WHERE l.tenant=t.tenant AND l.project=t.project AND l.user_id=t.user_id"
            " AND l.conversation_id=t.conversation_id AND l.turn_id=t.turn_id AND l.round=t.log_round"
            " AND l.position=t.log_position)"
        )
        assert dangling == 0, f"{dangling} timeline rows refer to no turn-log entry"
        scopes = await connection.fetch("SELECT DISTINCT tenant, project, user_id, conversation_id FROM berth_turns")
    finally:
        await connection.close()
    store = PostgresConversationStore(dsn, queued=True)
    await store.open()
    try:
        seen: dict[str, str] = {}
        for row in scopes:
            scope = ConversationScope(
                tenant=row["tenant"],
                project=row["project"],
                user_id=row["user_id"],
                conversation_id=row["conversation_id"],
            )
            snapshot = await store.conversation(scope).load()
            blocks: list[Block] = [block_from_record(record) for record in snapshot.timeline or ()]
            headers = Counter(b.turn_id for b in blocks if b.type == BlockType.TURN_HEADER)
            for turn in snapshot.turns:
                assert turn.turn_id not in seen, f"turn {turn.turn_id} is stored twice"
                seen[turn.turn_id] = scope.conversation_id
                assert turn.state == "completed", f"turn {turn.turn_id} is {turn.state}"
                assert headers[turn.turn_id] == 1, (
                    f"turn {turn.turn_id} is {headers[turn.turn_id]} times in its timeline"
                )
            assert set(headers) == {t.turn_id for t in snapshot.turns}
    finally:
        await store.aclose()
    assert {turn: seen.get(turn) for turn in expected_turns} == expected_turns, "an acknowledged turn was lost"


@asynccontextmanager
async def cluster(tmp_path: Path, *, workers: int, lease_s: float = 1.0) -> AsyncIterator[Cluster]:
    """A scratch database, a Redis server of its own, an API in this process and ``workers`` worker processes."""
    redis = RedisServer()
    await redis.start()
    try:
        async with async_scratch_database() as dsn:
            script = tmp_path / "script.yaml"
            script.write_text(yaml.safe_dump(SCRIPT))
            descriptors = tmp_path / "descriptors"
            descriptors.mkdir()
            storage = {"kind": "distributed", "postgres": {"dsn": dsn, "pool_max": 6}, "redis": {"url": redis.url}}
            (descriptors / "assembly.yaml").write_text(
                yaml.safe_dump(
                    {
                        "platform": {
                            "storage": storage,
                            "models": {"default": {"provider": "scripted", "model": str(script)}},
                            "react": {"conversation_titles": False},
                        },
                        "tenants": {"acme": {"projects": {"support": {}}}},
                    }
                )
            )
            bundle = {
                "source": {"path": str(HERE / "fault_bundle"), "module": "fault_bundle"},
                "props": {"ledger": str(tmp_path / "ledger.txt")},
            }
            (descriptors / "bundles.yaml").write_text(
                yaml.safe_dump(
                    {
                        "bundles": {"fault": bundle},
                        "tenants": {"acme": {"bundles": ["fault"], "default_bundle": "fault"}},
                    }
                )
            )
            (descriptors / "gateway.yaml").write_text(
                yaml.safe_dump(
                    {
                        "auth": {"mode": "none"},
                        "backpressure": {"queue_max": 1000},
                    }
                )
            )
            services = build_services(descriptors, var_root=tmp_path / "var")
            server = uvicorn.Server(
                uvicorn.Config(create_app(services=services), host="127.0.0.1", port=free_port(), log_level="warning")
            )
            serving = asyncio.create_task(server.serve())
            while not server.started:
                if serving.done():
                    serving.result()
                await asyncio.sleep(0.01)
            port = server.servers[0].sockets[0].getsockname()[1]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                running = Cluster(tmp_path, descriptors, dsn, redis, client, tmp_path / "ledger.txt", lease_s)
                try:
                    for _ in range(workers):
                        running.start_worker()
                    yield running
                finally:
                    running.stop_all()
                    server.should_exit = True
                    await serving
    finally:
        redis.stop()
