"""Scaling out: the same tool turns on the embedded single process, 1 API + 1 worker, and 1 API + 2 workers.

All on loopback with the scripted model (the one-tool turn of ``bench/api_load.py``: a ``hello.greet`` call, its
result, an answer streamed in 24-character chunks) and the load generator of ``bench/_loadgen.py``:

* **embedded**: ``berth run`` on SQLite, local files and the in-process bus: it accepts, runs and streams each turn;
* **1 API + N workers**: ``berth run`` on distributed storage (PostgreSQL, Redis, a local artifact folder) accepts
  each turn, stores it and queues it on the Redis stream; ``berth worker`` processes claim and run the turns and
  write their events to Redis, which the API streams to the client.

Per arm, a closed-loop throughput run (turns/s; every user's turns back to back) and an open-loop latency run
(turns arriving at ``--rate``; p50/p99 of the time to the first answer delta), and the CPU time per turn of each
process kind (from ``/proc/<pid>/stat`` before and after). The machine has two cores: a distributed arm's API,
workers, PostgreSQL and Redis share them, so the figures show what a hop through the queue costs here, not how
far the design scales on machines with cores to spare (there, each worker adds its own).

    .venv/bin/python bench/scale.py                 # 100 users x 3 turns, 300 arrivals at 30/s
    .venv/bin/python bench/scale.py --quick         # a smoke test
    .venv/bin/python bench/scale.py --redis-url redis://127.0.0.1:6379/11   # a Redis database you name

Without ``--redis-url`` the distributed arms run on a ``redis-server`` of the script's own (started on a free port,
without persistence, stopped at the end). A database named by ``--redis-url`` must hold no ``berth:*`` key (the
queue of a running deployment would mix with the bench's turns); the script never empties it: at the end it
deletes the ``berth:*`` keys its own run wrote there, and nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import redis
import yaml
from _machine import header
from api_load import (
    ANSWER,
    GATEWAY,
    TOOL_CALL,
    Run,
    cpu_seconds,
    free_port,
    latency,
    print_table,
    throughput,
    wait_ready,
)

BERTH = str(Path(sys.executable).parent / "berth")
KIND = "berth-one-request"  # a turn is one POST with its events in the response (any API process streams them)


@dataclass
class Arm:
    """One deployment under load: its API process and its worker processes."""

    name: str
    api: subprocess.Popen[bytes]
    port: int
    workers: list[subprocess.Popen[bytes]]


@dataclass
class Measured:
    """What an arm measured: the two runs and the CPU time of each process kind."""

    name: str
    rate: Run
    delay: Run
    api_cpu_s: float
    worker_cpu_s: float

    def cpu_row(self) -> list[str]:
        turns = self.rate.turns + self.delay.turns
        per_turn = (lambda s: f"{1000 * s / turns:.2f}") if turns else (lambda s: "nan")
        workers = per_turn(self.worker_cpu_s) if "worker" in self.name else "-"
        return [self.name, per_turn(self.api_cpu_s), workers, per_turn(self.api_cpu_s + self.worker_cpu_s)]


def write_descriptors(root: Path, storage: dict[str, object]) -> Path:
    root.mkdir(parents=True)
    script = root / "script.yaml"
    script.write_text(yaml.safe_dump({"chunk_size": 24, "by_round": True, "responses": [TOOL_CALL, ANSWER]}))
    descriptors = root / "descriptors"
    descriptors.mkdir()
    settings = {
        "storage": storage,
        "models": {"default": {"provider": "scripted", "model": str(script)}},
        "react": {"conversation_titles": False},
    }
    (descriptors / "assembly.yaml").write_text(yaml.safe_dump({"platform": settings}))
    (descriptors / "bundles.yaml").write_text(
        yaml.safe_dump({"bundles": {"hello": {"source": {"entry_point": "hello"}}}})
    )
    (descriptors / "gateway.yaml").write_text(yaml.safe_dump(GATEWAY))
    return descriptors


def environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")}


def start_api(descriptors: Path, var: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    command = [BERTH, "run", "--descriptors", str(descriptors), "--port", str(port), "--var", str(var)]
    process = subprocess.Popen(command, env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}/healthz", process)
    return process, port


def start_worker(descriptors: Path, name: str, log: Path) -> subprocess.Popen[bytes]:
    command = [BERTH, "worker", "--descriptors", str(descriptors), "--worker-id", name, "--no-watch"]
    command += ["--concurrency", "64"]
    return subprocess.Popen(command, env=environment(), stdout=subprocess.DEVNULL, stderr=open(log, "wb"))


def wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    """Wait until a process's log holds ``text`` (a worker says it is ready)."""
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{log.name}: no {text!r} (exit {process.poll()})")
        time.sleep(0.1)


def warm_up(port: int) -> None:
    """One turn end to end (it waits for a worker to be ready and take it)."""
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
        conversation = client.post("/v1/default/default/conversations", json={}).json()["id"]
        with client.stream(
            "POST",
            f"/v1/default/default/conversations/{conversation}/turns",
            json={"message": "warm up"},
            headers={"Accept": "text/event-stream"},
        ) as response:
            text = response.read().decode()
    if "turn.completed" not in text:
        raise SystemExit(f"the warm-up turn did not complete: {text[-400:]}")


def measure(arm: Arm, args: argparse.Namespace) -> Measured:
    pids = [worker.pid for worker in arm.workers]

    def worker_cpu() -> float:
        return sum(cpu_seconds(pid) for pid in pids)

    def timed(run: Callable[[], Run]) -> tuple[Run, float, float]:
        api_before, workers_before = cpu_seconds(arm.api.pid), worker_cpu()
        result = run()
        return result, cpu_seconds(arm.api.pid) - api_before, worker_cpu() - workers_before

    rate, api_a, workers_a = timed(
        lambda: asyncio.run(throughput(arm.name, arm.port, arm.api.pid, args.conversations, args.turns, KIND))
    )
    delay, api_b, workers_b = timed(
        lambda: asyncio.run(
            latency(arm.name, arm.port, arm.api.pid, args.conversations, args.rate, args.arrivals, KIND)
        )
    )
    return Measured(arm.name, rate, delay, api_a + api_b, workers_a + workers_b)


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=100, help="simulated users (connections)")
    parser.add_argument("--turns", type=int, default=3, help="turns per user in the throughput run")
    parser.add_argument("--rate", type=float, default=30.0, help="arrivals per second in the latency run")
    parser.add_argument("--arrivals", type=int, default=300, help="turns in the latency run")
    parser.add_argument("--quick", action="store_true", help="8 users, 1 turn, 16 arrivals: a smoke test")
    parser.add_argument(
        "--redis-url",
        help="a Redis database with no berth:* key, never emptied (default: a redis-server of the script's own)",
    )
    args = parser.parse_args()
    if args.quick:
        args.conversations, args.turns, args.arrivals = 8, 1, 16
    with bench_redis(args.redis_url) as redis_url:
        report(args, run_arms(args, redis_url))


@contextmanager
def bench_redis(url: str | None) -> Iterator[str]:
    """The Redis URL the distributed arms use: ``url`` once it is checked to hold no Berth keys (the bench's are
    deleted afterwards), or a ``redis-server`` of the script's own, stopped (and its files deleted) afterwards."""
    if url is not None:
        client = redis.Redis.from_url(url)
        try:
            taken = next(client.scan_iter(match="berth:*", count=1000), None)
        finally:
            client.close()
        if taken is not None:
            raise SystemExit(f"{url} holds Berth keys ({taken.decode()!r}, ...): name an unused database")
        try:
            yield url
        finally:
            delete_berth_keys(url)
        return
    from berth.testing.redis import RedisServer

    server = RedisServer()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def delete_berth_keys(url: str) -> None:
    """Delete the ``berth:*`` keys of ``url`` (the bench's own: the database held none before it ran)."""
    client = redis.Redis.from_url(url)
    try:
        for key in client.scan_iter(match="berth:*", count=1000):
            client.delete(key)
    finally:
        client.close()


def run_arms(args: argparse.Namespace, redis_url: str) -> list[Measured]:
    """Measure the embedded arm, then 1 API + 1 worker and 1 API + 2 workers on ``redis_url``."""
    from berth_postgres.testing import scratch_database

    results: list[Measured] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        embedded = write_descriptors(work / "embedded", {"kind": "embedded"})
        api, port = start_api(embedded, work / "embedded" / "var")
        try:
            warm_up(port)
            results.append(measure(Arm("embedded (1 process)", api, port, []), args))
        finally:
            stop([api])
        with scratch_database(migrated=True) as dsn:
            storage = {"kind": "distributed", "postgres": {"dsn": dsn, "pool_max": 20}, "redis": {"url": redis_url}}
            distributed = write_descriptors(work / "distributed", storage)
            api, port = start_api(distributed, work / "distributed" / "var")
            workers = [start_worker(distributed, "w1", work / "w1.log")]
            try:
                warm_up(port)
                results.append(measure(Arm("1 API + 1 worker", api, port, list(workers)), args))
                workers.append(start_worker(distributed, "w2", work / "w2.log"))
                wait_for_line(work / "w2.log", "ready", workers[-1])
                results.append(measure(Arm("1 API + 2 workers", api, port, list(workers)), args))
            finally:
                stop([api, *workers])
    return results


def report(args: argparse.Namespace, results: list[Measured]) -> None:
    print(f"machine: {os.cpu_count()} cores, {platform.platform()}; Python {platform.python_version()}")
    print("a turn: one tool call (hello.greet), its result, an answer streamed in 24-character chunks; one POST each\n")
    header = ["", "turns", "turns/s", "first delta p50 ms", "first delta p99 ms", "API CPU ms/turn"]
    header += ["API fsyncs/turn", "errors"]
    print(f"throughput: {args.conversations} users x {args.turns} turns back to back")
    print_table([header, *(m.rate.row() for m in results)])
    print(f"\nlatency: {args.arrivals} turns arriving at {args.rate:g}/s over {args.conversations} users")
    print_table([header, *(m.delay.row() for m in results)])
    print("\nCPU time per turn, by process kind (both runs)")
    print_table(
        [["", "API ms/turn", "workers ms/turn", "all Berth processes ms/turn"], *(m.cpu_row() for m in results)]
    )
    base = results[0].rate.per_second
    for measured in results[1:]:
        print(f"ratio {measured.name} / embedded turns/s: {measured.rate.per_second / base:.2f}x")
    two, one = results[2].rate.per_second, results[1].rate.per_second
    print(f"ratio 2 workers / 1 worker turns/s: {two / one:.2f}x (2 cores shared with PostgreSQL and Redis)")
    errors = sum(m.rate.errors + m.delay.errors for m in results)
    print(f"errors: {errors} (must be 0)")
    if errors:
        raise SystemExit(1)


if __name__ == "__main__":
    print(header(), flush=True)
    main()
