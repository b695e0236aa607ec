"""The terminal chat's conversation: turns, and the follow-ups and steers typed while an answer streams.

A line typed while a turn runs goes to that turn as a live event (SPEC §4.1): a follow-up, or a steer
when it starts with ``/steer``. When the event (or one the turn saw too late) starts the next turn, the
chat follows that turn's stream too. The same loop drives a remote host (:class:`HttpChat`) and a host
in this process (:class:`InProcessChat`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

import click
import httpx

if TYPE_CHECKING:
    from berth.runtime.live import LiveKind
    from berth.storage.scope import ConversationScope
    from berth.turns.services import HostServices

__all__ = [
    "ChatBackend",
    "HttpChat",
    "InProcessChat",
    "Lines",
    "converse",
    "print_events",
    "refusal_text",
    "split_live_line",
]

STEER_PREFIX = "/steer "
Lines = AsyncIterator[str]


class ChatBackend(Protocol):
    """Where the chat's turns run."""

    async def start(self, text: str) -> Lines | None:
        """Start a turn; return its SSE lines, or None when the host refused it (the refusal is printed)."""
        ...

    async def send(self, kind: LiveKind, text: str) -> Lines | None:
        """Send a live event to the current turn; return the SSE lines of the turn it started, if it started one."""
        ...

    async def follow(self, events_url: str) -> Lines:
        """The SSE lines of another turn (one that live events started)."""
        ...


def split_live_line(text: str) -> tuple[LiveKind, str]:
    """A line typed during a turn: ``/steer …`` is a steer, anything else a follow-up."""
    if text.startswith(STEER_PREFIX) and text[len(STEER_PREFIX) :].strip():
        return "steer", text[len(STEER_PREFIX) :].strip()
    return "followup", text


def turn_of(events_url: str) -> str:
    """The turn id in a turn's events URL (``…/turns/<turn_id>/events``)."""
    return events_url.rstrip("/").split("/")[-2]


def refusal_text(status: int, body: bytes) -> str:
    """What the host's JSON error says (``message (code)``), or the raw status."""
    try:
        error = json.loads(body)["error"]
        return f"{error['message']} ({error['code']})"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {status}"


async def print_events(lines: Lines) -> str | None:
    """Print a turn's SSE lines: the answer as it streams, tool calls, notices, live events, follow-ups, the
    title, failures. Return the events URL of the next turn when the ended turn started one."""
    event = ""
    next_turn: str | None = None
    async for line in lines:
        if line.startswith("event: "):
            event = line[7:]
            continue
        if not line.startswith("data: "):
            continue
        data = json.loads(line[6:])
        if event == "channel.delta" and data.get("marker") == "answer":
            click.echo(data["text"], nl=False)
        elif event == "tool.call":
            click.secho(f"  · {data['tool_id']}", fg="cyan", err=True)
        elif event == "notice":  # as the web UI shows them: a quiet line (a queued turn says so here)
            if data.get("code") == "stream_cancelled":
                click.echo()
            click.secho(f"  ! {data.get('message')}", dim=True, err=True)
        elif event in ("user.followup", "user.steer"):
            click.secho(f"  + {data['kind']} taken: {data['message']}", fg="yellow", err=True)
        elif event == "conversation.titled":
            click.secho(f"  title: {data['title']}", dim=True, err=True)
        elif event == "turn.completed":
            click.echo()
            for followup in data.get("followups") or []:
                click.secho(f"  → {followup}", fg="green")
            next_turn = (data.get("next_turn") or {}).get("events_url")
        elif event == "turn.failed":
            click.secho(f"\nturn failed [{data.get('code')}]: {data.get('message')}", fg="red", err=True)
            next_turn = (data.get("next_turn") or {}).get("events_url")
    return next_turn


async def converse(backend: ChatBackend, lines: asyncio.Queue[str | None], *, live: bool = True) -> None:
    """Run the chat: each line starts a turn, or goes to the running one; ``None`` in ``lines`` ends it.

    With ``live`` off, a line waits for the running turn to end and starts the next (scripted input).
    """
    text = await lines.get()
    while text is not None:
        if not live:
            click.secho(f"> {text}", fg="yellow")
        stream = await backend.start(text)
        ended = False
        while stream is not None:
            printing = asyncio.ensure_future(print_events(stream))
            stream = None
            while live and not printing.done():
                typed = asyncio.ensure_future(lines.get())
                await asyncio.wait({printing, typed}, return_when=asyncio.FIRST_COMPLETED)
                if not typed.done():
                    typed.cancel()
                    break
                line = typed.result()
                if line is None:
                    ended = True
                    await printing
                    break
                kind, message = split_live_line(line)
                started = await backend.send(kind, message)
                if started is not None:  # the turn had ended: follow the one the line started
                    await printing
                    stream = started
                    break
            next_url = printing.result() if printing.done() else await printing
            if stream is None and next_url is not None:
                stream = await backend.follow(next_url)
        text = None if ended else await lines.get()


class HttpChat:
    """A conversation on a running host, over its HTTP API."""

    def __init__(self, client: httpx.AsyncClient, prefix: str, conversation_id: str) -> None:
        self._client = client
        self._turns = f"{prefix}/conversations/{conversation_id}/turns"
        self._turn_id: str | None = None

    async def start(self, text: str) -> Lines | None:
        """Start a turn with one request that streams its events."""
        request = self._client.build_request(
            "POST", self._turns, json={"message": text}, headers={"Accept": "text/event-stream"}, timeout=None
        )
        response = await self._client.send(request, stream=True)
        if response.status_code != 200:
            click.secho(f"refused: {refusal_text(response.status_code, await response.aread())}", fg="red", err=True)
            await response.aclose()
            return None
        self._turn_id = turn_of(response.headers["content-location"])
        return self._lines(response)

    async def send(self, kind: LiveKind, text: str) -> Lines | None:
        """POST the event to the current turn's events route."""
        sent = await self._client.post(f"{self._turns}/{self._turn_id}/events", json={"kind": kind, "message": text})
        if sent.status_code != 202:
            click.secho(f"refused: {refusal_text(sent.status_code, sent.content)}", fg="red", err=True)
            return None
        accepted = sent.json()
        if not accepted["started_turn"]:
            return None
        return await self.follow(accepted["events_url"])

    async def follow(self, events_url: str) -> Lines:
        """GET the turn's event stream."""
        self._turn_id = turn_of(events_url)
        response = await self._client.send(self._client.build_request("GET", events_url, timeout=None), stream=True)
        return self._lines(response)

    @staticmethod
    async def _lines(response: httpx.Response) -> Lines:
        try:
            async for line in response.aiter_lines():
                yield line
        finally:
            await response.aclose()


class InProcessChat:
    """A conversation on a host in this process."""

    def __init__(self, services: HostServices, scope: ConversationScope, bundle_id: str) -> None:
        self._services = services
        self._scope = scope
        self._bundle_id = bundle_id
        self._turn_id: str | None = None

    async def start(self, text: str) -> Lines | None:
        """Start a turn on the host."""
        from berth.turns.errors import ServiceError

        try:
            running = await self._services.start_turn(self._scope, self._bundle_id, text)
        except ServiceError as refused:
            click.secho(f"refused: {refused.message} ({refused.code})", fg="red", err=True)
            return None
        return self._lines(running.turn_id)

    async def send(self, kind: LiveKind, text: str) -> Lines | None:
        """Deliver the event to the current turn (or start the next one)."""
        from berth.runtime.live import LiveEvent
        from berth.turns.errors import ServiceError

        assert self._turn_id is not None
        try:
            delivery = await self._services.deliver_live_event(
                self._scope, self._turn_id, LiveEvent(kind, text), bundle_id=self._bundle_id
            )
        except ServiceError as refused:
            click.secho(f"refused: {refused.message} ({refused.code})", fg="red", err=True)
            return None
        return self._lines(delivery.turn_id) if delivery.started_turn else None

    async def follow(self, events_url: str) -> Lines:
        """The events of a turn of this host, by its URL."""
        return self._lines(turn_of(events_url))

    async def _lines(self, turn_id: str) -> Lines:
        self._turn_id = turn_id
        running = self._services.turns[turn_id]
        async for frame in running.log.frames():
            for line in frame.decode().splitlines():
                yield line
        if running.task is not None:
            await asyncio.shield(running.task)  # its bookkeeping ends before the next turn or the exit
