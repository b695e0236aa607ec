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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

import click
import httpx

from berth.cli.chat_view import HELP, ChatView, PlainView

if TYPE_CHECKING:
    from berth.runtime.live import LiveKind
    from berth.storage.scope import ConversationScope
    from berth.turns.services import HostServices

__all__ = [
    "ChatBackend",
    "ChatRefusedError",
    "HttpChat",
    "InProcessChat",
    "Lines",
    "LocalCommand",
    "TurnShown",
    "converse",
    "parse_line",
    "print_events",
    "refusal_text",
    "split_live_line",
]

STEER_PREFIX = "/steer "
Lines = AsyncIterator[str]


class ChatRefusedError(Exception):
    """The host refused to start a conversation (the message says why)."""


class ChatBackend(Protocol):
    """Where the chat's turns run."""

    async def new_conversation(self, bundle: str | None) -> str:
        """Start a new conversation (with ``bundle``, or the current one); return the bundle it talks to.

        :raises ChatRefusedError: the host refused it.
        """
        ...

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


@dataclass
class TurnShown:
    """What the chat keeps of a turn it showed: the next turn's events URL (when the turn started one) and the
    answer's follow-up suggestions (picked by number)."""

    next_turn: str | None = None
    followups: list[str] = field(default_factory=list)


async def print_events(lines: Lines, view: ChatView | None = None) -> TurnShown:
    """Show a turn's SSE lines: the answer as it streams, tool calls and their results, notices, live events,
    follow-ups, the title, failures."""
    view = view or PlainView()
    event = ""
    shown = TurnShown()
    answering = False
    async for line in lines:
        if line.startswith("event: "):
            event = line[7:]
            continue
        if not line.startswith("data: "):
            continue
        data = json.loads(line[6:])
        if event == "channel.delta" and data.get("marker") == "answer":
            answering = True
            view.answer_delta(data["text"])
        elif event == "tool.call":
            view.tool_call(str(data.get("call_id", "")), data["tool_id"])
        elif event == "tool.result":
            view.tool_result(
                str(data.get("call_id", "")), data["tool_id"], bool(data.get("ok")), data.get("summary", "")
            )
        elif event == "notice":  # as the web UI shows them: a quiet line (a queued turn says so here)
            if data.get("code") == "stream_cancelled" and answering:
                view.answer_end()
                answering = False
            view.note(f"! {data.get('message')}")
        elif event in ("user.followup", "user.steer"):
            view.note(f"+ {data['kind']} taken: {data['message']}", tone="live")
        elif event == "conversation.titled":
            view.note(f"title: {data['title']}")
        elif event == "turn.completed":
            view.answer_end()
            answering = False
            shown.followups = [str(text) for text in data.get("followups") or []]
            view.followups(shown.followups)
            shown.next_turn = (data.get("next_turn") or {}).get("events_url")
        elif event == "turn.failed":
            if answering:
                view.answer_end()
                answering = False
            view.failed(str(data.get("code")), str(data.get("message")))
            shown.next_turn = (data.get("next_turn") or {}).get("events_url")
    return shown


@dataclass(frozen=True)
class LocalCommand:
    """A line the chat handles itself instead of sending it: ``help``, ``new``, ``bundle`` (with ``argument``),
    ``quit``, or ``unknown``."""

    name: str
    argument: str = ""


def parse_line(text: str, followups: list[str]) -> LocalCommand | str:
    """What a line typed between turns means: a :class:`LocalCommand`, or the message to send (a follow-up
    suggestion's text for its number, ``/text`` for ``//text``)."""
    stripped = text.strip()
    if stripped.isdigit() and 1 <= int(stripped) <= len(followups):
        return followups[int(stripped) - 1]
    if stripped.startswith("//"):
        return stripped[1:]
    if not stripped.startswith("/"):
        return text
    name, _, argument = stripped[1:].partition(" ")
    name = {"exit": "quit", "q": "quit", "?": "help"}.get(name.lower(), name.lower())
    if name in ("help", "new", "quit") or (name == "bundle" and argument.strip()):
        return LocalCommand(name, argument.strip())
    return LocalCommand("unknown", stripped)


async def converse(
    backend: ChatBackend, lines: asyncio.Queue[str | None], *, live: bool = True, view: ChatView | None = None
) -> None:
    """Run the chat: each line starts a turn, goes to the running one, or is a command the chat handles itself
    (:func:`parse_line`); ``None`` in ``lines`` ends it.

    With ``live`` off, a line waits for the running turn to end and starts the next (scripted input).
    """
    view = view or PlainView()
    followups: list[str] = []
    view.prompt()
    text = await lines.get()
    while text is not None:
        parsed = parse_line(text, followups)
        if isinstance(parsed, LocalCommand):
            if parsed.name == "quit":
                return
            await _run_command(backend, parsed, view)
            view.prompt()
            text = await lines.get()
            continue
        if not live:
            click.secho(f"> {parsed}", fg="yellow")
        stream = await backend.start(parsed)
        ended = False
        while stream is not None:
            printing = asyncio.ensure_future(print_events(stream, view))
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
            shown = printing.result() if printing.done() else await printing
            followups = shown.followups
            if stream is None and shown.next_turn is not None:
                stream = await backend.follow(shown.next_turn)
        if ended:
            return
        view.prompt()
        text = await lines.get()


async def _run_command(backend: ChatBackend, command: LocalCommand, view: ChatView) -> None:
    """Do what a local command says, and say what was done."""
    if command.name == "help":
        for line in HELP.splitlines():
            view.note(line, tone="ok")
    elif command.name in ("new", "bundle"):
        bundle = command.argument or None
        try:
            started = await backend.new_conversation(bundle)
        except ChatRefusedError as refused:
            view.note(f"cannot start a conversation: {refused}", tone="error")
            return
        view.note(f"new conversation with {started}", tone="ok")
    else:
        view.note(f"unknown command {command.argument!r}: /help lists them (//text sends /text)", tone="error")


class HttpChat:
    """A conversation on a running host, over its HTTP API."""

    def __init__(self, client: httpx.AsyncClient, prefix: str, bundle: str | None = None) -> None:
        self._client = client
        self._prefix = prefix
        self._bundle = bundle
        self._turns = ""
        self._turn_id: str | None = None
        self.conversation_id: str | None = None
        """The current conversation (after :meth:`new_conversation`)."""

    async def new_conversation(self, bundle: str | None) -> str:
        """POST a conversation (with ``bundle``, else the last one asked for, else the project's default)."""
        bundle = bundle or self._bundle
        created = await self._client.post(f"{self._prefix}/conversations", json={"bundle": bundle} if bundle else {})
        if created.status_code != 201:
            raise ChatRefusedError(refusal_text(created.status_code, created.content))
        body = created.json()
        self._bundle = body.get("bundle") or bundle
        self.conversation_id = str(body["id"])
        self._turns = f"{self._prefix}/conversations/{self.conversation_id}/turns"
        self._turn_id = None
        return str(self._bundle or "the default bundle")

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

    def __init__(self, services: HostServices, tenant: str, project: str) -> None:
        self._services = services
        self._tenant = tenant
        self._project = project
        self._scope: ConversationScope | None = None
        self._bundle_id = ""
        self._turn_id: str | None = None

    async def new_conversation(self, bundle: str | None) -> str:
        """Create a conversation with ``bundle`` (else the current one, else the project's default)."""
        from berth.storage.meta import ConversationMeta
        from berth.storage.scope import ConversationScope
        from berth.turns.running import new_id

        visible = self._services.config.descriptors.scope_bundles(self._tenant, self._project)
        chosen = (
            bundle or self._bundle_id or visible.default_bundle or (visible.bundles[0] if visible.bundles else None)
        )
        if chosen is None or chosen not in visible.bundles:
            offered = ", ".join(visible.bundles) or "none"
            raise ChatRefusedError(f"bundle {chosen!r} is not available in {self._tenant}/{self._project} ({offered})")
        now = datetime.now(UTC)
        scope = ConversationScope(
            tenant=self._tenant, project=self._project, user_id="local", conversation_id=new_id("c")
        )
        assert self._services.meta is not None
        await self._services.meta.create_conversation(ConversationMeta(scope, None, chosen, now, now))
        self._scope, self._bundle_id, self._turn_id = scope, chosen, None
        return chosen

    async def start(self, text: str) -> Lines | None:
        """Start a turn on the host."""
        from berth.turns.errors import ServiceError

        assert self._scope is not None
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

        assert self._turn_id is not None and self._scope is not None
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
