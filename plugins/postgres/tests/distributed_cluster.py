"""A distributed deployment for fault tests, and the checks every fault test ends with.

* :func:`cluster` — an API in this process, ``berth worker`` processes, a Redis server of its own (so it can be
  restarted) and a scratch PostgreSQL database (the fifty-kills test and its siblings).
* :func:`process_cluster` — the same with the API processes as ``berth run`` subprocesses too (so one can be
  ``kill -9``'d), Redis with an append-only file (a restart may keep its data, or lose it), every process reaching
  PostgreSQL through a :class:`~berth_postgres.testing.PostgresProxy` (so it can be cut for an outage), artifacts
  in a moto S3 server, and two tenants (the fault drill).
* The fault bundle (``fault_bundle/``) records every run of its tools in a ledger outside Berth
  (:meth:`Cluster.ledger_runs`); :func:`consistency_problems` and the functions after it read what was stored.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import httpx
import redis.asyncio as aioredis
import uvicorn
import yaml
from berth_postgres.conversations import PostgresConversationStore
from berth_postgres.testing import SERVER, PostgresProxy, async_scratch_database

from berth.api import create_app
from berth.runtime.blocks import Block, BlockType
from berth.runtime.persistence import block_from_record
from berth.storage.scope import ConversationScope
from berth.testing.redis import RedisServer, free_port
from berth.turns.build import build_services

BERTH = str(Path(sys.executable).parent / "berth")
HERE = Path(__file__).resolve().parent
STEPS = 3
TERMINAL_STATES = ("completed", "failed", "cancelled", "interrupted")
"""The states of a turn that has ended."""

T = TypeVar("T")
ARTIFACT_PREFIX = "drill/"
"""The key prefix of the artifacts in :func:`process_cluster`'s bucket."""


def _action(tool_id: str, params: Mapping[str, Any], thinking: str) -> str:
    """A model response that calls one tool."""
    action = {"action": "call_tool", "tool_call": {"tool_id": tool_id, "params": dict(params)}}
    return f"<channel:thinking>{thinking}</channel:thinking><channel:action>{json.dumps(action)}</channel:action>"


def _call(step: int) -> str:
    return _action("fault.work", {"step": step}, f"step {step}")


def _answer(text: str) -> str:
    return f'<channel:action>{{"action": "complete"}}</channel:action><channel:answer>{text}</channel:answer>'


ANSWER = _answer("All steps done.")
SCRIPT = {
    "by_round": True,
    "chunk_size": 16,
    "responses": [*({"text": _call(n), "delay_s": 0.1} for n in range(1, STEPS + 1)), {"text": ANSWER}],
}
"""Every turn: ``fault.work`` steps 1 to 3, then the answer ``All steps done.``."""

REPORT = "outputs/report.txt"
FILES_ANSWER = "All steps done, the report is attached."
FILES_SCRIPT = {
    "by_round": True,
    "chunk_size": 16,
    "responses": [
        {"text": _call(1), "delay_s": 0.1},
        {"text": _call(2), "delay_s": 0.1},
        {"text": _action("react.write", {"path": REPORT, "content": "steps 1 and 2 done\n"}, "report"), "delay_s": 0.1},
        {"text": _call(3), "delay_s": 0.1},
        {"text": _answer(FILES_ANSWER)},
    ],
}
"""Every turn: steps 1 and 2, a file artifact (``outputs/report.txt``), step 3, then the answer."""

CRASH_ANSWER = "Nothing crashed."
CRASH_SCRIPT = {
    "by_round": True,
    "chunk_size": 16,
    "responses": [{"text": _action("fault.crash", {}, "crash"), "delay_s": 0.1}, {"text": _answer(CRASH_ANSWER)}],
}
"""Every turn: ``fault.crash`` (which kills its worker while the poison switch is on), then the answer."""


class ClusterRedis:
    """A :class:`~berth.testing.redis.RedisServer` of the cluster's own, started and restarted off the event loop."""

    def __init__(self, *, appendonly: bool = False) -> None:
        self.server = RedisServer(appendonly=appendonly)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return self.server.url

    async def start(self) -> None:
        """Start the server and wait until it answers."""
        await asyncio.to_thread(self.server.start)

    async def restart(self, *, lose_data: bool = True) -> None:
        """``kill -9`` the server and start it again on the same port; ``lose_data`` deletes its files in between
        (without an append-only file it keeps nothing either way)."""
        await asyncio.to_thread(self.server.restart, lose_data=lose_data)

    def stop(self) -> None:
        """Stop the server and delete its files."""
        self.server.stop()


class ThreadedProxy:
    """A :class:`~berth_postgres.testing.PostgresProxy` on an event loop of its own thread, so what the test's
    own loop does (clients, checks) never delays the traffic of the processes that reach PostgreSQL through it."""

    def __init__(self, upstream: str = SERVER) -> None:
        self.proxy = PostgresProxy(upstream)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="postgres proxy", daemon=True)

    async def _on_proxy_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self._loop))

    async def start(self) -> None:
        """Start the thread and listen."""
        self._thread.start()
        await self._on_proxy_loop(self.proxy.start())

    def dsn(self, dsn: str) -> str:
        """``dsn`` through the proxy."""
        return self.proxy.dsn(dsn)

    async def cut(self) -> None:
        """End every connection through the proxy and refuse new ones (PostgreSQL unreachable)."""
        await self._on_proxy_loop(self.proxy.cut("refuse"))

    async def restore(self) -> None:
        """Forward again."""
        await self._on_proxy_loop(self.proxy.restore())

    async def aclose(self) -> None:
        """End every connection and stop the thread."""
        try:
            await self._on_proxy_loop(self.proxy.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            await asyncio.to_thread(self._thread.join, 10)
            self._loop.close()


class MotoS3:
    """moto's server in a process of its own on 127.0.0.1, with one empty bucket."""

    def __init__(self, bucket: str = "berth-drill") -> None:
        self.bucket = bucket
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    """The credentials moto accepts (any), for the processes that reach it."""

    def client(self) -> Any:
        """A boto3 S3 client of the server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def spawn(self, root: Path) -> None:
        """Start the server's process (its log in ``root``)."""
        binary = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
        log = open(root / "moto.log", "wb")  # noqa: SIM115 - the process owns it
        self.process = subprocess.Popen(
            [binary, "-H", "127.0.0.1", "-p", str(self.port)], stdout=log, stderr=subprocess.STDOUT
        )

    async def start(self, root: Path) -> None:
        """Start the server (its log in ``root``), wait until it answers and create the bucket."""
        self.spawn(root)
        async with httpx.AsyncClient() as probe:
            for _ in range(300):
                try:
                    await probe.get(self.endpoint, timeout=1)
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            else:
                raise AssertionError("moto_server did not start")
        await asyncio.to_thread(self.client().create_bucket, Bucket=self.bucket)

    def stop(self) -> None:
        """Stop the server."""
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=20)
            self.process = None


@dataclass
class Cluster:
    """The API's client, the worker (and API) processes, the database and what the workers' tools recorded."""

    root: Path
    descriptors: Path
    dsn: str
    """The database's DSN (direct: the test's own queries never go through the proxy)."""
    redis: ClusterRedis
    client: httpx.AsyncClient
    ledger: Path
    lease_s: float
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started_workers: int = 0
    concurrency: int = 4
    env: dict[str, str] | None = None
    """The environment of the processes started (None: this process's)."""
    apis: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    """The ``berth run`` processes by name (:func:`process_cluster`; the in-process API is not among them)."""
    api_ports: dict[str, int] = field(default_factory=dict)
    proxy: ThreadedProxy | None = None
    """The proxy every process reaches PostgreSQL through (:func:`process_cluster`)."""
    s3: MotoS3 | None = None
    """The S3 server holding the artifacts (:func:`process_cluster`)."""
    exits: dict[str, int] = field(default_factory=dict)
    """Worker processes that exited by themselves (a tool killed its process): name → return code."""

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the process owns it
        return subprocess.Popen([BERTH, *args], stdout=log, stderr=subprocess.STDOUT, env=self.env)

    def start_worker(self, *extra_args: str) -> str:
        """Start one more ``berth worker`` (it is ready a few seconds later); return its name."""
        self.started_workers += 1
        name = f"w{self.started_workers}"
        self.workers[name] = self._spawn(
            name,
            [
                "worker",
                "--descriptors",
                str(self.descriptors),
                "--worker-id",
                name,
                "--no-watch",
                "--lease",
                str(self.lease_s),
                "--concurrency",
                str(self.concurrency),
                *extra_args,
            ],
        )
        return name

    def worker_ready(self, name: str) -> bool:
        """Whether the worker said it is ready (it takes turns from then on)."""
        log = self.root / f"{name}.log"
        return log.exists() and b" ready" in log.read_bytes()

    def kill(self, name: str) -> None:
        """``kill -9`` a worker."""
        process = self.workers.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait()

    def reap(self) -> list[str]:
        """The workers that exited by themselves since the last call (recorded in :attr:`exits`)."""
        gone = [name for name, process in self.workers.items() if process.poll() is not None]
        for name in gone:
            self.exits[name] = self.workers.pop(name).returncode
        return gone

    def start_api(self, name: str) -> str:
        """Start a ``berth run`` API process ``name`` (on the port it had before, if it ran before)."""
        port = self.api_ports.setdefault(name, free_port())
        self.apis[name] = self._spawn(
            name,
            [
                "run",
                "--descriptors",
                str(self.descriptors),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--var",
                str(self.root / f"var-{name}"),
            ],
        )
        return name

    def api_url(self, name: str) -> str:
        """The base URL of API process ``name``."""
        return f"http://127.0.0.1:{self.api_ports[name]}"

    async def wait_api(self, name: str, timeout_s: float = 60) -> None:
        """Wait until API process ``name`` answers ``/healthz``."""
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient() as probe:
            while time.monotonic() < deadline:
                process = self.apis[name]
                if process.poll() is not None:
                    raise AssertionError(f"API process {name} exited with {process.returncode}")
                try:
                    if (await probe.get(f"{self.api_url(name)}/healthz", timeout=2)).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        raise AssertionError(f"API process {name} did not answer within {timeout_s} s")

    def kill_api(self, name: str) -> None:
        """``kill -9`` an API process."""
        process = self.apis.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait()

    def api_process_ids(self) -> dict[str, str]:
        """Each live API process's name in reload reports (``<hostname>-<pid>``) → its name here."""
        return {f"{socket.gethostname()}-{process.pid}": name for name, process in self.apis.items()}

    def stop_all(self) -> None:
        """Stop every worker and API process (``SIGTERM``; ``SIGKILL`` after 20 s)."""
        processes = [*self.workers.values(), *self.apis.values()]
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.workers.clear()
        self.apis.clear()

    async def conversation(self, tenant: str = "acme", project: str = "support") -> str:
        """Create a conversation; return its id."""
        response = await self.client.post(f"/v1/{tenant}/{project}/conversations", json={})
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

    async def running_turns(self) -> dict[str, list[str]]:
        """Each worker's pending queue entries' turn ids (the turns it runs, or took and died with)."""
        client = aioredis.from_url(self.redis.url, socket_timeout=5)
        try:
            pending = await client.xpending_range("berth:turns:stream", "workers", "-", "+", 500)
            by_worker: dict[str, list[str]] = {}
            for entry in pending:
                consumer = entry["consumer"]
                name = consumer.decode() if isinstance(consumer, bytes) else str(consumer)
                found: Any = await client.xrange("berth:turns:stream", entry["message_id"], entry["message_id"])
                for _, fields in found or ():
                    if fields:  # an entry deleted meanwhile has none
                        by_worker.setdefault(name, []).append(json.loads(fields[b"turn"])["turn_id"])
            return by_worker
        finally:
            await client.aclose()

    def ledger_runs(self) -> list[dict[str, Any]]:
        """Every run of the fault bundle's tools, as recorded: ``turn``, ``call``, ``pid``, ``kind`` (``work`` or
        ``crash``), ``step``, ``run`` (its id, which its result names), ``t0`` and ``t1`` (wall-clock time)."""
        if not self.ledger.exists():
            return []
        return [json.loads(line) for line in self.ledger.read_text().splitlines() if line]

    def ledger_counts(self) -> Counter[str]:
        """How many times each ``<turn>:<step>`` of ``fault.work`` ran."""
        return Counter(f"{run['turn']}:{run['step']}" for run in self.ledger_runs() if run["kind"] == "work")


async def turn_state(dsn: str, turn_id: str) -> str | None:
    connection = await asyncpg.connect(dsn)
    try:
        state: str | None = await connection.fetchval("SELECT state FROM berth_turns WHERE turn_id=$1", turn_id)
        return state
    finally:
        await connection.close()


_RESULT = re.compile(r"^step (\d+) done(?: \(run ([0-9a-f]+)\))?")


async def logged_results(dsn: str, turn_id: str | None = None) -> dict[tuple[str, str], tuple[int, str | None]]:
    """The ``fault.work`` results the turn logs hold (tool calls recorded as done): ``(turn, call id)`` → the step
    and the id of the run whose result was logged."""
    connection = await asyncpg.connect(dsn)
    try:
        query = "SELECT turn_id, block FROM berth_turn_log WHERE type=$1"
        args: list[Any] = [str(BlockType.REACT_TOOL_RESULT)]
        if turn_id is not None:
            query += " AND turn_id=$2"
            args.append(turn_id)
        rows = await connection.fetch(query, *args)
    finally:
        await connection.close()
    results = {}
    for row in rows:
        block = json.loads(row["block"])
        match = _RESULT.match(block.get("text") or "")
        if match:
            results[(row["turn_id"], str(block.get("call_id")))] = (int(match[1]), match[2])
    return results


async def recorded_steps(dsn: str, turn_id: str) -> set[int]:
    """The steps whose tool result the turn's log holds (tool calls recorded as done)."""
    return {step for step, _ in (await logged_results(dsn, turn_id)).values()}


async def stored_turns(dsn: str) -> dict[str, dict[str, Any]]:
    """Every stored turn by id: its scope, ``state``, ``exit_reason`` and ``attempts`` (None before that column)."""
    connection = await asyncpg.connect(dsn)
    try:
        has_attempts = await connection.fetchval(
            "SELECT count(*) FROM information_schema.columns WHERE table_name='berth_turns' AND column_name='attempts'"
        )
        attempts = "attempts" if has_attempts else "NULL::int AS attempts"
        rows = await connection.fetch(
            "SELECT tenant, project, user_id, conversation_id, turn_id, state, exit_reason, committed, started_at,"
            f" ended_at, {attempts} FROM berth_turns"
        )
    finally:
        await connection.close()
    return {row["turn_id"]: dict(row) for row in rows}


async def paths_stored_twice(dsn: str) -> list[str]:
    """Logical paths stored more than once: in one turn's log, or in one conversation's timeline."""
    connection = await asyncpg.connect(dsn)
    try:
        in_logs = await connection.fetch(
            "SELECT turn_id, path, count(*) AS n FROM berth_turn_log GROUP BY turn_id, path HAVING count(*) > 1"
        )
        in_timelines = await connection.fetch(
            "SELECT conversation_id, path, count(*) AS n FROM berth_timeline"
            " GROUP BY tenant, project, user_id, conversation_id, path HAVING count(*) > 1"
        )
    finally:
        await connection.close()
    return [f"turn log of {r['turn_id']}: {r['path']} x{r['n']}" for r in in_logs] + [
        f"timeline of {r['conversation_id']}: {r['path']} x{r['n']}" for r in in_timelines
    ]


async def artifact_objects(dsn: str) -> list[tuple[str, str]]:
    """``(path, object key)`` of every artifact row whose bytes are in the object store."""
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch("SELECT path, location FROM berth_artifacts WHERE location IS NOT NULL")
    finally:
        await connection.close()
    return [(row["path"], row["location"]) for row in rows]


async def consistency_problems(
    dsn: str, expected_turns: Mapping[str, str], *, ended: Mapping[str, str] | None = None
) -> list[str]:
    """What is inconsistent in the store: turn-log rows of no turn, timeline rows that refer to no log entry, a
    timeline that cannot be read, a turn stored in two conversations, a turn whose header is in its timeline other
    than once, a turn not ``completed`` (unless ``ended`` names its state: turn id → state), an acknowledged turn
    (``expected_turns``: turn id → conversation id) missing."""
    problems: list[str] = []
    connection = await asyncpg.connect(dsn)
    try:
        orphans = await connection.fetchval(
            "SELECT count(*) FROM berth_turn_log l WHERE NOT EXISTS (SELECT 1 FROM berth_turns t WHERE"
            " t.tenant=l.tenant AND t.project=l.project AND t.user_id=l.user_id"
            " AND t.conversation_id=l.conversation_id AND t.turn_id=l.turn_id)"
        )
        if orphans:
            problems.append(f"{orphans} turn-log rows belong to no turn")
        dangling = await connection.fetchval(
            "SELECT count(*) FROM berth_timeline t WHERE t.block IS NULL AND NOT EXISTS (SELECT 1 FROM berth_turn_log l"
            " WHERE l.tenant=t.tenant AND l.project=t.project AND l.user_id=t.user_id"
            " AND l.conversation_id=t.conversation_id AND l.turn_id=t.turn_id AND l.round=t.log_round"
            " AND l.position=t.log_position)"
        )
        if dangling:
            problems.append(f"{dangling} timeline rows refer to no turn-log entry")
        scopes = await connection.fetch("SELECT DISTINCT tenant, project, user_id, conversation_id FROM berth_turns")
    finally:
        await connection.close()
    store = PostgresConversationStore(dsn, queued=True)
    await store.open()
    seen: dict[str, str] = {}
    try:
        for row in scopes:
            scope = ConversationScope(
                tenant=row["tenant"],
                project=row["project"],
                user_id=row["user_id"],
                conversation_id=row["conversation_id"],
            )
            try:
                snapshot = await store.conversation(scope).load()
            except Exception as exc:
                problems.append(f"conversation {scope.conversation_id} cannot be loaded: {exc!r}")
                continue
            blocks: list[Block] = [block_from_record(record) for record in snapshot.timeline or ()]
            headers = Counter(b.turn_id for b in blocks if b.type == BlockType.TURN_HEADER)
            for turn in snapshot.turns:
                if turn.turn_id in seen:
                    problems.append(f"turn {turn.turn_id} is stored twice")
                seen[turn.turn_id] = scope.conversation_id
                wanted = (ended or {}).get(turn.turn_id, "completed")
                if turn.state != wanted:
                    problems.append(f"turn {turn.turn_id} is {turn.state}, not {wanted}")
                if turn.state == "completed" and headers[turn.turn_id] != 1:
                    problems.append(f"turn {turn.turn_id} is {headers[turn.turn_id]} times in its timeline")
            stray = set(headers) - {t.turn_id for t in snapshot.turns if t.state == "completed"}
            if stray:
                problems.append(f"conversation {scope.conversation_id}: headers of turns not completed: {stray}")
    finally:
        await store.aclose()
    lost = sorted(turn for turn, conversation in expected_turns.items() if seen.get(turn) != conversation)
    if lost:
        problems.append(f"{len(lost)} acknowledged turns were lost: {lost[:5]}")
    return problems


async def check_consistency(dsn: str, expected_turns: dict[str, str]) -> None:
    """Every conversation's timeline is readable; every committed turn is in it exactly once; every turn the API
    acknowledged (``expected_turns``: turn id → conversation id) is committed; no turn-log row is an orphan."""
    problems = await consistency_problems(dsn, expected_turns)
    assert not problems, "\n".join(problems)


def write_descriptors(
    root: Path,
    *,
    dsn: str,
    redis_url: str,
    ledger: Path,
    artifacts: Mapping[str, Any] | None = None,
    poison_switch: Path | None = None,
    two_tenants: bool = False,
) -> Path:
    """The descriptor set of a fault test's deployment (auth ``none``, the fault bundle, scripted models); with
    ``two_tenants`` also tenant ``globex`` (whose turns produce a file) and project ``acme/poison`` (whose turns call
    ``fault.crash``)."""
    scripts = {"work": SCRIPT, "files": FILES_SCRIPT, "crash": CRASH_SCRIPT}
    for name, script in scripts.items():
        (root / f"{name}.yaml").write_text(yaml.safe_dump(script))

    def model(name: str) -> dict[str, Any]:
        return {"default": {"provider": "scripted", "model": str(root / f"{name}.yaml")}}

    descriptors = root / "descriptors"
    descriptors.mkdir()
    storage: dict[str, Any] = {
        "kind": "distributed",
        "postgres": {"dsn": dsn, "pool_max": 6},
        "redis": {"url": redis_url},
    }
    if artifacts is not None:
        storage["artifacts"] = dict(artifacts)
    tenants: dict[str, Any] = {"acme": {"projects": {"support": {}}}}
    enabled: dict[str, Any] = {"acme": {"bundles": ["fault"], "default_bundle": "fault"}}
    if two_tenants:
        tenants["acme"]["projects"]["poison"] = {"models": model("crash")}
        tenants["globex"] = {"models": model("files"), "projects": {"support": {}}}
        enabled["globex"] = {"bundles": ["fault"], "default_bundle": "fault"}
    (descriptors / "assembly.yaml").write_text(
        yaml.safe_dump(
            {
                "platform": {
                    "storage": storage,
                    "models": model("work"),
                    "react": {"conversation_titles": False},
                },
                "tenants": tenants,
            }
        )
    )
    props: dict[str, Any] = {"ledger": str(ledger)}
    if poison_switch is not None:
        props["poison_switch"] = str(poison_switch)
    bundle = {"source": {"path": str(HERE / "fault_bundle"), "module": "fault_bundle"}, "props": props}
    (descriptors / "bundles.yaml").write_text(yaml.safe_dump({"bundles": {"fault": bundle}, "tenants": enabled}))
    (descriptors / "gateway.yaml").write_text(
        yaml.safe_dump({"auth": {"mode": "none"}, "backpressure": {"queue_max": 1000}})
    )
    return descriptors


@asynccontextmanager
async def in_process_api(descriptors: Path, var_root: Path) -> AsyncIterator[httpx.AsyncClient]:
    """An API over ``descriptors`` served in this process on a loopback port, and a client of it."""
    services = build_services(descriptors, var_root=var_root)
    server = uvicorn.Server(
        uvicorn.Config(create_app(services=services), host="127.0.0.1", port=free_port(), log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            yield client
    finally:
        server.should_exit = True
        await serving


@asynccontextmanager
async def cluster(tmp_path: Path, *, workers: int, lease_s: float = 1.0) -> AsyncIterator[Cluster]:
    """A scratch database, a Redis server of its own, an API in this process and ``workers`` worker processes."""
    redis = ClusterRedis()
    await redis.start()
    try:
        async with async_scratch_database() as dsn:
            ledger = tmp_path / "ledger.txt"
            descriptors = write_descriptors(tmp_path, dsn=dsn, redis_url=redis.url, ledger=ledger)
            async with in_process_api(descriptors, tmp_path / "var") as client:
                running = Cluster(tmp_path, descriptors, dsn, redis, client, ledger, lease_s)
                try:
                    for _ in range(workers):
                        running.start_worker()
                    yield running
                finally:
                    running.stop_all()
    finally:
        redis.stop()


@asynccontextmanager
async def process_cluster(
    tmp_path: Path, *, apis: int, workers: int, lease_s: float, concurrency: int = 4
) -> AsyncIterator[Cluster]:
    """A deployment of processes only: ``apis`` ``berth run`` processes (``a1``, ``a2``, …), ``workers`` ``berth
    worker`` processes, a Redis server with an append-only file, a scratch database that every process reaches
    through a proxy (:attr:`Cluster.proxy`), artifacts in a moto S3 server (:attr:`Cluster.s3`), tenants ``acme``
    (projects ``support`` and ``poison``) and ``globex``.

    The poison switch is the file ``poison-switch`` in ``tmp_path``: while it exists, ``fault.crash`` kills its
    worker. Every API process answers and every worker is ready when this yields.
    """
    redis = ClusterRedis(appendonly=True)
    s3 = MotoS3()
    await redis.start()
    await s3.start(tmp_path)
    proxy = ThreadedProxy()
    await proxy.start()
    try:
        async with async_scratch_database() as dsn:
            ledger = tmp_path / "ledger.txt"
            artifacts = {
                "kind": "s3",
                "bucket": s3.bucket,
                "prefix": ARTIFACT_PREFIX,
                "endpoint_url": s3.endpoint,
                "region": "us-east-1",
            }
            descriptors = write_descriptors(
                tmp_path,
                dsn=proxy.dsn(dsn),
                redis_url=redis.url,
                ledger=ledger,
                artifacts=artifacts,
                poison_switch=tmp_path / "poison-switch",
                two_tenants=True,
            )
            env = {**os.environ, **MotoS3.ENV}
            env.pop("AWS_PROFILE", None)
            async with httpx.AsyncClient(timeout=30) as client:
                running = Cluster(
                    tmp_path,
                    descriptors,
                    dsn,
                    redis,
                    client,
                    ledger,
                    lease_s,
                    concurrency=concurrency,
                    env=env,
                    proxy=proxy,
                    s3=s3,
                )
                try:
                    for n in range(1, apis + 1):
                        running.start_api(f"a{n}")
                    for _ in range(workers):
                        running.start_worker()
                    for name in list(running.apis):
                        await running.wait_api(name, timeout_s=120)
                    running.client.base_url = httpx.URL(running.api_url("a1"))
                    deadline = time.monotonic() + 120
                    while not all(running.worker_ready(name) for name in running.workers):
                        assert time.monotonic() < deadline, "the workers did not get ready"
                        await asyncio.sleep(0.2)
                    yield running
                finally:
                    running.stop_all()
    finally:
        await proxy.aclose()
        s3.stop()
        redis.stop()
