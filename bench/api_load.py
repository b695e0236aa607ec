"""Load on the HTTP API: concurrent conversations streaming turns from one uvicorn worker.

Berth (``berth run`` with the scripted model, embedded storage, auth none) against a bare FastAPI app that
streams the same SSE bytes as a plain ``StreamingResponse`` — each server in its own process on loopback,
the load generator in this one. The load generator is :mod:`_loadgen`: raw HTTP/1.1 on one keep-alive
connection per simulated user, opened before the clock starts (httpx cost more CPU per request than the
bare endpoint does, so with it the baseline measured the client; and 200 simultaneous connects put the
listen backlog, not the server, into the p99). Two measurements per arm:

* **throughput** (closed loop): every user runs ``--turns`` turns back to back; turns/s and the ratio;
* **latency** (open loop): turns arrive at a fixed rate (``--rate``, 50/s by default: a busy worker, well
  below saturation), the same for both arms, each taken by an idle user; time from arrival to the
  first answer delta, p50/p99, and what Berth adds to the bare endpoint's. (At saturation every turn
  waits behind all the others, so a closed loop measures the queue's length, not the platform.)

A Berth turn is two requests (``POST …/turns``, then ``GET`` its events); the bare arm is one ``GET``. The
throughput run also measures Berth with the events in the ``POST``'s response (``Accept: text/event-stream``,
one request per turn), to show how much of the gap the second request is.

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
ANSWER = (
    '<channel:thinking>quick</channel:thinking><channel:action>{"action": "complete"}</channel:action>'
    "<channel:answer>" + "Berth answers with a streamed reply of moderate length. " * 6 + "</channel:answer>"
    '<channel:followups>{"followups": ["more?"]}</channel:followups>'
)
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

    def row(self) -> list[str]:
        ordered = sorted(self.first_delta_s) or [float("nan")]
        p99 = percentile(ordered, 0.99)
        return [
            self.name,
            str(self.turns),
            f"{self.turns / self.elapsed_s:.1f}" if self.elapsed_s else "-",
            f"{statistics.median(ordered) * 1000:.1f}",
            f"{p99 * 1000:.1f}",
            str(self.errors),
        ]


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

    async def bare_turn(self, n: int) -> float | None:
        """Stream the recorded frames once; return when the first answer delta arrived."""
        return await first_answer_delta(self.connection, await self.connection.request("GET", "/stream"))


async def open_users(port: int, count: int, *, berth: bool) -> list[User]:
    """Connect ``count`` users (and create a conversation each on Berth), before anything is timed."""
    users = [User(port) for _ in range(count)]
    for user in users:
        await user.connection.open()
        if berth:
            headers = await user.connection.request("POST", "/v1/default/default/conversations", {})
            user.conversation = json.loads(await user.connection.body(headers))["id"]
    return users


async def throughput(
    name: str, port: int, conversations: int, turns: int, *, berth: bool, one_request: bool = False
) -> Run:
    """Closed loop: every user runs ``turns`` turns back to back (``one_request``: events in the POST's response)."""
    users = await open_users(port, conversations, berth=berth)
    run = Run(name)

    def turn(user: User, n: int) -> Awaitable[float | None]:
        if not berth:
            return user.bare_turn(n)
        return user.berth_streamed_turn(n) if one_request else user.berth_turn(n)

    async def user_loop(user: User) -> None:
        for n in range(turns):
            started = time.perf_counter()
            try:
                delay = await turn(user, n)
            except (HttpError, OSError, asyncio.IncompleteReadError, ValueError):
                run.errors += 1
                return
            if delay is None:
                run.errors += 1
                continue
            run.first_delta_s.append(delay - started)
            run.turns += 1

    started = time.perf_counter()
    await asyncio.gather(*(user_loop(user) for user in users))
    run.elapsed_s = time.perf_counter() - started
    for user in users:
        await user.connection.close()
    return run


async def latency(name: str, port: int, conversations: int, rate: float, arrivals: int, *, berth: bool) -> Run:
    """Open loop: ``arrivals`` turns arrive ``rate`` per second, each taken by an idle user."""
    users = await open_users(port, conversations, berth=berth)
    idle: asyncio.Queue[User] = asyncio.Queue()
    for user in users:
        idle.put_nowait(user)
    run = Run(name)

    async def one(n: int, arrived: float) -> None:
        user = await idle.get()  # waiting for an idle user counts: it is part of the latency
        try:
            delay = await (user.berth_turn(n) if berth else user.bare_turn(n))
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
    started = time.perf_counter()
    for n in range(arrivals):
        due = started + n / rate
        await asyncio.sleep(max(0.0, due - time.perf_counter()))  # pacing the arrivals, not a test wait
        tasks.append(asyncio.create_task(one(n, due)))
    await asyncio.gather(*tasks)
    run.elapsed_s = time.perf_counter() - started
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


def start_servers(work: Path) -> tuple[subprocess.Popen[bytes], int, subprocess.Popen[bytes], int, int]:
    """Start Berth and the bare app on free loopback ports; return both processes, ports and frames per turn."""
    script = work / "script.yaml"
    script.write_text(yaml.safe_dump({"chunk_size": 24, "repeat": True, "responses": [ANSWER]}))
    descriptors = work / "descriptors"
    descriptors.mkdir()
    (descriptors / "assembly.yaml").write_text(
        yaml.safe_dump({"platform": {"models": {"default": {"provider": "scripted", "model": str(script)}}}})
    )
    (descriptors / "bundles.yaml").write_text(
        yaml.safe_dump({"bundles": {"hello": {"source": {"entry_point": "hello"}}}})
    )
    # Admission stays on, with limits above the offered load: the run measures what checking them costs,
    # not what refusing costs.
    (descriptors / "gateway.yaml").write_text(yaml.safe_dump(GATEWAY))
    berth_port, bare_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")}
    berth_command = [str(Path(sys.executable).parent / "berth"), "run", "--descriptors", str(descriptors)]
    berth_command += ["--port", str(berth_port), "--var", str(work / "var")]
    berth = subprocess.Popen(berth_command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{berth_port}/readyz", berth)
    frames = capture_frames(f"http://127.0.0.1:{berth_port}")
    (work / "frames.txt").write_text("\x1e".join(frames))
    (work / "bare.py").write_text(BARE_APP)
    bare_command = [sys.executable, str(work / "bare.py"), str(work / "frames.txt"), str(bare_port)]
    bare = subprocess.Popen(bare_command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{bare_port}/docs", bare)
    return berth, berth_port, bare, bare_port, len(frames)


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
    with tempfile.TemporaryDirectory() as tmp:
        berth, berth_port, bare, bare_port, frames = start_servers(Path(tmp))
        try:
            bare_run = asyncio.run(
                throughput("bare StreamingResponse", bare_port, args.conversations, args.turns, berth=False)
            )
            berth_run = asyncio.run(
                throughput("berth (scripted model)", berth_port, args.conversations, args.turns, berth=True)
            )
            streamed_run = asyncio.run(
                throughput(
                    "berth, events in the POST",
                    berth_port,
                    args.conversations,
                    args.turns,
                    berth=True,
                    one_request=True,
                )
            )
            rate = args.rate
            bare_latency = asyncio.run(
                latency("bare StreamingResponse", bare_port, args.conversations, rate, args.arrivals, berth=False)
            )
            berth_latency = asyncio.run(
                latency("berth (scripted model)", berth_port, args.conversations, rate, args.arrivals, berth=True)
            )
        finally:
            for process in (bare, berth):
                process.terminate()
                process.wait(20)
    print(f"machine: {os.cpu_count()} cores, {platform.platform()}; Python {platform.python_version()}")
    print(f"one uvicorn worker each side, {frames} SSE frames per turn, load generator: bench/_loadgen.py\n")
    header = ["", "turns", "turns/s", "first delta p50 ms", "first delta p99 ms", "errors"]
    print(f"throughput: {args.conversations} users x {args.turns} turns back to back")
    print_table([header, bare_run.row(), berth_run.row(), streamed_run.row()])
    ratio = (berth_run.turns / berth_run.elapsed_s) / (bare_run.turns / bare_run.elapsed_s)
    print(f"berth / bare streams per second: {ratio:.2f} (target >= 0.60)")
    one_request = (streamed_run.turns / streamed_run.elapsed_s) / (bare_run.turns / bare_run.elapsed_s)
    print(f"the same with the events in the POST's response (one request per turn): {one_request:.2f}\n")
    print(f"latency: {args.arrivals} turns arriving at {rate:g}/s over {args.conversations} users")
    print_table([header, bare_latency.row(), berth_latency.row()])
    added_p50 = statistics.median(berth_latency.first_delta_s) - statistics.median(bare_latency.first_delta_s)
    added_p99 = p99(berth_latency) - p99(bare_latency)
    print(
        f"added first-delta latency: p50 {1000 * added_p50:.1f} ms, p99 {1000 * added_p99:.1f} ms (target p99 < 50 ms)"
    )
    errors = sum(run.errors for run in (bare_run, berth_run, streamed_run, bare_latency, berth_latency))
    print(f"errors: {errors} (must be 0)")
    if errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
