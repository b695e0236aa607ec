"""Load on the HTTP API: concurrent conversations streaming turns from one uvicorn worker.

Berth (``berth run`` with the scripted model, embedded storage, auth none) against a bare FastAPI app that
streams the same SSE bytes as a plain ``StreamingResponse`` — both in their own process on loopback, the
load generator in this one, one httpx client per conversation task. Prints turns/s, time to the first
answer delta (p50/p99), errors, and the ratios.

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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
ANSWER = (
    '<channel:thinking>quick</channel:thinking><channel:action>{"action": "complete"}</channel:action>'
    "<channel:answer>" + "Berth answers with a streamed reply of moderate length. " * 6 + "</channel:answer>"
    '<channel:followups>{"followups": ["more?"]}</channel:followups>'
)
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


async def first_answer_delta(response: httpx.Response) -> float | None:
    """Absolute time (perf_counter) of the first answer delta; reads the rest of the stream."""
    first: float | None = None
    event = ""
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: ") and event == "channel.delta" and first is None:
            if json.loads(line[6:]).get("marker") == "answer":
                first = time.perf_counter()
        elif event == "turn.failed" and line.startswith("data: "):
            raise RuntimeError(line)
    return first


async def berth_task(base: str, turns: int, run: Run) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        try:
            created = await client.post("/v1/default/default/conversations", json={})
            conversation = created.json()["id"]
            for n in range(turns):
                started = time.perf_counter()
                turn = await client.post(
                    f"/v1/default/default/conversations/{conversation}/turns", json={"message": f"question {n}"}
                )
                url = turn.json()["events_url"]
                async with client.stream("GET", url) as response:
                    delay = await first_answer_delta(response)
                if delay is None:
                    run.errors += 1
                    continue
                run.first_delta_s.append(delay - started)
                run.turns += 1
        except Exception:
            run.errors += 1


async def bare_task(base: str, turns: int, run: Run) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        for _ in range(turns):
            started = time.perf_counter()
            try:
                async with client.stream("GET", "/stream") as response:
                    delay = await first_answer_delta(response)
            except Exception:
                run.errors += 1
                continue
            if delay is None:
                run.errors += 1
                continue
            run.first_delta_s.append(delay - started)
            run.turns += 1


async def load(
    name: str, task: Callable[[str, int, Run], Awaitable[None]], base: str, conversations: int, turns: int
) -> Run:
    run = Run(name)
    started = time.perf_counter()
    await asyncio.gather(*(task(base, turns, run) for _ in range(conversations)))
    run.elapsed_s = time.perf_counter() - started
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--turns", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
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
        berth_port, bare_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")}
        berth = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "berth"),
                "run",
                "--descriptors",
                str(descriptors),
                "--port",
                str(berth_port),
                "--var",
                str(work / "var"),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{berth_port}"
            wait_ready(base + "/readyz", berth)
            frames = capture_frames(base)
            (work / "frames.txt").write_text("\x1e".join(frames))
            (work / "bare.py").write_text(BARE_APP)
            bare = subprocess.Popen(
                [sys.executable, str(work / "bare.py"), str(work / "frames.txt"), str(bare_port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                bare_base = f"http://127.0.0.1:{bare_port}"
                wait_ready(bare_base + "/docs", bare)
                bare_run = asyncio.run(
                    load("bare StreamingResponse", bare_task, bare_base, args.conversations, args.turns)
                )
                berth_run = asyncio.run(
                    load("berth (scripted model)", berth_task, base, args.conversations, args.turns)
                )
            finally:
                bare.terminate()
                bare.wait(10)
        finally:
            berth.terminate()
            berth.wait(20)
    print(f"machine: {os.cpu_count()} cores, {platform.platform()}; Python {platform.python_version()}")
    print(
        f"{args.conversations} concurrent conversations x {args.turns} turns, one uvicorn worker each side, "
        f"{len(frames)} SSE frames per turn\n"
    )
    header = ["", "turns", "turns/s", "first delta p50 ms", "first delta p99 ms", "errors"]
    rows = [header, bare_run.row(), berth_run.row()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print(
            "  ".join(
                cell.rjust(width) if i else cell.ljust(width)
                for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            )
        )
    base_p50 = statistics.median(bare_run.first_delta_s)
    berth_p50 = statistics.median(berth_run.first_delta_s)
    ordered_bare, ordered_berth = sorted(bare_run.first_delta_s), sorted(berth_run.first_delta_s)
    ratio = (berth_run.turns / berth_run.elapsed_s) / (bare_run.turns / bare_run.elapsed_s)
    print(f"\nberth / bare streams per second: {ratio:.2f} (target >= 0.60)")
    added_p99 = percentile(ordered_berth, 0.99) - percentile(ordered_bare, 0.99)
    print(
        f"added first-delta latency: p50 {1000 * (berth_p50 - base_p50):.1f} ms, p99 {1000 * added_p99:.1f} ms "
        "(target p99 < 50 ms)"
    )
    print("berth's time includes creating the turn (POST) and the model's scripted stream; bare only streams")


if __name__ == "__main__":
    main()
