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
A connection the server closed while idle (uvicorn: after 5 s; Berth's set-up makes a request per user before the
clock) is reopened and the request sent again, not counted as an error (:mod:`_loadgen`). Two measurements per arm:

* **throughput** (closed loop): every user runs turns back to back for ``--duration`` seconds (10 by default; a
  window of a fixed number of turns was 2 s on Berth); turns/s — the arm's saturation — the server's own CPU time
  per turn (``/proc/<pid>/stat`` of the server process, before and after), and its ``fsync`` + ``fdatasync``
  calls per turn (:mod:`_fsyncs`: ``perf stat`` on the syscall tracepoints, over exactly the window);
* **latency** (open loop): turns arrive at 75% of *that arm's own* saturation (``--rate`` fixes one rate for all
  instead), for ``--duration`` seconds, each taken by an idle user; time from arrival to the first answer delta,
  p50/p99. (At saturation every turn waits behind all the others, so a closed loop measures the queue's length,
  not the platform; and a fixed rate is near one arm's saturation and idle for another.)

Berth and the ``create_agent`` peer run twice: with their data on the disk (the temporary folder) and on a tmpfs
(``/dev/shm``), so the ratio is read with and without the disk (the peer's checkpointer syncs several times a
turn; Berth's group commit at most about once). ``--profile`` samples the Berth server (events in the POST) during one
more throughput window with py-spy (``pip install py-spy``; without it the profile is skipped): samples of the
thread holding the GIL only (``--gil``: the Python code running, so a thread waiting on a lock, a queue or
another thread is not blamed; py-spy's own idle detection counted waiting pool threads as busy); the top
functions by own and by total samples.

A Berth turn is two requests (``POST …/turns``, then ``GET`` its events) or one (``Accept: text/event-stream``:
the events in the ``POST``'s response); the peer's is one ``POST`` streaming its events, so the like-for-like
ratio is Berth's one-request arm against it. Targets: Berth ≥ 5x ``create_agent``'s tool turns/s on the disk and
≥ 4x on tmpfs, server CPU per tool turn ≤ 3x the bare stream's, p99 first delta at 75% of saturation ≤ the
peer's, 0 errors.

    .venv/bin/python bench/api_load.py --conversations 200 --duration 10 [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml
from _fsyncs import FsyncCounter
from _loadgen import Connection, HttpError, first_answer_delta
from _machine import header
from _servers import free_port, launch, stop

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
TMPFS = Path("/dev/shm")
"""Where the tmpfs arms keep their data (Berth's ``--var``, the peer's SQLite file)."""
SATURATION_SHARE = 0.75
"""The latency run's arrival rate, as a share of the arm's own closed-loop throughput."""
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


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    """Wait until ``url`` answers below 500 (``bench/scale.py``'s servers; this script's go through ``launch``)."""
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
    fsyncs: int | None = None
    """``fsync`` + ``fdatasync`` calls by the server over the window (None: not counted)."""
    reconnects: int = 0
    """Requests sent again on a fresh connection after the server closed an idle one (not errors)."""
    rate: float = float("nan")
    """The latency run's arrival rate (turns/s)."""

    @property
    def per_second(self) -> float:
        """Turns per second."""
        return self.turns / self.elapsed_s if self.elapsed_s else float("nan")

    @property
    def cpu_ms_per_turn(self) -> float:
        """The server process's CPU time per turn, in ms."""
        return 1000 * self.server_cpu_s / self.turns if self.turns else float("nan")

    @property
    def fsyncs_per_turn(self) -> str:
        """``fsync`` + ``fdatasync`` calls per turn, or ``n/a``."""
        return "n/a" if self.fsyncs is None or not self.turns else f"{self.fsyncs / self.turns:.2f}"

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
            self.fsyncs_per_turn,
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


async def throughput(
    name: str, port: int, pid: int, conversations: int, turns: int, kind: Kind, *, duration_s: float | None = None
) -> Run:
    """Closed loop: every user runs ``turns`` turns back to back, or turns until ``duration_s`` has passed; the
    server's CPU time and its ``fsync`` calls are read around it."""
    users = await open_users(port, conversations, kind)
    run = Run(name)
    deadline = float("inf")

    async def user_loop(user: User) -> None:
        n = 0
        while (n < turns) if duration_s is None else (time.perf_counter() < deadline):
            n += 1
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

    fsyncs = FsyncCounter(pid)
    fsyncs.start()
    cpu_before = cpu_seconds(pid)
    started = time.perf_counter()
    if duration_s is not None:
        deadline = started + duration_s
    await asyncio.gather(*(user_loop(user) for user in users))
    run.elapsed_s = time.perf_counter() - started
    run.server_cpu_s = cpu_seconds(pid) - cpu_before
    run.fsyncs = fsyncs.stop()
    await close_users(users, run)
    return run


async def close_users(users: list[User], run: Run) -> None:
    """Close every user's connection; add up the reconnects they needed."""
    for user in users:
        run.reconnects += user.connection.reconnects
        await user.connection.close()


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
    fsyncs = FsyncCounter(pid)
    fsyncs.start()
    cpu_before = cpu_seconds(pid)
    started = time.perf_counter()
    for n in range(arrivals):
        due = started + n / rate
        await asyncio.sleep(max(0.0, due - time.perf_counter()))  # pacing the arrivals, not a test wait
        tasks.append(asyncio.create_task(one(n, due)))
    await asyncio.gather(*tasks)
    run.elapsed_s = time.perf_counter() - started
    run.server_cpu_s = cpu_seconds(pid) - cpu_before
    run.fsyncs = fsyncs.stop()
    run.rate = rate
    await close_users(users, run)
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
        """End it and its process group."""
        stop(self.process)


def write_descriptors(work: Path) -> Path:
    """``work/descriptors`` for the Berth arms: the scripted tool turn (``work/script.yaml``), the hello bundle,
    titles off (the peers title nothing, and a title is one more model call per new conversation), admission on
    with limits above the offered load (the run measures what checking them costs, not what refusing costs)."""
    script = work / "script.yaml"
    script.write_text(yaml.safe_dump({"chunk_size": 24, "by_round": True, "responses": [TOOL_CALL, ANSWER]}))
    descriptors = work / "descriptors"
    descriptors.mkdir()
    model = {"provider": "scripted", "model": str(script)}
    settings = {"models": {"default": model}, "react": {"conversation_titles": False}}
    (descriptors / "assembly.yaml").write_text(yaml.safe_dump({"platform": settings}))
    (descriptors / "bundles.yaml").write_text(
        yaml.safe_dump({"bundles": {"hello": {"source": {"entry_point": "hello"}}}})
    )
    (descriptors / "gateway.yaml").write_text(yaml.safe_dump(GATEWAY))
    return descriptors


def start_berth(
    work: Path, var: Path, name: str = "berth", *, wrap: Sequence[str] = (), timeout_s: float = 60
) -> Server:
    """``berth run`` on a free port with the scripted tool-turn model and the hello bundle, its data in ``var``
    (run under ``wrap``, e.g. valgrind, when given: ``bench/http_instructions.py``)."""
    descriptors = work / "descriptors"
    if not descriptors.exists():
        write_descriptors(work)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")}
    command = [*wrap, str(Path(sys.executable).parent / "berth"), "run", "--descriptors", str(descriptors)]
    command += ["--port", str(port), "--var", str(var)]
    process = launch(command, f"http://127.0.0.1:{port}/readyz", env=env, timeout_s=timeout_s)
    return Server(name, "berth", process, port)


def start_bare(work: Path, frames: list[str], *, wrap: Sequence[str] = (), timeout_s: float = 60) -> Server:
    """The bare ``StreamingResponse`` replaying ``frames`` (run under ``wrap`` when given)."""
    (work / "frames.txt").write_text("\x1e".join(frames))
    (work / "bare.py").write_text(BARE_APP)
    port = free_port()
    command = [*wrap, sys.executable, str(work / "bare.py"), str(work / "frames.txt"), str(port)]
    process = launch(command, f"http://127.0.0.1:{port}/docs", timeout_s=timeout_s)
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


def start_peer(
    data: Path, builder: str, suffix: str = "", *, wrap: Sequence[str] = (), timeout_s: float = 60
) -> Server:
    """The LangGraph peer (``bench/_langgraph_peer.py``) with ``builder``, its SQLite file in ``data``, warmed
    (run under ``wrap`` when given)."""
    port = free_port()
    database = str(data / f"{builder}.sqlite")
    command = [*wrap, sys.executable, str(ROOT / "bench" / "_langgraph_peer.py"), str(port), database, builder]
    process = launch(command, f"http://127.0.0.1:{port}/ready", timeout_s=timeout_s)
    server = Server(f"LangGraph {builder} + AsyncSqliteSaver{suffix}", "peer", process, port)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            warm = client.post("/threads/warm-up/turns", json={"message": "hello"})
    except BaseException:
        server.stop()
        raise
    if "channel.delta" not in warm.text:
        server.stop()
        raise SystemExit(f"the {builder} peer did not stream an answer: {warm.text[:300]}")
    return server


ONE_REQUEST = "berth (events in the POST)"
ONE_REQUEST_TMPFS = "berth (events in the POST) on tmpfs"
PEER_TMPFS_SUFFIX = " on tmpfs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=200, help="simulated users (connections)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of each throughput and latency window")
    parser.add_argument(
        "--rate", type=float, default=None, help="one arrival rate (turns/s) for every arm, instead of 75%% of its own"
    )
    parser.add_argument("--profile", action="store_true", help="sample the Berth server with py-spy (one more window)")
    parser.add_argument("--quick", action="store_true", help="10 users, 1 s windows: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.conversations, args.duration = 10, 1.0
    missing = peer_missing()
    tmpfs_missing = None if TMPFS.is_dir() and os.access(TMPFS, os.W_OK) else f"{TMPFS} is not a writable folder"
    profile_text = ""
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory(dir=None if tmpfs_missing else TMPFS) as shm:
        work, memory = Path(tmp), Path(shm)
        servers: list[Server] = []
        try:
            berth = start_berth(work, work / "var")
            servers.append(berth)
            frames = capture_frames(f"http://127.0.0.1:{berth.port}")
            bare = start_bare(work, frames)
            servers.append(bare)
            loads: list[tuple[str, Server, Kind]] = [
                (bare.name, bare, "bare"),
                ("berth (two requests)", berth, "berth"),
                (ONE_REQUEST, berth, "berth-one-request"),
            ]
            if not tmpfs_missing:
                berth_tmpfs = start_berth(work, memory / "var", "berth on tmpfs")
                servers.append(berth_tmpfs)
                loads.append((ONE_REQUEST_TMPFS, berth_tmpfs, "berth-one-request"))
            if not missing:
                for builder in PEERS:
                    peer = start_peer(work, builder)
                    servers.append(peer)
                    loads.append((peer.name, peer, "peer"))
                    if builder == "create_agent" and not tmpfs_missing:
                        peer = start_peer(memory, builder, PEER_TMPFS_SUFFIX)
                        servers.append(peer)
                        loads.append((peer.name, peer, "peer"))
            users, window = args.conversations, args.duration
            rates = [
                asyncio.run(throughput(name, server.port, server.process.pid, users, 0, kind, duration_s=window))
                for name, server, kind in loads
            ]
            delays = [
                asyncio.run(
                    latency(
                        name,
                        server.port,
                        server.process.pid,
                        users,
                        args.rate or SATURATION_SHARE * saturation.per_second,
                        max(1, round(window * (args.rate or SATURATION_SHARE * saturation.per_second))),
                        kind,
                    )
                )
                for (name, server, kind), saturation in zip(loads, rates, strict=True)
            ]
            if args.profile:
                profile_text = profile(berth, users, window)
        finally:  # a server that did not start was killed by ``launch`` (``ServerDidNotStart`` names it)
            for server in servers:
                server.stop()
    report(args, len(frames), rates, delays, missing, tmpfs_missing)
    if profile_text:
        print(profile_text)


def py_spy() -> str | None:
    """The py-spy executable (on ``PATH`` or beside this interpreter), if installed."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def profile(berth: Server, users: int, window: float, top: int = 25) -> str:
    """Sample the Berth server with py-spy during one more throughput window (events in the POST); the top
    functions by own samples and by total samples (``--gil``: only the thread holding the GIL is sampled)."""
    executable = py_spy()
    if executable is None:
        return "\nprofile: skipped: py-spy not found (pip install py-spy)"
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "profile.txt"
        command = [executable, "record", "--pid", str(berth.process.pid), "--format", "raw", "--output", str(raw)]
        command += ["--rate", "250", "--gil", "--function"]  # the function, not its line
        sampler = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        run = asyncio.run(
            throughput(ONE_REQUEST, berth.port, berth.process.pid, users, 0, "berth-one-request", duration_s=window)
        )
        sampler.send_signal(signal.SIGINT)
        _, errors = sampler.communicate(timeout=60)
        if not raw.exists():
            return f"\nprofile: py-spy wrote nothing: {errors.strip()[-300:]}"
        own: Counter[str] = Counter()
        total: Counter[str] = Counter()
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = [frame for frame in stack.split(";") if not frame.startswith(("process ", "thread "))]
            if not frames:
                continue
            own[frames[-1]] += int(count)
            for frame in set(frames):
                total[frame] += int(count)
    samples = sum(own.values()) or 1
    lines = [
        f"\nprofile (py-spy, samples of the GIL holder at 250/s) of {run.turns} turns in {run.elapsed_s:.1f} s, "
        f"{samples} samples; top {top} by own samples:"
    ]
    lines += [f"{100 * count / samples:6.1f}%  {frame}" for frame, count in own.most_common(top)]
    lines.append(f"top {top} by total samples (the function and what it calls):")
    lines += [f"{100 * count / samples:6.1f}%  {frame}" for frame, count in total.most_common(top)]
    return "\n".join(lines)


def ratio(a: Run | None, b: Run | None) -> str:
    """``a``'s turns/s over ``b``'s, or ``n/a``."""
    return "n/a" if a is None or b is None else f"{a.per_second / b.per_second:.2f}"


def report(
    args: argparse.Namespace,
    frames: int,
    rates: list[Run],
    delays: list[Run],
    missing: str | None,
    tmpfs_missing: str | None,
) -> None:
    """Print both tables, the ratios and the targets; exit 1 on any error."""
    print(f"one uvicorn worker each, {frames} SSE frames per Berth turn, load generator: bench/_loadgen.py")
    print("a turn: one tool call (hello.greet / greet), its result, an answer streamed in 24-character chunks")
    print("fsyncs/turn: fsync + fdatasync calls by the server per turn (perf stat on the syscall tracepoints)\n")
    columns = ["", "turns", "turns/s", "first delta p50 ms", "first delta p99 ms", "server CPU ms/turn"]
    columns += ["fsyncs/turn", "errors"]
    print(f"throughput (saturation): {args.conversations} users, turns back to back for {args.duration:g} s")
    print_table([columns, *(run.row() for run in rates)])
    by_name = {run.name: run for run in rates}
    bare, two, one = by_name["bare StreamingResponse"], by_name["berth (two requests)"], by_name[ONE_REQUEST]
    print(f"berth / bare streams per second: {two.per_second / bare.per_second:.2f} (bare does no turn)")
    if tmpfs_missing:
        print(f"tmpfs arms skipped: {tmpfs_missing}")
    peers = [run for run in rates if run.name.startswith("LangGraph")]
    if missing:
        print(f"peer arms skipped: {missing} (install the bench extra: pip install -e .[bench])")
    for peer in peers:
        if peer.name.endswith(PEER_TMPFS_SUFFIX):
            print(f"berth / {peer.name} tool turns per second: {ratio(by_name.get(ONE_REQUEST_TMPFS), peer)} "
                  "(both on tmpfs; target >= 4)")  # fmt: skip
            continue
        print(
            f"berth / {peer.name} tool turns per second: {one.per_second / peer.per_second:.2f} "
            f"(events in the POST; two requests: {two.per_second / peer.per_second:.2f}) (target >= 5)"
        )
    print(
        f"server CPU per tool turn: berth {one.cpu_ms_per_turn:.2f} ms (events in the POST), "
        f"{two.cpu_ms_per_turn:.2f} ms (two requests); bare stream {bare.cpu_ms_per_turn:.2f} ms; "
        f"berth / bare {one.cpu_ms_per_turn / bare.cpu_ms_per_turn:.1f}x (target <= 3x)"
        + "".join(f"; {peer.name} {peer.cpu_ms_per_turn:.2f} ms" for peer in peers)
    )
    share = f"{args.rate:g} turns/s" if args.rate else f"{100 * SATURATION_SHARE:g}% of each arm's saturation"
    print(f"\nlatency: turns arriving at {share} for {args.duration:g} s over {args.conversations} users")
    print_table([["", "rate/s", *columns[1:]], *([run.name, f"{run.rate:.1f}", *run.row()[1:]] for run in delays)])
    latency_of = {run.name: run for run in delays}
    for berth_arm, peer_arm in (
        (ONE_REQUEST, "LangGraph create_agent + AsyncSqliteSaver"),
        (ONE_REQUEST_TMPFS, "LangGraph create_agent + AsyncSqliteSaver" + PEER_TMPFS_SUFFIX),
    ):
        if berth_arm in latency_of and peer_arm in latency_of:
            berth_p99, peer_p99 = 1000 * p99(latency_of[berth_arm]), 1000 * p99(latency_of[peer_arm])
            print(f"p99 first delta at {share}: {berth_arm} {berth_p99:.1f} ms, {peer_arm} {peer_p99:.1f} ms "
                  "(target: berth <= peer)")  # fmt: skip
    errors = sum(run.errors for run in (*rates, *delays))
    reconnects = sum(run.reconnects for run in (*rates, *delays))
    print(f"errors: {errors} (must be 0); idle connections reopened: {reconnects} (not errors)")
    if errors:
        raise SystemExit(1)


if __name__ == "__main__":
    print(header(), flush=True)
    main()
