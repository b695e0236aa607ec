"""Live events (SPEC §4.1): what a user sends to a turn while it runs — a follow-up, or a steer.

A :class:`LiveInbox` belongs to one running turn. The API delivers events to it; each becomes a
``user.followup`` / ``user.steer`` block (with ``user.attachment`` blocks for its files) that is
appended to the turn log at once, and the loop contributes the blocks that arrived since its last
decision before it renders the next round (ANNOUNCE lists them under ``[LIVE EVENTS]``). A steer may
also stop the model stream in progress (``react.steer: cancel_stream``): the loop drops that
response and decides again with the steer in view.

When the loop reaches its end it closes the inbox: a later delivery raises :class:`LiveInboxClosedError`
(the caller starts the next turn with it instead), and the events that arrived during the final
round, which the model never saw, are handed back (:meth:`LiveInbox.close`) so the host can start
the next turn with them.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, TypeAlias

from berth.config.models.assembly import ModelRef
from berth.runtime.attachments import (
    PREVIEW_CHARS,
    attachment_text,
    choose_media,
    delivery,
    document_of,
    model_copy_path,
    prepare,
)
from berth.runtime.blocks import Block, BlockType, format_utc
from berth.runtime.paths import RecordPath

__all__ = [
    "LiveEvent",
    "LiveInbox",
    "LiveInboxClosedError",
    "LiveKind",
    "ReceivedEvent",
    "announce_line",
    "attachment_block",
    "attachment_notices",
    "model_copies",
]

LiveKind: TypeAlias = Literal["followup", "steer"]

ANNOUNCE_PREVIEW_CHARS = 400
"""How much of a live event's message ANNOUNCE repeats (the block in the timeline holds all of it)."""


class LiveInboxClosedError(Exception):
    """The turn no longer takes live events: it has reached its end."""


@dataclass(frozen=True, slots=True)
class LiveEvent:
    """What the user sent: a follow-up (more to do) or a steer (a change of direction), with optional files."""

    kind: LiveKind
    message: str
    attachments: tuple[tuple[str, str, bytes], ...] = ()
    """``(name, mime, data)`` of each file, already checked at ingress."""


@dataclass(frozen=True, slots=True)
class ReceivedEvent:
    """A live event as the turn received it: its number in the turn, its blocks, and the event itself."""

    number: int
    event: LiveEvent
    blocks: tuple[Block, ...]

    @property
    def block(self) -> Block:
        """The ``user.followup`` / ``user.steer`` block (the first of :attr:`blocks`)."""
        return self.blocks[0]


Persist: TypeAlias = Callable[[Sequence[Block]], Awaitable[object]]


@dataclass
class LiveInbox:
    """The live events of one running turn (owned by the turn's host; the loop takes from it).

    :param turn_id: the turn the events belong to (their blocks are ``ar:<turn_id>.user.<kind>.<n>``).
    :param clock: the time an event is stamped with.
    """

    turn_id: str
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    cancel_streams: bool = True
    """Whether a steer stops the model stream in progress (the loop sets it from ``react.steer``)."""
    model: ModelRef | None = None
    """The turn's model (the loop sets it): images and PDFs it reads reach it as themselves."""
    _pending: list[ReceivedEvent] = field(default_factory=list)
    _received: list[ReceivedEvent] = field(default_factory=list)
    _numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _closed: bool = False
    _unseen: tuple[ReceivedEvent, ...] = ()
    _persist: Persist | None = None
    _stream_task: asyncio.Task[object] | None = None
    _steer_cancel: bool = False

    @property
    def closed(self) -> bool:
        """True once the turn has reached its end."""
        return self._closed

    @property
    def received(self) -> tuple[ReceivedEvent, ...]:
        """Every event the turn took so far (what ANNOUNCE lists), oldest first."""
        return tuple(self._received)

    def attach(self, persist: Persist) -> list[Block]:
        """Start persisting with ``persist`` (the turn's recorder); return the blocks that arrived before it.

        Events may arrive while a turn waits for a worker slot, before it records anything: they are
        persisted with the turn's first round of events (the caller writes the returned blocks).
        """
        self._persist = persist
        return [block for received in self._pending for block in received.blocks]

    async def deliver(self, event: LiveEvent) -> ReceivedEvent:
        """Receive ``event``: make its blocks, queue them for the loop's next decision, persist them.

        :raises LiveInboxClosedError: when the turn has reached its end (start the next turn instead).
        """
        await prepare(event.attachments, self.model)  # documents' text and downscaled images, made off the loop
        if self._closed:
            raise LiveInboxClosedError(self.turn_id)
        received = self._receive(event)
        self._pending.append(received)  # before any await: close() either sees it or the caller got the error
        if event.kind == "steer":
            self._steered()
        if self._persist is not None:
            await self._persist(received.blocks)
        return received

    def _receive(self, event: LiveEvent) -> ReceivedEvent:
        number = next(self._numbers)
        now = self.clock()
        record = f"user.{event.kind}.{number}"
        block_type = BlockType.USER_STEER if event.kind == "steer" else BlockType.USER_FOLLOWUP
        blocks = [
            Block(
                type=block_type,
                path=str(RecordPath(self.turn_id, record)),
                turn_id=self.turn_id,
                ts=now,
                author="user",
                text=event.message,
                meta={"live": number},
            )
        ]
        for name, mime, data in event.attachments:
            blocks.append(attachment_block(self.turn_id, name, mime, data, now, live=number, model=self.model))
        return ReceivedEvent(number, event, tuple(blocks))

    def take(self) -> tuple[ReceivedEvent, ...]:
        """The events that arrived since the last take (the loop's next decision contributes them)."""
        taken = tuple(self._pending)
        self._pending.clear()
        self._received.extend(taken)
        return taken

    def steer_waiting(self) -> bool:
        """True when a steer arrived that the loop has not taken yet (it should decide again first)."""
        return any(received.event.kind == "steer" for received in self._pending)

    def close(self) -> tuple[ReceivedEvent, ...]:
        """Take no more events; return those that arrived but were never taken (the model did not see them).

        Closing again changes nothing and returns nothing more: :attr:`unseen` keeps what the first close found.
        """
        if self._closed:
            return ()
        self._closed = True
        # A finished turn's inbox is kept with its event log for replay: it must not keep the recorder, which
        # holds the conversation's whole timeline, alive with it (a delivery past this point is refused).
        self._persist = None
        self._unseen = tuple(self._pending)
        self._pending.clear()
        return self._unseen

    @property
    def unseen(self) -> tuple[ReceivedEvent, ...]:
        """The events :meth:`close` found untaken (empty while the inbox is open)."""
        return self._unseen

    @contextmanager
    def streaming(self) -> Iterator[None]:
        """Mark the model stream in progress: a steer that arrives meanwhile cancels the current task."""
        self._stream_task = asyncio.current_task()
        try:
            yield
        finally:
            self._stream_task = None

    def _steered(self) -> None:
        task = self._stream_task
        if task is not None and self.cancel_streams and not self._steer_cancel:
            self._steer_cancel = True
            task.cancel()

    def claim_steer_cancel(self) -> bool:
        """True (once) when the cancellation being handled was a steer's; the caller un-cancels its task."""
        claimed, self._steer_cancel = self._steer_cancel, False
        return claimed


def attachment_block(
    turn_id: str,
    name: str,
    mime: str,
    data: bytes,
    ts: datetime,
    *,
    live: int | None = None,
    model: ModelRef | None = None,
) -> Block:
    """A ``user.attachment`` block: text files are shown in full; for ``model``, if it reads them, an image or a
    PDF as itself (``meta.media``: the renderer adds the bytes); documents otherwise by their extracted text (a
    bounded preview), images by a placeholder, others by type and size (:mod:`berth.runtime.attachments`).

    A live event's files (``live``: the event's number) lie under ``attachments/live-<n>/``, apart from the
    turn's own, so a name can repeat without one file replacing another.
    """
    folder = "attachments" if live is None else f"attachments/live-{live}"
    path = f"fi:{turn_id}.{folder}/{name}"
    media = choose_media(mime, data, model)
    meta: dict[str, int | str] = {"name": name, "size": len(data)}
    if live is not None:
        meta["live"] = live
    if media.kind is not None:
        meta["media"] = media.kind
        if media.fitted is not None:  # the prompt shows the downscaled copy, stored beside the file
            meta["media_path"] = model_copy_path(turn_id, media.fitted)
            meta["media_mime"] = media.fitted.mime
        if media.kind == "pdf":  # the prompt shows the document itself; memory search indexes its text
            document = document_of(data)
            if document is not None and document.text:
                meta["index_text"] = document.text[:PREVIEW_CHARS]
    sent = delivery(mime, data, media)
    if sent.sent != "as_is":  # what the user is told as the turn takes the file (attachment_notices)
        meta["sent"] = sent.sent
        meta["sent_note"] = sent.note
    return Block(
        type=BlockType.USER_ATTACHMENT,
        path=path,
        turn_id=turn_id,
        ts=ts,
        author="user",
        mime=mime,
        text=attachment_text(path, mime, data, media),
        meta=meta,
    )


def attachment_notices(blocks: Iterable[Block]) -> list[dict[str, str]]:
    """The ``notice`` events that tell the user which of ``blocks``' attachments the model does not get as they
    are: ``attachment_downscaled``, ``attachment_as_text``, ``attachment_not_sent``, each with the file's name,
    its ``fi:`` path and the reason."""
    notices = []
    for block in blocks:
        sent = block.meta.get("sent")
        if block.type == BlockType.USER_ATTACHMENT and sent:
            name = str(block.meta.get("name"))
            notices.append(
                {
                    "code": f"attachment_{sent}",
                    "message": f"{name} {block.meta.get('sent_note')}",
                    "name": name,
                    "path": block.path,
                }
            )
    return notices


def model_copies(
    blocks: Iterable[Block], files: Mapping[str, tuple[str, bytes]], model: ModelRef | None
) -> dict[str, bytes]:
    """The downscaled copies the attachment ``blocks`` show, by ``fi:`` path (``meta.media_path``), made again from
    their ``files`` (name → mime and bytes; the same bytes every time, from the cache :func:`prepare` filled)."""
    copies = {}
    for block in blocks:
        copy_path = block.meta.get("media_path")
        file = files.get(str(block.meta.get("name")))
        if block.type != BlockType.USER_ATTACHMENT or not copy_path or file is None:
            continue
        fitted = choose_media(file[0], file[1], model).fitted
        if fitted is not None:
            copies[str(copy_path)] = fitted.data
    return copies


def announce_line(received: ReceivedEvent, *, new: bool) -> str:
    """One ``[LIVE EVENTS]`` line of ANNOUNCE: kind, path, time, and the message (cut to a preview)."""
    block = received.block
    message = received.event.message
    if len(message) > ANNOUNCE_PREVIEW_CHARS:
        message = message[:ANNOUNCE_PREVIEW_CHARS] + f"… (all of it: {block.path})"
    files = f" + {len(received.blocks) - 1} file(s)" if len(received.blocks) > 1 else ""
    marker = "NEW " if new else ""
    return f"{marker}{received.event.kind} {block.path} at {format_utc(block.ts)}{files}: {message}"
