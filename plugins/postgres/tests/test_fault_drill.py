"""The fault drill of distributed mode: one run of real processes through every fault the documentation promises
to survive, then the promises checked.

Two ``berth run`` API processes and three ``berth worker`` processes (lease 1.5 s) share a scratch PostgreSQL
database (reached through a proxy that can be cut), a Redis server with an append-only file and a moto S3 server
for the artifacts. Clients in two tenants run turns back to back (``fault.work`` three times; in ``globex`` a file
too) and follow each turn's event stream across the API processes, resuming with ``Last-Event-ID`` whenever a
stream drops (and, now and then, dropping it on purpose). Meanwhile the drill kills ``berth worker`` processes
(``kill -9``, at least 20, each while it runs turns), terminates every PostgreSQL connection in three bursts,
restarts Redis twice (once keeping its append-only file, once losing its data), ``kill -9``'s an API process,
broadcasts a bundle reload after the Redis restarts, runs a poison turn (its tool kills its worker at every
attempt) and cuts PostgreSQL off for 20 s.

Afterwards it checks what issue 33 asks (no acknowledged turn without a terminal state after 3 leases, no turn run
or stored twice, no client told an outcome other than the stored one, no logical path stored twice, no sequence
number given to two events, every stream ended, the poison turn parked, no turn failed by the outage, the reload
reaching every process, every artifact's object in S3) and every row of the "Failure semantics" table of
``docs/deploy-distributed.md``: each row's fault must have been injected and what its cells state observed.

Every finding is collected (not the first one only) and written to ``drill-report.json`` in the test's folder;
the test fails listing each failed check with its evidence.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import random
import signal
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import httpx
import pytest
import redis.asyncio as aioredis
from distributed_cluster import (
    ANSWER,
    ARTIFACT_PREFIX,
    BERTH,
    CRASH_ANSWER,
    FILES_ANSWER,
    STEPS,
    TERMINAL_STATES,
    Cluster,
    artifact_objects,
    consistency_problems,
    logged_results,
    paths_stored_twice,
    process_cluster,
    stored_turns,
)

from berth.host.broadcast import read_worker_reports

DOC = Path(__file__).resolve().parents[3] / "docs" / "deploy-distributed.md"
SECTION = "## Failure semantics"

LEASE_S = 1.5
APIS = 2
WORKERS = 3
CLIENTS_PER_TENANT = 4
MIN_TURNS = 200
MIN_KILLS = 20
KILL_EVERY_S = 3.5
BURST_S = 3.0
OUTAGE_S = 20.0
CALM_S = 8.0
MAX_ATTEMPTS = 3
"""``platform.storage.max_turn_attempts`` (its default)."""
STREAM_TIMEOUT_S = 150.0
POST_TIMEOUT_S = 120.0
POISON_TIMEOUT_S = 60.0
RELOAD_WAIT_S = 15.0

ANSWERS = {
    ("acme", "support"): "All steps done.",
    ("globex", "support"): FILES_ANSWER,
    ("acme", "poison"): CRASH_ANSWER,
}
assert ANSWER.endswith("All steps done.</channel:answer>")
TERMINAL_EVENTS = ("turn.completed", "turn.failed")
POISONED = "turn_poisoned"


def payload_hash(event: str, data: str) -> str:
    """What identifies an event whatever its id: its name and data."""
    return hashlib.sha1(f"{event}\n{data}".encode(), usedforsecurity=False).hexdigest()[:12]


def parse_frame(frame: bytes) -> tuple[str, str, str] | None:
    """``(id, event, data)`` of one SSE frame as stored in Redis (None when it has no id)."""
    fields: dict[str, str] = {}
    for line in frame.decode().split("\n"):
        name, _, value = line.partition(": ")
        if name in ("id", "event", "data"):
            fields[name] = value
    if "id" not in fields:
        return None
    return fields["id"], fields.get("event", ""), fields.get("data", "")


def seq_of(event_id: str) -> int:
    """The sequence number of an event id ``<turn_id>:<seq>``."""
    return int(event_id.rpartition(":")[2])


@dataclass
class Fault:
    """One fault the drill injected: its kind, when it began and until when it may affect turns, what it hit."""

    kind: str
    start: float
    end: float
    detail: dict[str, Any] = field(default_factory=dict)

    def overlaps(self, begin: float, end: float) -> bool:
        """Whether ``[begin, end]`` meets the fault's window."""
        return begin <= self.end and end >= self.start


@dataclass
class Followed:
    """One acknowledged turn as its client saw it."""

    turn_id: str
    tenant: str
    project: str
    conversation: str
    events_url: str
    acked_at: float
    acked_by: str
    ended_at: float | None = None
    told: tuple[str, dict[str, Any]] | None = None
    seqs: list[int] = field(default_factory=list)
    connections: list[tuple[str, float]] = field(default_factory=list)
    """The API process of each connection to the stream and when it was made."""
    streaming_from: str | None = None
    disconnects: int = 0
    """Streams the client dropped on purpose (and resumed)."""
    out_of_order: list[str] = field(default_factory=list)
    refusals: Counter[str] = field(default_factory=Counter)

    @property
    def window(self) -> tuple[float, float]:
        """From its acknowledgement to its end as its client heard it."""
        return self.acked_at, self.until

    @property
    def until(self) -> float:
        """When the client heard the end (or now, if it never did)."""
        return self.ended_at if self.ended_at is not None else time.time()


@dataclass
class Finding:
    """One check: its name, whether it passed and the evidence."""

    name: str
    ok: bool
    evidence: str


class Drill:
    """The drill's clients, faults and records over a :func:`process_cluster`."""

    def __init__(self, cluster: Cluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=30.0), limits=httpx.Limits(max_connections=200))
        self.turns: dict[str, Followed] = {}
        self.frames: dict[tuple[str, int], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        """(turn, seq) → payload hash → who saw it (``client`` or ``redis``)."""
        self.names: dict[str, str] = {}
        """payload hash → event name."""
        self.faults: list[Fault] = []
        self.ready_apis: set[str] = set(cluster.apis)
        self.api_pids: set[int] = {process.pid for process in cluster.apis.values()}
        self.stop_load = asyncio.Event()
        self.killing = asyncio.Event()
        self.done_killing = False
        self.finished = asyncio.Event()
        self.refusals: Counter[str] = Counter()
        self.notes: dict[str, Any] = {}
        self.poison_turn: str | None = None
        self.deaths: Counter[str] = Counter()
        """turn → how many of the workers that held it died (killed by the drill or by the poison turn)."""
        self.after_poison_turn: str | None = None

    # -- records --------------------------------------------------------------------------------------------------

    def saw(self, turn_id: str, seq: int, event: str, data: str, who: str) -> None:
        """Record that ``who`` saw event ``seq`` of a turn with this payload."""
        digest = payload_hash(event, data)
        self.names[digest] = event
        self.frames[(turn_id, seq)][digest].add(who)

    def fault(self, kind: str, start: float, end: float, **detail: Any) -> Fault:
        """Record a fault."""
        injected = Fault(kind, start, end, detail)
        self.faults.append(injected)
        return injected

    def of_kind(self, kind: str) -> list[Fault]:
        """The faults of one kind, in order."""
        return [f for f in self.faults if f.kind == kind]

    def enough(self) -> bool:
        """Whether the drill has killed enough workers and acknowledged enough turns."""
        return len(self.of_kind("worker_kill")) >= MIN_KILLS and len(self.turns) >= MIN_TURNS

    # -- clients --------------------------------------------------------------------------------------------------

    def pick_api(self, avoid: str | None = None) -> str | None:
        """A live API process (another than ``avoid`` when there is one)."""
        ready = sorted(self.ready_apis)
        others = [name for name in ready if name != avoid]
        choices = others or ready
        return self.rng.choice(choices) if choices else None

    async def post_turn(self, tenant: str, project: str, conversation: str, message: str) -> Followed | None:
        """Start a turn through any API process, retrying refusals (an outage, a restart) for a while."""
        deadline = time.time() + POST_TIMEOUT_S
        while time.time() < deadline:
            api = self.pick_api()
            if api is None:
                await asyncio.sleep(0.2)
                continue
            url = f"{self.cluster.api_url(api)}/v1/{tenant}/{project}/conversations/{conversation}/turns"
            try:
                response = await self.http.post(url, json={"message": message})
            except httpx.TransportError as exc:
                self.refusals[f"POST {type(exc).__name__}"] += 1
                await asyncio.sleep(self.rng.uniform(0.2, 0.6))
                continue
            if response.status_code == 202:
                body = response.json()
                turn = Followed(body["turn_id"], tenant, project, conversation, body["events_url"], time.time(), api)
                self.turns[turn.turn_id] = turn
                return turn
            code = ""
            with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                code = str(response.json().get("error", {}).get("code", ""))
            self.refusals[f"POST {response.status_code} {code}".strip()] += 1
            await asyncio.sleep(self.rng.uniform(0.3, 0.8))
        self.refusals["POST gave up"] += 1
        return None

    async def follow(self, turn: Followed, *, timeout_s: float = STREAM_TIMEOUT_S, drop: bool = True) -> None:
        """Follow the turn's stream to its end across API processes, resuming with ``Last-Event-ID``; sometimes
        drop the stream on purpose (``drop``)."""
        deadline = time.time() + timeout_s
        drop_after = self.rng.randint(2, 12) if drop and self.rng.random() < 0.3 else None
        last_id: str | None = None
        api = turn.acked_by
        while time.time() < deadline:
            if api not in self.ready_apis:
                api = self.pick_api(avoid=api) or api
            headers = {"Last-Event-ID": last_id} if last_id else {}
            received = 0
            try:
                async with self.http.stream(
                    "GET", f"{self.cluster.api_url(api)}{turn.events_url}", headers=headers
                ) as response:
                    if response.status_code != 200:
                        turn.refusals[f"GET {response.status_code}"] += 1
                        await response.aread()
                    else:
                        turn.connections.append((api, time.time()))
                        turn.streaming_from = api
                        frame: dict[str, str] = {}
                        async for line in response.aiter_lines():
                            if line.startswith(":"):
                                continue
                            if line:
                                name, _, value = line.partition(": ")
                                frame[name] = value
                                continue
                            if "id" not in frame:
                                frame = {}
                                continue
                            event, data, event_id = frame.get("event", ""), frame.get("data", ""), frame["id"]
                            frame = {}
                            seq = seq_of(event_id)
                            self.saw(turn.turn_id, seq, event, data, "client")
                            if turn.seqs and seq <= turn.seqs[-1]:
                                turn.out_of_order.append(f"{seq} after {turn.seqs[-1]} from {api}")
                            turn.seqs.append(seq)
                            last_id = event_id
                            if event in TERMINAL_EVENTS:
                                turn.told = (event, json.loads(data))
                                turn.ended_at = time.time()
                                return
                            received += 1
                            if drop_after is not None and received >= drop_after:
                                drop_after = None
                                turn.disconnects += 1
                                break
            except httpx.TransportError as exc:
                turn.refusals[f"GET {type(exc).__name__}"] += 1
            finally:
                turn.streaming_from = None
            api = self.pick_api(avoid=api) or api
            await asyncio.sleep(self.rng.uniform(0.05, 0.3))
        turn.refusals["stream timeout"] += 1

    async def conversation(self, tenant: str, project: str) -> str:
        """Create a conversation through any API process."""
        for _ in range(100):
            api = self.pick_api()
            if api is not None:
                with contextlib.suppress(httpx.TransportError):
                    url = f"{self.cluster.api_url(api)}/v1/{tenant}/{project}/conversations"
                    response = await self.http.post(url, json={})
                    if response.status_code == 201:
                        return str(response.json()["id"])
            await asyncio.sleep(0.5)
        raise AssertionError(f"could not create a conversation in {tenant}/{project}")

    async def client(self, tenant: str, project: str) -> None:
        """Run turns back to back in one conversation until the load stops."""
        conversation = await self.conversation(tenant, project)
        while not self.stop_load.is_set():
            turn = await self.post_turn(tenant, project, conversation, "do the job")
            if turn is not None:
                await self.follow(turn)
            await asyncio.sleep(self.rng.uniform(0.3, 1.2))

    # -- watchers -------------------------------------------------------------------------------------------------

    async def sample_redis(self) -> None:
        """Read every live turn's events in Redis as they are written, so an event number Redis gives to two
        events is seen even when no client saw both."""
        client = aioredis.from_url(self.cluster.redis.url, socket_timeout=2, socket_connect_timeout=1)
        positions: dict[str, str] = {}
        try:
            while not self.finished.is_set():
                await asyncio.sleep(0.25)
                now = time.time()
                live = [t.turn_id for t in list(self.turns.values()) if t.ended_at is None or now - t.ended_at < 5]
                if not live:
                    continue
                try:
                    async with client.pipeline(transaction=False) as pipe:
                        for turn_id in live:
                            pipe.xrange(f"berth:events:{turn_id}", min=f"({positions.get(turn_id, '0-1')}")
                            pipe.xrevrange(f"berth:events:{turn_id}", count=1)
                        replies = await pipe.execute()
                except Exception:
                    continue
                for index, turn_id in enumerate(live):
                    entries, last = replies[2 * index], replies[2 * index + 1]
                    for entry_id, fields in entries:
                        position = entry_id.decode()
                        positions[turn_id] = position
                        parsed = parse_frame(fields[b"f"]) if b"f" in fields else None
                        if parsed is not None:
                            event_id, event, data = parsed
                            self.saw(turn_id, seq_of(event_id), event, data, "redis")
                    stored_last = last[0][0].decode() if last else None
                    if stored_last is None or _position(stored_last) < _position(positions.get(turn_id, "0-1")):
                        positions.pop(turn_id, None)  # the stream went back (lost): read it again from its start
        finally:
            await client.aclose()

    async def keep_workers(self) -> None:
        """Replace workers that exited by themselves (a poison turn killed them); keep at least WORKERS."""
        while not self.finished.is_set():
            for name in self.cluster.reap():
                at, code = time.time(), self.cluster.exits[name]
                log = (self.cluster.root / f"{name}.log").read_text(errors="replace").strip().splitlines()
                if code != -signal.SIGKILL:
                    self.fault("worker_failed", at, at, worker=name, code=code, last_line=log[-1][-300:] if log else "")
                    continue
                turns: list[str] = []
                with contextlib.suppress(Exception):  # its entries stay pending under its name for a lease
                    turns = (await self.cluster.running_turns()).get(name, [])
                self.deaths.update(turns)
                self.fault("worker_exit", at, at + 3 * LEASE_S, worker=name, code=code, turns=turns)
            while len(self.cluster.workers) < WORKERS:
                self.cluster.start_worker()
            await asyncio.sleep(0.3)

    async def killer(self) -> None:
        """``kill -9`` a worker that runs turns every few seconds (while :attr:`killing` is set), until
        MIN_KILLS and the drill's end.

        A turn may be killed with its worker at most ``MAX_ATTEMPTS - 1`` times (its last attempt must be able to
        complete: a turn whose worker died ``MAX_ATTEMPTS`` times is parked, as a poison turn is), and the poison
        turn's worker is left to the poison turn (each of its attempts must end by its own tool).
        """
        while not self.done_killing:
            await self.killing.wait()
            await asyncio.sleep(KILL_EVERY_S * self.rng.uniform(0.6, 1.4))
            if not self.killing.is_set() or self.done_killing:
                continue
            try:
                running = await self.cluster.running_turns()
            except Exception:
                continue
            candidates = [
                (name, turns)
                for name, turns in running.items()
                if name in self.cluster.workers
                and self.cluster.worker_ready(name)
                and self.poison_turn not in turns
                and all(self.deaths[turn] < MAX_ATTEMPTS - 1 for turn in turns)
            ]
            if not candidates:
                continue
            victim, turns = max(candidates, key=lambda c: (len(c[1]), self.rng.random()))
            self.deaths.update(turns)
            at = time.time()
            pid = self.cluster.workers[victim].pid
            self.cluster.kill(victim)
            self.fault("worker_kill", at, at + 3 * LEASE_S, worker=victim, pid=pid, turns=turns)
            self.cluster.start_worker()

    # -- faults ---------------------------------------------------------------------------------------------------

    async def terminate_burst(self, number: int) -> None:
        """Terminate every connection to the database every 0.1-0.4 s for BURST_S seconds."""
        admin = await asyncpg.connect(self.cluster.dsn)
        terminated = 0
        start = time.time()
        try:
            while time.time() - start < BURST_S:
                await asyncio.sleep(self.rng.uniform(0.1, 0.4))
                rows = await admin.fetch(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
                terminated += len(rows)
        finally:
            await admin.close()
        self.fault("pg_terminate", start, time.time() + 2 * LEASE_S, burst=number, terminated=terminated)

    async def redis_restart(self, *, lose_data: bool) -> None:
        """``kill -9`` Redis and start it again, keeping its append-only file or not."""
        start = time.time()
        await self.cluster.redis.restart(lose_data=lose_data)
        self.fault(
            "redis_lose" if lose_data else "redis_keep",
            start,
            time.time() + 3 * LEASE_S,
            down_s=round(time.time() - start, 2),
        )

    async def api_kill(self) -> None:
        """``kill -9`` the API process most clients stream from; start it again five seconds later."""
        streaming = Counter(t.streaming_from for t in self.turns.values() if t.streaming_from)
        victim = max(sorted(self.ready_apis), key=lambda name: streaming[name])
        streams = [t.turn_id for t in self.turns.values() if t.streaming_from == victim]
        start = time.time()
        self.ready_apis.discard(victim)
        self.cluster.kill_api(victim)
        fault = self.fault("api_kill", start, start + 2, api=victim, streams=streams)
        await asyncio.sleep(5)
        self.cluster.start_api(victim)
        self.api_pids.add(self.cluster.apis[victim].pid)
        await self.cluster.wait_api(victim, timeout_s=120)
        self.ready_apis.add(victim)
        fault.detail["back_after_s"] = round(time.time() - start, 1)

    async def outage(self) -> None:
        """PostgreSQL unreachable for OUTAGE_S seconds (every connection ended, new ones refused)."""
        assert self.cluster.proxy is not None
        self.killing.clear()
        start = time.time()
        await self.cluster.proxy.cut()
        await asyncio.sleep(OUTAGE_S)
        await self.cluster.proxy.restore()
        end = time.time()
        self.fault("pg_outage", start, end + 3 * LEASE_S, seconds=round(end - start, 1))
        self.killing.set()

    async def poison(self) -> None:
        """A turn whose tool kills its worker at every attempt; then the next turn of its conversation."""
        switch = self.cluster.root / "poison-switch"
        self.killing.clear()  # the poison turn kills workers enough: what it does to other turns is its doing alone
        await asyncio.sleep(3 * LEASE_S)  # the turns of the last worker killed are taken over meanwhile
        conversation = await self.conversation("acme", "poison")
        start = time.time()
        switch.touch()
        turn = await self.post_turn("acme", "poison", conversation, "crash")
        assert turn is not None, "the poison turn could not be started"
        self.poison_turn = turn.turn_id
        await self.follow(turn, timeout_s=POISON_TIMEOUT_S, drop=False)
        switch.unlink()  # whatever happened: from now on the turn (or the next one) can complete
        after = await self.post_turn("acme", "poison", conversation, "crash again")
        assert after is not None, "the turn after the poison turn could not be started"
        self.after_poison_turn = after.turn_id
        await self.follow(after, drop=False)
        self.fault("poison", start, time.time(), turn=turn.turn_id, after=after.turn_id)
        self.killing.set()

    async def all_workers_ready(self, timeout_s: float = 30) -> None:
        """Stop killing (:meth:`reload_check` starts again) and wait until every worker is ready."""
        self.killing.clear()
        for _ in range(int(timeout_s / 0.2)):
            if all(self.cluster.worker_ready(name) for name in self.cluster.workers):
                return
            await asyncio.sleep(0.2)

    async def reload_check(self) -> None:
        """After a Redis restart: every process reports again, and a reload broadcast reaches every one."""
        self.killing.clear()
        cluster = self.cluster
        client = aioredis.from_url(cluster.redis.url, socket_timeout=5)
        notes: dict[str, Any] = {}
        try:
            expected = {name: name for name in cluster.workers if cluster.worker_ready(name)}
            expected.update(cluster.api_process_ids())
            notes["processes"] = sorted(expected.values())
            deadline = time.time() + RELOAD_WAIT_S
            reports = {}
            while time.time() < deadline:
                reports = {r.worker_id: r for r in await read_worker_reports(client)}
                if set(expected) <= set(reports):
                    break
                await asyncio.sleep(0.5)
            notes["silent_after_restart"] = sorted(expected[p] for p in expected if p not in reports)
            before = {p: (reports[p].bundles["fault"].generation or 0) if p in reports else 0 for p in expected}
            process = await asyncio.create_subprocess_exec(
                BERTH,
                "bundles",
                "reload",
                "fault",
                "--descriptors",
                str(cluster.descriptors),
                "--wait",
                str(RELOAD_WAIT_S),
                env=cluster.env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
            notes["cli_exit"] = process.returncode
            notes["cli_stdout"] = stdout.decode()[-2000:]
            notes["cli_stderr"] = stderr.decode()[-2000:]
            deadline = time.time() + RELOAD_WAIT_S
            reached: set[str] = set()
            while time.time() < deadline and reached != set(expected):
                for report in await read_worker_reports(client):
                    bundle = report.bundles.get("fault")
                    if report.worker_id in expected and bundle and (bundle.generation or 0) > before[report.worker_id]:
                        reached.add(report.worker_id)
                await asyncio.sleep(0.5)
            notes["not_reached"] = sorted(expected[p] for p in expected if p not in reached)
        finally:
            await client.aclose()
            self.notes["reload"] = notes
            self.killing.set()

    async def chaos(self) -> None:
        """The faults, one after the other (the killer kills workers meanwhile), then the end of the load."""
        await asyncio.sleep(CALM_S)  # turns with no fault but a dropped stream now and then
        self.killing.set()
        await self.terminate_burst(1)
        await asyncio.sleep(4)
        await self.redis_restart(lose_data=False)
        await asyncio.sleep(6)
        await self.api_kill()
        await asyncio.sleep(4)
        await self.terminate_burst(2)
        await asyncio.sleep(4)
        await self.all_workers_ready()  # so that every process lives through the restart
        await self.redis_restart(lose_data=True)
        await self.reload_check()
        await self.terminate_burst(3)
        await self.poison()
        await self.outage()
        deadline = time.time() + 120
        while time.time() < deadline and not self.enough():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.finished.wait(), 1)
        self.done_killing = True
        self.killing.set()  # let the killer see that it is done
        self.stop_load.set()


def _position(entry_id: str) -> tuple[int, int]:
    seq, _, part = entry_id.partition("-")
    return int(seq), int(part or 0)


# -- the checks -------------------------------------------------------------------------------------------------------


@dataclass
class Evidence:
    """What the drill recorded and the store holds, with the derived facts the checks share."""

    drill: Drill
    stored: dict[str, dict[str, Any]]
    logged: dict[tuple[str, str], tuple[int, str | None]]
    ledger: list[dict[str, Any]]
    unfinished_after_leases: list[str]
    paths_twice: list[str]
    consistency: list[str]
    missing_objects: list[str]
    artifact_rows: int
    rerun: dict[str, list[str]] = field(default_factory=dict)
    """turn → calls run again after their logged result, or runs of the turn at once in two places."""
    call_ids_restarted: dict[str, list[str]] = field(default_factory=dict)
    """turn → steps run under more than one call id."""
    reused: dict[str, list[str]] = field(default_factory=dict)
    """turn → sequence numbers seen with two different events."""

    def __post_init__(self) -> None:
        runs: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        by_turn: dict[str, list[dict[str, Any]]] = defaultdict(list)
        steps: dict[tuple[str, int], set[str]] = defaultdict(set)
        for run in self.ledger:
            by_turn[run["turn"]].append(run)
            if run["kind"] == "work":
                runs[(run["turn"], run["call"])].append(run)
                steps[(run["turn"], run["step"])].add(run["call"])
        for (turn, call), (_, run_id) in self.logged.items():
            calls = runs.get((turn, call), [])
            logged = next((r for r in calls if r["run"] == run_id), None)
            if logged is None:
                self.rerun.setdefault(turn, []).append(f"{call}: logged run {run_id} is not in the ledger")
                continue
            for later in (r for r in calls if r["t0"] > logged["t0"]):
                self.rerun.setdefault(turn, []).append(
                    f"{call} (step {later['step']}) ran again in pid {later['pid']} after its result was logged"
                )
        for turn, turn_runs in by_turn.items():
            ordered = sorted(turn_runs, key=lambda r: r["t0"])
            for first, second in itertools.pairwise(ordered):
                if second["t0"] < first["t1"]:
                    self.rerun.setdefault(turn, []).append(
                        f"{first['call']} in pid {first['pid']} and {second['call']} in pid {second['pid']} ran at once"
                    )
        for (turn, step), call_ids in steps.items():
            if len(call_ids) > 1:
                self.call_ids_restarted.setdefault(turn, []).append(f"step {step} as {sorted(call_ids)}")
        for (turn, seq), seen in self.drill.frames.items():
            if len(seen) > 1:
                events = ", ".join(f"{self.drill.names[h]} (seen by {'+'.join(sorted(w))})" for h, w in seen.items())
                self.reused.setdefault(turn, []).append(f"seq {seq}: {events}")

    # -- per turn ---------------------------------------------------------------------------------------------------

    @property
    def acknowledged(self) -> dict[str, Followed]:
        """Every acknowledged turn."""
        return self.drill.turns

    @property
    def ordinary(self) -> dict[str, Followed]:
        """The acknowledged turns but the poison turn."""
        return {t: f for t, f in self.drill.turns.items() if t != self.drill.poison_turn}

    def state(self, turn_id: str) -> str:
        """The turn's stored state."""
        return str(self.stored.get(turn_id, {}).get("state", "missing"))

    def outcome_problem(self, turn: Followed) -> str | None:
        """How what the turn's client was told differs from what is stored (None when it does not)."""
        if turn.told is None:
            return "told nothing"
        kind, data = turn.told
        row = self.stored.get(turn.turn_id)
        if row is None:
            return f"told {kind}, stored nothing"
        if kind == "turn.completed":
            if row["state"] != "completed":
                return f"told completed, stored {row['state']} ({row['exit_reason']})"
            if data.get("answer") != ANSWERS[(turn.tenant, turn.project)]:
                return f"told the answer {data.get('answer')!r}"
            return None
        if row["state"] == "completed":
            return f"told failed ({data.get('code')}), stored completed"
        if (data.get("code") == POISONED) != (row["exit_reason"] == POISONED):
            return f"told failed ({data.get('code')}), stored {row['state']} ({row['exit_reason']})"
        return None

    def in_window(self, kind: str) -> set[str]:
        """The ordinary turns alive during a fault of ``kind``."""
        faults = self.drill.of_kind(kind)
        return {t for t, f in self.ordinary.items() if any(x.overlaps(f.acked_at, f.until) for x in faults)}

    def hit_by_kills(self) -> set[str]:
        """The ordinary turns a killed worker held (running, or committed but not yet acknowledged: its end event
        may not have been written)."""
        held = {t for fault in self.drill.of_kind("worker_kill") for t in fault.detail["turns"]}
        return held & set(self.ordinary)

    def hit_by_api_kill(self) -> set[str]:
        """The turns whose stream an API process served when it was killed (and had not told their end yet)."""
        return {
            turn_id
            for fault in self.drill.of_kind("api_kill")
            for turn_id in fault.detail["streams"]
            if turn_id in self.ordinary and self.ordinary[turn_id].until > fault.start
        }

    def touched(self) -> set[str]:
        """The turns any fault but a dropped stream may have touched."""
        windows = ("redis_keep", "redis_lose", "pg_terminate", "pg_outage", "poison", "worker_exit", "api_kill")
        touched = self.hit_by_kills() | self.hit_by_api_kill()
        for kind in windows:
            touched |= self.in_window(kind)
        return touched

    def dropped_cleanly(self) -> set[str]:
        """Ordinary turns whose client dropped the stream on purpose and no other fault touched."""
        return {t for t, f in self.ordinary.items() if f.disconnects} - self.touched()

    # -- claims -----------------------------------------------------------------------------------------------------

    def completes(self, turns: Iterable[str]) -> list[str]:
        """Turns that did not complete (stored and told)."""
        problems = []
        for turn_id in sorted(turns):
            turn = self.acknowledged[turn_id]
            if self.state(turn_id) != "completed" or turn.told is None or turn.told[0] != "turn.completed":
                told = f"{turn.told[0]} {turn.told[1].get('code', '')}".strip() if turn.told else "nothing"
                problems.append(f"{turn_id}: stored {self.state(turn_id)}, told {told}")
        return problems

    def ids_go_on(self, turns: Iterable[str]) -> list[str]:
        """Turns whose client saw an id that did not follow the one before, or never saw the end."""
        problems = []
        for turn_id in sorted(turns):
            turn = self.acknowledged[turn_id]
            if turn.out_of_order:
                problems.append(f"{turn_id}: {turn.out_of_order[:3]}")
            elif turn.told is None:
                problems.append(f"{turn_id}: the stream never ended ({dict(turn.refusals)})")
        return problems

    def no_reuse(self, turns: Iterable[str]) -> list[str]:
        """Turns with a sequence number given to two different events."""
        return [f"{t}: {self.reused[t][:3]}" for t in sorted(turns) if t in self.reused]

    def told_stored(self, turns: Iterable[str]) -> list[str]:
        """Turns whose client was told another outcome than the stored one."""
        return [f"{t}: {p}" for t in sorted(turns) if (p := self.outcome_problem(self.acknowledged[t]))]

    def not_run_again(self, turns: Iterable[str]) -> list[str]:
        """Turns with a call run again after its result was logged (or run in two places at once)."""
        return [f"{t}: {self.rerun[t][:3]}" for t in sorted(turns) if t in self.rerun]

    def same_call_id(self, turns: Iterable[str]) -> list[str]:
        """Turns with a step run again under another call id (the call ids of a resumed turn started over)."""
        return [f"{t}: {self.call_ids_restarted[t][:3]}" for t in sorted(turns) if t in self.call_ids_restarted]


Claim = tuple[str, str, Callable[[Evidence, set[str]], list[str]]]
"""A row's claim: the column (``turn``, ``stream``, ``tool``), a phrase its cell must hold, and the check of it
over the turns the fault hit (returning the problems)."""


@dataclass
class RowCheck:
    """The checks of one row of the failure-semantics table."""

    hit: Callable[[Evidence], set[str]]
    """The turns the row's fault hit."""
    injected: Callable[[Evidence], list[str]]
    """Why the fault does not count as injected (empty when it was)."""
    claims: list[Claim]


def _completes_elsewhere(evidence: Evidence, turns: set[str]) -> list[str]:
    problems = evidence.completes(turns)
    for fault in evidence.drill.of_kind("worker_kill"):
        for turn_id in set(fault.detail["turns"]) & turns:
            late = [r for r in evidence.ledger if r["turn"] == turn_id and r["pid"] == fault.detail["pid"]]
            if any(r["t1"] > fault.start for r in late):
                problems.append(f"{turn_id}: ran in {fault.detail['worker']} after it was killed")
    return problems


def _reconnects(evidence: Evidence, turns: set[str]) -> list[str]:
    problems = []
    for fault in evidence.drill.of_kind("api_kill"):
        for turn_id in sorted(set(fault.detail["streams"]) & turns):  # hit: not told its end before the kill
            turn = evidence.acknowledged[turn_id]
            later = [api for api, at in turn.connections if at > fault.start]
            if not later or later[0] == fault.detail["api"] or turn.told is None:
                problems.append(f"{turn_id}: connections after the kill {later}, told {turn.told is not None}")
    return problems


def _no_tool_in_api(evidence: Evidence, turns: set[str]) -> list[str]:
    in_api = [run for run in evidence.ledger if run["pid"] in evidence.drill.api_pids]
    return [f"{len(in_api)} tool runs in API processes: {in_api[:3]}"] if in_api else []


def _no_turn_fails(evidence: Evidence, turns: set[str]) -> list[str]:
    problems = []
    for turn_id in sorted(turns):
        told = evidence.outcome_problem(evidence.acknowledged[turn_id])
        if told is not None or evidence.state(turn_id) != "completed":
            problems.append(f"{turn_id}: stored {evidence.state(turn_id)}; {told or 'told so'}")
    return problems


def _poison_parked(evidence: Evidence, turns: set[str]) -> list[str]:
    turn_id = evidence.drill.poison_turn
    if turn_id is None:
        return ["no poison turn ran"]
    row = evidence.stored.get(turn_id, {})
    crashes = sum(1 for r in evidence.ledger if r["turn"] == turn_id and r["kind"] == "crash")
    problems = []
    if row.get("state") != "failed" or row.get("exit_reason") != POISONED:
        problems.append(f"stored {row.get('state')} ({row.get('exit_reason')}), not failed ({POISONED})")
    if row.get("attempts") not in (None, MAX_ATTEMPTS):
        problems.append(f"stored after {row.get('attempts')} attempts, not {MAX_ATTEMPTS}")
    if crashes != MAX_ATTEMPTS:
        problems.append(f"its tool killed {crashes} workers, not {MAX_ATTEMPTS}")
    return problems


def _next_turn_completes(evidence: Evidence, turns: set[str]) -> list[str]:
    after = evidence.drill.after_poison_turn
    if after is None:
        return ["the conversation's next turn was never acknowledged"]
    return evidence.completes({after})


def _told_poisoned(evidence: Evidence, turns: set[str]) -> list[str]:
    turn_id = evidence.drill.poison_turn
    told = evidence.acknowledged[turn_id].told if turn_id else None
    if told is None or told[0] != "turn.failed" or told[1].get("code") != POISONED:
        return [f"told {told}"]
    return []


def _once_per_attempt(evidence: Evidence, turns: set[str]) -> list[str]:
    turn_id = evidence.drill.poison_turn
    row = evidence.stored.get(turn_id or "", {})
    crashes = [r for r in evidence.ledger if r["turn"] == turn_id and r["kind"] == "crash"]
    attempts = row.get("attempts")
    if attempts is not None and len(crashes) != attempts:
        return [f"the tool ran {len(crashes)} times in {attempts} attempts"]
    if len({r["pid"] for r in crashes}) != len(crashes):
        return [f"the tool ran twice in one process: {[r['pid'] for r in crashes]}"]
    return []


def _resumes_anywhere(evidence: Evidence, turns: set[str]) -> list[str]:
    problems = []
    for turn_id in sorted(turns):
        turn = evidence.acknowledged[turn_id]
        if len(turn.connections) < 2 or turn.told is None:
            problems.append(f"{turn_id}: {len(turn.connections)} connections, told {turn.told is not None}")
    return problems


def _nothing_lost_or_repeated(evidence: Evidence, turns: set[str]) -> list[str]:
    problems = []
    for turn_id in sorted(turns):
        seqs = evidence.acknowledged[turn_id].seqs
        if seqs != list(range(1, len(seqs) + 1)) or not seqs:
            problems.append(f"{turn_id}: ids {seqs}")
    return problems


def _runs_once(evidence: Evidence, turns: set[str]) -> list[str]:
    problems = []
    for turn_id in sorted(turns):
        runs = Counter(r["call"] for r in evidence.ledger if r["turn"] == turn_id)
        if len(runs) != STEPS or any(n != 1 for n in runs.values()):
            problems.append(f"{turn_id}: runs by call {dict(runs)}")
    return problems


def _at_least(what: str, count: int, minimum: int) -> list[str]:
    return [] if count >= minimum else [f"{count} {what}, fewer than {minimum}"]


def _empty_bursts(evidence: Evidence) -> list[str]:
    bursts = evidence.drill.of_kind("pg_terminate")
    return [f"burst {f.detail['burst']} terminated no connection" for f in bursts if not f.detail["terminated"]]


def _short_outages(evidence: Evidence) -> list[str]:
    outages = evidence.drill.of_kind("pg_outage")
    return [f"an outage of {f.detail['seconds']} s only" for f in outages if f.detail["seconds"] < OUTAGE_S]


NOT_RUN_AGAIN: Claim = ("tool", "a call whose result was logged never runs again", Evidence.not_run_again)
ROWS: dict[str, RowCheck] = {
    "worker killed (`kill -9`)": RowCheck(
        hit=Evidence.hit_by_kills,
        injected=lambda e: (
            _at_least("workers killed", len(e.drill.of_kind("worker_kill")), MIN_KILLS)
            + _at_least("turns held by killed workers", len(e.hit_by_kills()), MIN_KILLS)
        ),
        claims=[
            ("turn", "completes on another worker", _completes_elsewhere),
            ("stream", "goes on with the next sequence numbers", Evidence.ids_go_on),
            ("stream", "a sequence number is never reused", Evidence.no_reuse),
            NOT_RUN_AGAIN,
            ("tool", "runs again under the same call id", Evidence.same_call_id),
        ],
    ),
    "API process killed (`kill -9`)": RowCheck(
        hit=Evidence.hit_by_api_kill,
        injected=lambda e: (
            _at_least("API processes killed", len(e.drill.of_kind("api_kill")), 1)
            + _at_least("streams the killed API process served", len(e.hit_by_api_kill()), 1)
        ),
        claims=[
            ("turn", "completes", Evidence.completes),
            ("stream", "reconnects to another API process", _reconnects),
            ("stream", "`Last-Event-ID`", Evidence.ids_go_on),
            ("tool", "an API process runs no tool", _no_tool_in_api),
        ],
    ),
    "Redis restarted, keeping its data (append-only file)": RowCheck(
        hit=lambda e: e.in_window("redis_keep"),
        injected=lambda e: (
            _at_least("restarts", len(e.drill.of_kind("redis_keep")), 1)
            + _at_least("turns alive at the restart", len(e.in_window("redis_keep")), 1)
        ),
        claims=[
            ("turn", "completes", Evidence.completes),
            ("stream", "ends with the turn's stored outcome", Evidence.told_stored),
            ("stream", "a sequence number is never reused", Evidence.no_reuse),
            NOT_RUN_AGAIN,
        ],
    ),
    "Redis restarted, losing its data": RowCheck(
        hit=lambda e: e.in_window("redis_lose"),
        injected=lambda e: (
            _at_least("restarts", len(e.drill.of_kind("redis_lose")), 1)
            + _at_least("turns alive at the restart", len(e.in_window("redis_lose")), 1)
        ),
        claims=[
            ("turn", "completes", Evidence.completes),
            ("stream", "ends with the turn's stored outcome", Evidence.told_stored),
            ("stream", "a sequence number is never reused", Evidence.no_reuse),
            NOT_RUN_AGAIN,
        ],
    ),
    "PostgreSQL connections terminated (`pg_terminate_backend`)": RowCheck(
        hit=lambda e: e.in_window("pg_terminate"),
        injected=lambda e: _at_least("bursts", len(e.drill.of_kind("pg_terminate")), 3) + _empty_bursts(e),
        claims=[
            ("turn", "completes", Evidence.completes),
            ("stream", "goes on with the next sequence numbers", Evidence.ids_go_on),
            NOT_RUN_AGAIN,
        ],
    ),
    "PostgreSQL unreachable for 20 s": RowCheck(
        hit=lambda e: e.in_window("pg_outage"),
        injected=lambda e: (
            _short_outages(e)
            + _at_least("outages", len(e.drill.of_kind("pg_outage")), 1)
            + _at_least("turns alive during the outage", len(e.in_window("pg_outage")), 1)
        ),
        claims=[
            ("turn", "no turn fails", _no_turn_fails),
            ("stream", "ends with the turn's stored outcome", Evidence.told_stored),
            NOT_RUN_AGAIN,
        ],
    ),
    "a tool kills its worker at every attempt (poison)": RowCheck(
        hit=lambda e: {t for t in (e.drill.poison_turn, e.drill.after_poison_turn) if t},
        injected=lambda e: _at_least("workers killed by the poison turn", len(e.drill.of_kind("worker_exit")), 1),
        claims=[
            ("turn", "`failed` with code `turn_poisoned` after `max_turn_attempts` (3) attempts", _poison_parked),
            ("turn", "the conversation takes its next turn", _next_turn_completes),
            ("stream", "ends with `turn.failed` `turn_poisoned`", _told_poisoned),
            ("tool", "runs once per attempt", _once_per_attempt),
        ],
    ),
    "client disconnects mid-stream": RowCheck(
        hit=Evidence.dropped_cleanly,
        injected=lambda e: _at_least("streams dropped with no other fault", len(e.dropped_cleanly()), 1),
        claims=[
            ("turn", "completes", Evidence.completes),
            ("stream", "resumes with `Last-Event-ID` on any API process", _resumes_anywhere),
            ("stream", "nothing lost, nothing repeated", _nothing_lost_or_repeated),
            ("tool", "runs once", _runs_once),
        ],
    ),
}
COLUMNS = ("fault", "turn", "stream", "tool")


def failure_semantics_rows(doc: Path) -> dict[str, dict[str, str]]:
    """The rows of the failure-semantics table of ``doc``: fault → column (``turn``, ``stream``, ``tool``) → cell."""
    text = doc.read_text(encoding="utf-8")
    assert SECTION in text, f"{doc.name} has no '{SECTION}' section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in section.splitlines() if line.strip().startswith("|")]
    assert len(lines) > 2, f"the '{SECTION}' section of {doc.name} holds no table"
    header = [cell.strip().lower() for cell in lines[0].strip("|").split("|")]
    assert header == ["fault", "the turn", "the stream", "a tool call"], header
    rows = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert len(cells) == len(COLUMNS), f"a row of {len(cells)} cells: {line}"
        rows[cells[0]] = dict(zip(COLUMNS[1:], cells[1:], strict=True))
    return rows


def check_rows(evidence: Evidence, rows: dict[str, dict[str, str]]) -> list[Finding]:
    """One finding per row of the table (and one per check without a row)."""
    findings = []
    for fault, cells in rows.items():
        check = ROWS.get(fault)
        if check is None:
            findings.append(Finding(f"table row '{fault}'", False, "the drill has no check for this row"))
            continue
        problems = [f"not injected: {p}" for p in check.injected(evidence)]
        hit = check.hit(evidence)
        for column, phrase, claim in check.claims:
            if phrase.lower() not in cells[column].lower():
                problems.append(f"the '{column}' cell does not say '{phrase}' (it says: {cells[column]})")
                continue
            problems += [f"'{phrase}': {p}" for p in claim(evidence, hit)]
        findings.append(Finding(f"table row '{fault}'", not problems, f"{len(hit)} turns hit; " + "; ".join(problems)))
    for fault in ROWS.keys() - rows.keys():
        findings.append(Finding(f"table row '{fault}'", False, "the table has no row for this fault the drill checks"))
    return findings


def check_issue(evidence: Evidence) -> list[Finding]:
    """The definition of done of issue 33, one finding each."""
    drill = evidence.drill
    ordinary = evidence.ordinary
    findings = [
        Finding(
            "≥ 200 acknowledged turns through ≥ 20 worker kills, 2 Redis restarts, 3 terminate bursts, an API kill",
            len(drill.turns) >= MIN_TURNS
            and len(drill.of_kind("worker_kill")) >= MIN_KILLS
            and len(drill.of_kind("redis_keep")) == 1
            and len(drill.of_kind("redis_lose")) == 1
            and len(drill.of_kind("pg_terminate")) == 3
            and len(drill.of_kind("api_kill")) == 1,
            f"{len(drill.turns)} turns, {Counter(f.kind for f in drill.faults)}",
        ),
        Finding(
            "0 acknowledged turns without a terminal state after 3 leases",
            not evidence.unfinished_after_leases,
            f"{len(evidence.unfinished_after_leases)}: {evidence.unfinished_after_leases[:10]}",
        ),
    ]
    twice = [p for p in evidence.consistency if "stored twice" in p or "times in its timeline" in p]
    findings.append(
        Finding(
            "0 turns run twice or stored twice",
            not evidence.rerun and not twice,
            f"{len(evidence.rerun)} turns ran a call again after its logged result or in two places at once: "
            f"{dict(list(evidence.rerun.items())[:5])}; stored twice: {twice[:5]}",
        )
    )
    told = evidence.told_stored(t for t in drill.turns if drill.turns[t].told is not None)
    findings.append(
        Finding("0 clients told an outcome different from the stored one", not told, f"{len(told)}: {told[:10]}")
    )
    findings.append(
        Finding(
            "0 logical paths stored twice",
            not evidence.paths_twice and not evidence.call_ids_restarted,
            f"{len(evidence.paths_twice)} paths: {evidence.paths_twice[:10]}; steps run under two call ids in "
            f"{len(evidence.call_ids_restarted)} turns: {dict(list(evidence.call_ids_restarted.items())[:5])}",
        )
    )
    findings.append(
        Finding(
            "0 seqs reused for different events",
            not evidence.reused,
            f"{sum(map(len, evidence.reused.values()))} seqs in {len(evidence.reused)} turns: "
            f"{dict(list(evidence.reused.items())[:5])}",
        )
    )
    silent = [f"{t}: {dict(f.refusals)}" for t, f in drill.turns.items() if f.told is None]
    findings.append(Finding("every stream ends", not silent, f"{len(silent)} did not: {silent[:10]}"))
    poison = _poison_parked(evidence, set()) + _told_poisoned(evidence, set()) + _next_turn_completes(evidence, set())
    findings.append(
        Finding(
            f"poison turn parked after {MAX_ATTEMPTS} attempts, its conversation usable again",
            not poison,
            f"{drill.poison_turn}: stored {evidence.stored.get(drill.poison_turn or '')}; told "
            f"{drill.turns[drill.poison_turn].told if drill.poison_turn else None}; " + "; ".join(poison),
        )
    )
    outage = _no_turn_fails(evidence, evidence.in_window("pg_outage"))
    findings.append(
        Finding(
            "a PostgreSQL outage of 20 s fails 0 turns",
            bool(drill.of_kind("pg_outage")) and not outage,
            f"{len(evidence.in_window('pg_outage'))} turns alive during it; {outage[:10]}",
        )
    )
    reload = drill.notes.get("reload", {})
    findings.append(
        Finding(
            "reload broadcast reaches every process after a Redis restart",
            bool(reload) and not reload.get("not_reached") and not reload.get("silent_after_restart"),
            json.dumps(reload)[:1500],
        )
    )
    findings.append(
        Finding(
            "every artifact row's object is in S3",
            evidence.artifact_rows > 0 and not evidence.missing_objects,
            f"{evidence.artifact_rows} rows, {len(evidence.missing_objects)} objects missing: "
            f"{evidence.missing_objects[:5]}",
        )
    )
    failed = {t: evidence.state(t) for t in ordinary if evidence.state(t) != "completed"}
    blamed = {
        t: {
            "exit_reason": evidence.stored.get(t, {}).get("exit_reason"),
            "attempts": evidence.stored.get(t, {}).get("attempts"),
            "killed with its worker": sum(t in f.detail["turns"] for f in drill.of_kind("worker_kill")),
            "died with the poison turn's worker": sum(t in f.detail["turns"] for f in drill.of_kind("worker_exit")),
            "faults meanwhile": sorted({f.kind for f in drill.faults if f.overlaps(*ordinary[t].window)}),
        }
        for t in list(failed)[:10]
    }
    findings.append(
        Finding(
            "every acknowledged turn but the poison turn completes",
            not failed,
            f"{len(failed)} did not: {Counter(failed.values())}; faults during the first ones: {blamed}",
        )
    )
    findings.append(
        Finding(
            "the store is consistent",
            not evidence.consistency,
            f"{len(evidence.consistency)} problems: {evidence.consistency[:10]}",
        )
    )
    failed_starts = [f.detail for f in drill.of_kind("worker_failed")]
    findings.append(
        Finding(
            "(beyond the issue) a worker that starts while PostgreSQL is unreachable waits for it instead of exiting",
            not failed_starts,
            f"{len(failed_starts)} workers exited: {failed_starts[:4]}",
        )
    )
    return findings


async def gather_evidence(drill: Drill) -> Evidence:
    """Wait 3 leases, then read what the store, the ledger and S3 hold."""
    cluster = drill.cluster
    await asyncio.sleep(3 * LEASE_S)
    stored = await stored_turns(cluster.dsn)
    unfinished = [
        f"{t} ({stored.get(t, {}).get('state', 'missing')})"
        for t in drill.turns
        if stored.get(t, {}).get("state") not in TERMINAL_STATES
    ]
    poison = drill.poison_turn
    ended = {poison: "failed"} if poison else {}
    objects = await artifact_objects(cluster.dsn)
    bucket = cluster.s3
    assert bucket is not None

    def missing() -> list[str]:
        s3, absent = bucket.client(), []
        for path, key in objects:
            try:
                s3.head_object(Bucket=bucket.bucket, Key=f"{ARTIFACT_PREFIX}{key}")
            except Exception as exc:
                absent.append(f"{path} ({key}): {exc}")
        return absent

    return Evidence(
        drill=drill,
        stored=stored,
        logged=await logged_results(cluster.dsn),
        ledger=cluster.ledger_runs(),
        unfinished_after_leases=unfinished,
        paths_twice=await paths_stored_twice(cluster.dsn),
        consistency=await consistency_problems(
            cluster.dsn, {t: f.conversation for t, f in drill.turns.items()}, ended=ended
        ),
        missing_objects=await asyncio.to_thread(missing),
        artifact_rows=len(objects),
    )


def report(tmp_path: Path, evidence: Evidence, findings: list[Finding], took_s: float) -> str:
    """Write ``drill-report.json`` and return a summary of the findings."""
    drill = evidence.drill
    faults = Counter(f.kind for f in drill.faults)
    seen_by = Counter("+".join(sorted(set().union(*seen.values()))) for seen in drill.frames.values())
    runs = Counter((r["turn"], r["call"]) for r in evidence.ledger if r["kind"] == "work")
    summary = {
        "took_s": round(took_s, 1),
        "turns": len(drill.turns),
        "faults": dict(faults),
        "events_seen_by": dict(seen_by),
        "tool_calls": {"calls": len(runs), "run_more_than_once": sum(1 for n in runs.values() if n > 1)},
        "stored_states": dict(Counter(row["state"] for row in evidence.stored.values())),
        "refusals": dict(drill.refusals),
        "findings": [asdict(f) for f in findings],
        "notes": drill.notes,
        "fault_log": [asdict(f) for f in drill.faults],
    }
    (tmp_path / "drill-report.json").write_text(json.dumps(summary, indent=2, default=str))
    lines = [
        f"drill: {len(drill.turns)} turns in {took_s:.0f} s, faults {dict(faults)}, events seen by {dict(seen_by)},"
        f" tool calls {summary['tool_calls']}"
    ]
    lines += [f"{'PASS' if f.ok else 'FAIL'} {f.name}: {f.evidence}" for f in findings]
    lines.append(f"report: {tmp_path / 'drill-report.json'}")
    return "\n".join(lines)


@pytest.mark.fault
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.aws
async def test_the_fault_drill_keeps_every_promise_of_the_failure_semantics_table(tmp_path: Path) -> None:
    rows = failure_semantics_rows(DOC)  # read first: a missing table fails at once
    began = time.time()
    rng = random.Random(33)
    async with process_cluster(tmp_path, apis=APIS, workers=WORKERS, lease_s=LEASE_S) as cluster:
        drill = Drill(cluster, rng)
        watchers = [
            asyncio.create_task(drill.sample_redis(), name="sampler"),
            asyncio.create_task(drill.keep_workers(), name="keeper"),
            asyncio.create_task(drill.killer(), name="killer"),
        ]
        clients = [
            asyncio.create_task(drill.client(tenant, "support"), name=f"client {tenant} {n}")
            for tenant in ("acme", "globex")
            for n in range(CLIENTS_PER_TENANT)
        ]
        try:
            await drill.chaos()
            await asyncio.gather(*clients)
            evidence = await gather_evidence(drill)
        finally:
            drill.finished.set()
            drill.done_killing = True
            drill.killing.set()
            drill.stop_load.set()
            for task in [*clients, *watchers]:
                task.cancel()
            await asyncio.gather(*clients, *watchers, return_exceptions=True)
            await drill.http.aclose()
        findings = check_issue(evidence) + check_rows(evidence, rows)
        summary = report(tmp_path, evidence, findings, time.time() - began)
        print(summary, file=sys.stderr)
    failed = [f for f in findings if not f.ok]
    assert not failed, f"{len(failed)} of {len(findings)} checks failed:\n" + "\n".join(
        f"- {f.name}: {f.evidence}" for f in failed
    )


def test_every_row_of_the_failure_semantics_table_has_a_check() -> None:
    """The table and the drill's checks name the same faults, and each row says what its checks check."""
    rows = failure_semantics_rows(DOC)
    assert sorted(rows) == sorted(ROWS)
    for fault, check in ROWS.items():
        for column, phrase, _ in check.claims:
            assert phrase.lower() in rows[fault][column].lower(), (fault, column, phrase)
