"""Live events and cancels, sent by any API process to the worker that runs the turn (SPEC §4.1, §8).

Each turn has a control stream in Redis (``<prefix><turn_id>``). An API process appends a message and waits
for the reply on a list of its own (``BLPOP``); the worker running the turn reads the stream from its start,
handles each message, replies, and deletes the entry, so a worker that resumes the turn after another one
died handles exactly the messages nobody handled. A message sent while the turn still waits in the queue is
handled when a worker starts it (the sender stops waiting for the reply before that: :data:`REPLY_WAIT_S`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from berth.storage.redis_client import let_finish

__all__ = ["REPLY_WAIT_S", "ControlHandler", "TurnControl", "decode_attachments", "encode_attachments"]

log = logging.getLogger(__name__)

REPLY_WAIT_S = 5.0
"""How long a sender waits for the worker's reply (a turn still queued answers when it starts)."""

_TTL_S = 3600

ControlHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""Handles one control message in the worker; returns the reply."""


def encode_attachments(files: tuple[tuple[str, str, bytes], ...]) -> list[list[str]]:
    """``(name, mime, data)`` files as JSON-safe lists (data in base64)."""
    return [[name, mime, base64.b64encode(data).decode()] for name, mime, data in files]


def decode_attachments(raw: Any) -> tuple[tuple[str, str, bytes], ...]:
    """The inverse of :func:`encode_attachments`."""
    return tuple((str(name), str(mime), base64.b64decode(data)) for name, mime, data in raw or ())


class TurnControl:
    """The control streams of turns under ``prefix``."""

    def __init__(self, client: aioredis.Redis, *, prefix: str = "berth:control:") -> None:
        self._client = client
        self._prefix = prefix

    async def send(
        self, turn_id: str, message: dict[str, Any], *, wait_s: float = REPLY_WAIT_S
    ) -> dict[str, Any] | None:
        """Send ``message`` to the worker running ``turn_id``; return its reply, or None when none came in time."""
        reply_key = f"{self._prefix}reply:{secrets.token_hex(8)}"
        key = self._prefix + turn_id
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.xadd(key, {"m": json.dumps({**message, "reply_to": reply_key})})
            pipe.expire(key, _TTL_S)
            await pipe.execute()
        reply: Any = await self._client.blpop([reply_key], timeout=wait_s)
        if not reply:
            return None
        answer: dict[str, Any] = json.loads(reply[1])
        return answer

    async def forget(self, turn_id: str) -> None:
        """Delete the turn's control stream (follow-ups and steers not yet read: its conversation was deleted)."""
        await self._client.delete(self._prefix + turn_id)

    async def serve(self, turn_id: str, handle: ControlHandler) -> None:
        """Handle the turn's control messages (oldest first, those sent before too) until cancelled."""
        key = self._prefix + turn_id
        position = "0-0"
        while True:
            reply: Any = await let_finish(self._client.xread({key: position}, count=16, block=1000))
            for _, entries in reply or ():
                for entry_id, fields in entries:
                    position = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                    message = json.loads(fields[b"m"])
                    try:
                        answer = await handle(message)
                    except Exception as exc:  # the sender hears of it; the turn goes on
                        log.exception("control message %s of turn %s failed", message.get("kind"), turn_id)
                        answer = {"error": f"{type(exc).__name__}"}
                    async with self._client.pipeline(transaction=True) as pipe:
                        pipe.rpush(message["reply_to"], json.dumps(answer))
                        pipe.expire(message["reply_to"], 60)
                        pipe.xdel(key, position)
                        await pipe.execute()

    def serving(self, turn_id: str, handle: ControlHandler) -> contextlib.AbstractAsyncContextManager[None]:
        """Serve the turn's control messages while the ``async with`` body runs."""
        return _Serving(self, turn_id, handle)


class _Serving:
    def __init__(self, control: TurnControl, turn_id: str, handle: ControlHandler) -> None:
        self._control, self._turn_id, self._handle = control, turn_id, handle
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> None:
        self._task = asyncio.create_task(self._control.serve(self._turn_id, self._handle), name="turn control")

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
