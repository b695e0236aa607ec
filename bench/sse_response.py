"""In process: the CPU one streamed response costs, Starlette's ``StreamingResponse`` against Berth's
``EventStreamResponse`` (``berth.api.sse``), 20 frames each, on the ASGI spec uvicorn declares (2.3).

The ``receive`` waits for a disconnect that never comes (the stream ends first), as on a live connection; ``send``
does nothing, so the figure is the response's own cost. Blocks of the two alternate; medians of the blocks' CPU time
per response (``time.thread_time``), min-max, and the ratio.

    .venv/bin/python bench/sse_response.py [--responses 3000] [--blocks 7] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Callable

from _machine import header
from starlette.responses import StreamingResponse
from starlette.types import Message

from berth.api.sse import EventStreamResponse

FRAMES = [b"id: t:1\nevent: channel.delta\ndata: {}\n\n" * 2] * 20
SCOPE = {"type": "http", "asgi": {"spec_version": "2.3"}}


async def frames() -> AsyncIterator[bytes]:
    """The frames of one turn."""
    for frame in FRAMES:
        yield frame


async def block(kind: Callable[..., StreamingResponse], count: int) -> float:
    """CPU µs per response over ``count`` responses of ``kind``."""
    never = asyncio.Event()

    async def receive() -> Message:
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        return None

    started = time.thread_time()
    for _ in range(count):
        await kind(frames(), media_type="text/event-stream")(SCOPE, receive, send)
    return (time.thread_time() - started) / count * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--responses", type=int, default=3000, help="responses per block")
    parser.add_argument("--blocks", type=int, default=7, help="blocks per kind")
    parser.add_argument("--quick", action="store_true", help="300 responses, 3 blocks: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.responses, args.blocks = 300, 3
    kinds: dict[str, Callable[..., StreamingResponse]] = {
        "starlette StreamingResponse": StreamingResponse,
        "berth EventStreamResponse": EventStreamResponse,
    }
    times: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(args.blocks):
        for name, kind in kinds.items():
            times[name].append(await block(kind, args.responses))
    base = statistics.median(times["starlette StreamingResponse"])
    print(f"{'':30} {'µs per response (median, min-max)':>36} {'ratio':>6}")
    for name, values in times.items():
        median = statistics.median(values)
        spread = f"{median:.1f} ({min(values):.1f}-{max(values):.1f})"
        print(f"{name:30} {spread:>36} {median / base:6.2f}")
    print(
        f"ratio berth / starlette CPU per response: {statistics.median(times['berth EventStreamResponse']) / base:.2f}"
    )


if __name__ == "__main__":
    print(header(), flush=True)
    asyncio.run(main())
