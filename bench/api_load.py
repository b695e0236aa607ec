"""Load on the HTTP API: concurrent conversations streaming tool turns from one uvicorn worker.

Each server runs in its own process on loopback, the load generator in this one:

* **Berth** (``berth run`` with the scripted model, embedded storage, auth none, admission on). Every turn is a
  tool turn: the model's first call asks for ``hello.greet``, the tool runs, its second call streams the answer
  in 24-character chunks (a ``by_round`` script, so concurrent turns never take each other's responses);
* **the peer**: FastAPI + SSE (``sse-starlette``) around LangGraph's ``langchain.agents.create_agent`` with an
  ``AsyncSqliteSaver`` checkpointer — its documented durable single-process setup — and the same instant
  scripted model, the same one-tool turn and the same answer chunks (``bench/_langgraph_peer.py``); a second
  peer with ``langgraph.prebuilt.create_react_agent``;
* **bare**: a FastAPI ``StreamingResponse`` replaying one Berth turn's SSE bytes: what streaming alone costs.

The load generator is :mod:`_loadgen`: raw HTTP/1.1 on one keep-alive connection per simulated user, opened
before the clock starts (httpx cost more CPU per request than the bare endpoint does, so with it the baseline
measured the client; and 200 simultaneous connects put the listen backlog, not the server, into the p99).
Two measurements per arm:

* **throughput** (closed loop): every user runs ``--turns`` turns back to back; turns/s, and the server's own CPU
  time per turn (``/proc/<pid>/stat`` of the server process, before and after);
* **latency** (open loop): turns arrive at a fixed rate (``--rate``, 50/s by default: a busy worker, well
  below saturation), the same for every arm, each taken by an idle user; time from arrival to the first
  answer delta, p50/p99. (At saturation every turn waits behind all the others, so a closed loop measures the
  queue's length, not the platform.)

A Berth turn is two requests (``POST …/turns``, then ``GET`` its events) or one (``Accept: text/event-stream``:
the events in the ``POST``'s response); the peer's is one ``POST`` streaming its events, so the like-for-like
ratio is Berth's one-request arm against it. Targets: Berth ≥ 5x the peer's tool turns/s, server CPU ≤ 2 ms per
tool turn, p99 first delta ≤ 15 ms at 50 turns/s, 0 errors.

    .venv/bin/python bench/api_load.py --conversations 200 --turns 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml
from _loadgen import Connection, HttpError, first_answer_delta

ROOT = Path(__file__).resolve().parent.parent
ANSWER_TEXT = "Berth answers with a streamed reply of moderate length. " * 6
"""The answer every arm streams (the peer's model streams the same text, in the same chunks)."""
TOOL_CALL = (
    "<channel:thinking>greet first</channel:thinking><channel:action>"
    + json.dumps({"action": "call_tool", "tool_call": {"tool_id": "hello.greet", "params": {"name": "Ann"}}})
    + "</channel:action>"
)
ANSWER = (
    '<channel:thinking>quick</channel:thinking><channel:action>{"action": "complete"}</channel:action>'
    "<channel:answer>" + ANSWER_TEXT + "</channel:answer>"
    '<channel:followups>{"followups": ["more?"]}</channel:followups>'
)
PEERS = ("create_agent", "create_react_agent")
GATEWAY = {
    "auth": {"mode": "none"},
    "limits": {"default": {"requests_per_minute": 6_000_000, "burst": 100_000, "concurrent_turns": 1_000}},
    "backpressure": {"max_inflight_turns_per_worker": 512, "queue_max": 1_000},
}
BARE_APP = textwrap.dedent(
    """
    import sys
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse
    import uvicorn

    frames = [line.encode() for line in open(sys.argv[1], encoding="utf-8").read().split("\\x1e") if line]
    app = FastAPI()

    @app.get("/stream")
    async def stream():
        async def body():
            for frame in frames:
                yield frame
        return StreamingResponse(body(), media_type="text/event-stream")

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="error")
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"server at {url} did not start")


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted values."""
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Run:
    """What one arm measured."""

    name: str
    first_delta_s: list[float] = field(default_factory=list)
    turns: int = 0
    errors: int = 0
    elapsed_s: float = 0.0
    server_cpu_s: float = float("nan")

    @property
    def per_second(self) -> float:
        """Turns per second."""
        return self.turns / self.elapsed_s if self.elapsed_s else float("nan")

    @property
    def cpu_ms_per_turn(self) -> float:
        """The server process's CPU time per turn, in ms."""
        return 1000 * self.server_cpu_s / self.turns if self.turns else float("nan")

    def row(self) -> list[str]:
        ordered = sorted(self.first_delta_s) or [float("nan")]
        p99 = percentile(ordered, 0.99)
        return [
            self.name,
            str(self.turns),
            f"{self.per_second:.1f}",
            f"{statistics.median(ordered) * 1000:.1f}",
            f"{p99 * 1000:.1f}",
            f"{self.cpu_ms_per_turn:.2f}",
            str(self.errors),
        ]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class User:
    """One simulated user: a keep-alive connection and, for Berth, its conversation."""

    def __init__(self, port: int) -> None:
        self.connection = Connection("127.0.0.1", port)
        self.conversation = ""

    async def berth_turn(self, n: int) -> float | None:
        """Start a turn and read its events; return when the first answer delta arrived."""
        headers = await self.connection.request(
            "POST", f"/v1/default/default/conversations/{self.conversation}/turns", {"message": f"question {n}"}
        )
        url = json.loads(await self.connection.body(headers))["events_url"]
        return await first_answer_delta(self.connection, await self.connection.request("GET", url))

    async def berth_streamed_turn(self, n: int) -> float | None:
        """Start a turn whose events come in the response (one request); return at the first answer delta."""
        headers = await self.connection.request(
            "POST",
            f"/v1/default/default/conversations/{self.conversation}/turns",
            {"message": f"question {n}"},
            accept="text/event-stream",
        )
        return await first_answer_delta(self.connection, headers)

    async def peer_turn(self, n: int) -> float | None:
        """One turn on the LangGraph peer: a POST whose response streams the turn's events."""
        headers = await self.connection.request(
            "POST", f"/threads/{self.conversation}/turns", {"message": f"question {n}"}, accept="text/event-stream"
        )
        return await first_answer_delta(self.connection, headers)

    async def bare_turn(self, n: int) -> float | None:
        """Stream the recorded frames once; return when the first answer delta arrived."""
        return await first_answer_delta(self.connection, await self.connection.request("GET", "/stream"))


Kind = str
"""Which server an arm talks to: ``bare``, ``berth``, ``berth-one-request`` or ``peer``."""


async def open_users(port: int, count: int, kind: Kind) -> list[User]:
    """Connect ``count`` users (and start a conversation each, on Berth and the peer), before anything is timed."""
    users = [User(port) for _ in range(count)]
    for index, user in enumerate(users):
        await user.connection.open()
        if kind.startswith("berth"):
            headers = await user.connection.request("POST", "/v1/default/default/conversations", {})
            user.conversation = json.loads(await user.connection.body(headers))["id"]
        elif kind == "peer":
            user.conversation = f"thread-{os.getpid()}-{port}-{index}-{time.monotonic_ns()}"
    return users


def turn_of(user: User, kind: Kind, n: int) -> Awaitable[float | None]:
    """One turn of ``kind`` by ``user``."""
    if kind == "bare":
        return user.bare_turn(n)
    if kind == "peer":
        return user.peer_turn(n)
    return user.berth_streamed_turn(n) if kind == "berth-one-request" else user.berth_turn(n)


async def throughput(name: str, port: int, pid: int, conversations: int, turns: int, kind: Kind) -> Run:
    """Closed loop: every user runs ``turns`` turns back to back; the server's CPU time is read around it."""
    users = await open_users(port, conversations, kind)
    run = Run(name)

    async def user_loop(user: User) -> None:
        for n in range(turns):
            started = time.perf_counter()
            try:
                delay = await turn_of(user, kind, n)
            except (HttpError, OSError, asyncio.IncompleteReadError, ValueError):
                run.errors += 1
                return
            if delay is None:
                run.errors += 1
                continue
            run.first_delta_s.append(delay - started)
            run.turns += 1

    cpu_before = cpu_seconds(pid)
    started = time.perf_counter()
    await asyncio.gather(*(user_loop(user) for user in users))
    run.elapsed_s = time.perf_counter() - started
    run.server_cpu_s = cpu_seconds(pid) - cpu_before
    for user in users:
        await user.connection.close()
    return run


async def latency(name: str, port: int, pid: int, conversations: int, rate: float, arrivals: int, kind: Kind) -> Run:
    """Open loop: ``arrivals`` turns arrive ``rate`` per second, each taken by an idle user."""
    users = await open_users(port, conversations, kind)
    idle: asyncio.Queue[User] = asyncio.Queue()
    for user in users:
        idle.put_nowait(user)
    run = Run(name)

    async def one(n: int, arrived: float) -> None:
        user = await idle.get()  # waiting for an idle user counts: it is part of the latency
        try:
            delay = await turn_of(user, kind, n)
        except (HttpError, OSError, asyncio.IncompleteReadError, ValueError):
            run.errors += 1
            return
        idle.put_nowait(user)
        if delay is None:
            run.errors += 1
            return
        run.first_delta_s.append(delay - arrived)
        run.turns += 1

    tasks = []
    cpu_before = cpu_seconds(pid)
    started = time.perf_counter()
    for n in range(arrivals):
        due = started + n / rate
        await asyncio.sleep(max(0.0, due - time.perf_counter()))  # pacing the arrivals, not a test wait
        tasks.append(asyncio.create_task(one(n, due)))
    await asyncio.gather(*tasks)
    run.elapsed_s = time.perf_counter() - started
    run.server_cpu_s = cpu_seconds(pid) - cpu_before
    for user in users:
        await user.connection.close()
    return run


def capture_frames(base: str) -> list[str]:
    """One real turn's SSE frames from Berth, to replay from the bare endpoint."""
    with httpx.Client(base_url=base, timeout=60) as client:
        conversation = client.post("/v1/default/default/conversations", json={}).json()["id"]
        turn = client.post(
            f"/v1/default/default/conversations/{conversation}/turns", json={"message": "capture"}
        ).json()
        with client.stream("GET", turn["events_url"]) as response:
            text = response.read().decode()
    return [frame + "\n\n" for frame in text.split("\n\n") if frame.strip() and not frame.startswith(":")]


def print_table(rows: list[list[str]]) -> None:
    """Print rows as aligned columns (the first left-aligned)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(
                cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )


def p99(run: Run) -> float:
    """The 99th percentile of a run's first-delta times, in seconds."""
    return percentile(sorted(run.first_delta_s), 0.99) if run.first_delta_s else float("nan")


@dataclass
class Server:
    """One server process under load."""

    name: str
    kind: Kind
    process: subprocess.Popen[bytes]
    port: int

    def stop(self) -> None:
        """Terminate it and wait."""
        self.process.terminate()
        self.process.wait(20)


def start_berth(work: Path) -> Server:
    """``berth run`` on a free port with the scripted tool-turn model and the hello bundle."""
    script = work / "script.yaml"
    script.write_text(yaml.safe_dump({"chunk_size": 24, "by_round": True, "responses": [TOOL_CALL, ANSWER]}))
    descriptors = work / "descriptors"
    descriptors.mkdir()
    # Titles off: the peers title nothing, and a title is one more model call per new conversation.
    model = {"provider": "scripted", "model": str(script)}
    settings = {"models": {"default": model}, "react": {"conversation_titles": False}}
    (descriptors / "assembly.yaml").write_text(yaml.safe_dump({"platform": settings}))
    (descriptors / "bundles.yaml").write_text(
        yaml.safe_dump({"bundles": {"hello": {"source": {"entry_point": "hello"}}}})
    )
    # Admission stays on, with limits above the offered load: the run measures what checking them costs,
    # not what refusing costs.
    (descriptors / "gateway.yaml").write_text(yaml.safe_dump(GATEWAY))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")}
    command = [str(Path(sys.executable).parent / "berth"), "run", "--descriptors", str(descriptors)]
    command += ["--port", str(port), "--var", str(work / "var")]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}/readyz", process)
    return Server("berth", "berth", process, port)


def start_bare(work: Path, frames: list[str]) -> Server:
    """The bare ``StreamingResponse`` replaying ``frames``."""
    (work / "frames.txt").write_text("\x1e".join(frames))
    (work / "bare.py").write_text(BARE_APP)
    port = free_port()
    command = [sys.executable, str(work / "bare.py"), str(work / "frames.txt"), str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}/docs", process)
    return Server("bare StreamingResponse", "bare", process, port)


def peer_missing() -> str | None:
    """None when the LangGraph peer can run (the ``bench`` extra), else what is missing."""
    try:
        import aiosqlite  # noqa: F401
        import langchain.agents  # noqa: F401
        import langgraph.checkpoint.sqlite.aio  # noqa: F401
        import sse_starlette  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def start_peer(work: Path, builder: str) -> Server:
    """The LangGraph peer (``bench/_langgraph_peer.py``) with ``builder``, warmed by one turn."""
    port = free_port()
    database = str(work / f"{builder}.sqlite")
    command = [sys.executable, str(ROOT / "bench" / "_langgraph_peer.py"), str(port), database, builder]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_ready(f"http://127.0.0.1:{port}/ready", process)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        warm = client.post("/threads/warm-up/turns", json={"message": "hello"})
        if "channel.delta" not in warm.text:
            raise SystemExit(f"the {builder} peer did not stream an answer: {warm.text[:300]}")
    return Server(f"LangGraph {builder} + AsyncSqliteSaver", "peer", process, port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=200, help="simulated users (connections)")
    parser.add_argument("--turns", type=int, default=2, help="turns per user in the throughput run")
    parser.add_argument("--rate", type=float, default=50.0, help="arrivals per second in the latency run")
    parser.add_argument("--arrivals", type=int, default=400, help="turns in the latency run")
    parser.add_argument("--quick", action="store_true", help="10 users, 1 turn, 20 arrivals: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.conversations, args.turns, args.arrivals = 10, 1, 20
    users, turns, rate, arrivals = args.conversations, args.turns, args.rate, args.arrivals
    missing = peer_missing()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        servers: list[Server] = []
        try:
            berth = start_berth(work)
            servers.append(berth)
            frames = capture_frames(f"http://127.0.0.1:{berth.port}")
            bare = start_bare(work, frames)
            servers.append(bare)
            peers = [] if missing else [start_peer(work, builder) for builder in PEERS]
            servers.extend(peers)
            loads = [
                (bare.name, bare, "bare"),
                ("berth (two requests)", berth, "berth"),
                ("berth (events in the POST)", berth, "berth-one-request"),
                *((peer.name, peer, "peer") for peer in peers),
            ]
            rates = [
                asyncio.run(throughput(name, server.port, server.process.pid, users, turns, kind))
                for name, server, kind in loads
            ]
            delays = [
                asyncio.run(latency(name, server.port, server.process.pid, users, rate, arrivals, kind))
                for name, server, kind in loads
            ]
        finally:
            for server in servers:
                server.stop()
    report(args, len(frames), rates, delays, missing)


def report(args: argparse.Namespace, frames: int, rates: list[Run], delays: list[Run], missing: str | None) -> None:
    """Print both tables, the ratios and the targets; exit 1 on any error."""
    print(f"machine: {os.cpu_count()} cores, {platform.platform()}; Python {platform.python_version()}")
    print(f"one uvicorn worker each, {frames} SSE frames per Berth turn, load generator: bench/_loadgen.py")
    print("a turn: one tool call (hello.greet / greet), its result, an answer streamed in 24-character chunks\n")
    header = ["", "turns", "turns/s", "first delta p50 ms", "first delta p99 ms", "server CPU ms/turn", "errors"]
    print(f"throughput: {args.conversations} users x {args.turns} turns back to back")
    print_table([header, *(run.row() for run in rates)])
    by_name = {run.name: run for run in rates}
    bare, two, one = (
        by_name["bare StreamingResponse"],
        by_name["berth (two requests)"],
        by_name["berth (events in the POST)"],
    )
    print(f"berth / bare streams per second: {two.per_second / bare.per_second:.2f} (bare does no turn)")
    peers = [run for run in rates if run.name.startswith("LangGraph")]
    if missing:
        print(f"peer arms skipped: {missing} (install the bench extra: pip install -e .[bench])")
    for peer in peers:
        print(
            f"berth / {peer.name} tool turns per second: {one.per_second / peer.per_second:.2f} "
            f"(events in the POST; two requests: {two.per_second / peer.per_second:.2f}) (target >= 5)"
        )
    print(
        f"server CPU per tool turn: berth {one.cpu_ms_per_turn:.2f} ms (events in the POST), "
        f"{two.cpu_ms_per_turn:.2f} ms (two requests) (target <= 2 ms)"
        + "".join(f"; {peer.name} {peer.cpu_ms_per_turn:.2f} ms" for peer in peers)
    )
    print(f"\nlatency: {args.arrivals} turns arriving at {args.rate:g}/s over {args.conversations} users")
    print_table([header, *(run.row() for run in delays)])
    berth_latency = next(run for run in delays if run.name == "berth (two requests)")
    print(f"berth p99 first delta at {args.rate:g} turns/s: {1000 * p99(berth_latency):.1f} ms (target <= 15 ms)")
    errors = sum(run.errors for run in (*rates, *delays))
    print(f"errors: {errors} (must be 0)")
    if errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
