"""The response that streams a turn's frames (``berth.api.sse.EventStreamResponse``): every frame, in order; a
client's disconnect ends it as Starlette's ``StreamingResponse`` did, without leaving its task cancelled; any
other cancellation still cancels it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from starlette.types import Message

from berth.api.sse import EventStreamResponse

SCOPE = {"type": "http", "asgi": {"spec_version": "2.3"}}
"""What uvicorn declares (below 2.4: a server that does not raise on a closed connection)."""


class Client:
    """The ASGI side of one connection: what was sent, and a disconnect the test triggers."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.gone = asyncio.Event()
        self.got_a_frame = asyncio.Event()

    async def receive(self) -> Message:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if message.get("body"):
            self.got_a_frame.set()

    @property
    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


async def test_every_frame_is_sent_in_order_then_the_response_ends() -> None:
    async def frames() -> AsyncIterator[bytes]:
        for n in range(3):
            yield f"id: t:{n}\n\n".encode()

    client = Client()
    await EventStreamResponse(frames(), headers={"Cache-Control": "no-cache"})(SCOPE, client.receive, client.send)
    start = client.sent[0]
    assert (start["type"], start["status"]) == ("http.response.start", 200)
    assert (b"content-type", b"text/event-stream; charset=utf-8") in start["headers"]
    assert client.bodies == [b"id: t:0\n\n", b"id: t:1\n\n", b"id: t:2\n\n", b""]
    assert client.sent[-1]["more_body"] is False


async def test_a_disconnect_ends_the_stream_closes_its_frames_and_leaves_the_task_uncancelled() -> None:
    closed = asyncio.Event()

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield b"id: t:1\n\n"
            await asyncio.Event().wait()  # a turn that says nothing more for a while
            yield b"never"
        finally:
            closed.set()

    client = Client()

    async def serve() -> int:
        await EventStreamResponse(frames())(SCOPE, client.receive, client.send)
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    serving = asyncio.create_task(serve())
    await client.got_a_frame.wait()
    client.gone.set()
    assert await serving == 0, "the response's own cancel is taken back: the request's task goes on"
    assert closed.is_set()
    assert client.bodies == [b"id: t:1\n\n"]


async def test_a_cancellation_from_elsewhere_cancels_the_stream() -> None:
    async def frames() -> AsyncIterator[bytes]:
        yield b"id: t:1\n\n"
        await asyncio.Event().wait()
        yield b"never"

    client = Client()
    serving = asyncio.create_task(EventStreamResponse(frames())(SCOPE, client.receive, client.send))
    await client.got_a_frame.wait()
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await serving


async def test_a_disconnect_seen_as_the_stream_ends_leaves_no_cancel_behind() -> None:
    async def frames() -> AsyncIterator[bytes]:
        yield b"id: t:1\n\n"

    client = Client()
    client.gone.set()  # the disconnect is read only once the stream has ended (its listener runs after it)
    await EventStreamResponse(frames())(SCOPE, client.receive, client.send)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
