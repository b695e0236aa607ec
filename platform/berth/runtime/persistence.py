"""Saving and restoring a conversation through a :class:`~berth.storage.conversations.ConversationStore`.

The runtime speaks blocks and sources pools; the store speaks JSON records. This module converts
between them and drives the write path of a turn (SPEC §4.1):

* :func:`restore_conversation` loads the timeline and the sources pool (one read each). A turn that
  never committed — the process stopped — comes back with every round its log kept (at least the user's
  message, stored when the API accepted the turn), followed by a ``turn.status`` block saying it was
  interrupted; the restored timeline is committed for that turn at once, so the interruption is recorded
  exactly once, and the model sees in the next turn what was asked and how far the answer got.
* :class:`TurnRecorder` begins a turn, appends each round to the turn log as the round completes
  (only that round's blocks and the source rows it changed), and commits the turn atomically.

Neither end costs what the whole timeline holds when it need not: a block is serialized once
(blocks are immutable) and a commit writes only the positions of the timeline whose block changed
(:class:`StoredTimeline`); a timeline committed by this process (:class:`CommittedTimeline`) is taken
as it is when the store still holds that version, and the store then does not even read it. Blocks
that are parsed are trusted to be what Berth stored (:data:`~berth.runtime.blocks.STORED_BLOCKS`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from berth.runtime.blocks import STORED_BLOCKS, Block, BlockType
from berth.runtime.sources import SourceRow, SourcesPool
from berth.runtime.timeline import Timeline
from berth.storage.conversations import (
    ArtifactWrite,
    BlockRecord,
    ConversationHandle,
    LoggedBlock,
    SourceRecord,
    StorageError,
    TimelineChange,
    TurnCommit,
    TurnLog,
    TurnState,
    TurnUsage,
)
from berth.storage.memory import MemoryEntry

__all__ = [
    "CommittedTimeline",
    "RestoredConversation",
    "StoredTimeline",
    "TurnRecorder",
    "block_from_record",
    "block_record",
    "changed_source_records",
    "interrupted_status_block",
    "restore_conversation",
]


def block_record(block: Block) -> BlockRecord:
    """Return the stored form of ``block``."""
    return BlockRecord(turn_id=block.turn_id, path=block.path, type=str(block.type), json=block.model_dump_json())


def block_from_record(record: BlockRecord) -> Block:
    """Return the block a :class:`~berth.storage.conversations.BlockRecord` holds."""
    return Block.model_validate_json(record.json, context=STORED_BLOCKS)


class StoredTimeline:
    """What the store holds of one timeline: the block at each position, and each block's stored form.

    A block is immutable, so it is serialized once while its turn runs (the turn log and the commit share
    the record); and a commit writes only the positions whose block is not the one stored there
    (:meth:`change`), so its cost is what the turn changed, not what the conversation holds. Identity is
    safe to compare: every entry holds its block, so no other object can take that identity meanwhile.
    """

    def __init__(self) -> None:
        self._records: dict[int, tuple[Block, BlockRecord]] = {}
        self._logged: dict[int, tuple[Block, str, int, int]] = {}
        self._stored: list[Block] = []
        self._sizes: list[int] = []  # the length of each stored block's JSON, by position
        self._json_chars = 0
        self._changing: tuple[Sequence[Block], dict[int, int]] | None = None  # the last change's sizes by position

    @property
    def json_chars(self) -> int:
        """The summed length of the stored blocks' JSON forms: what the timeline holds, counted as it is stored
        (kept up to date by :meth:`stored` from the positions a commit writes, never by walking the blocks)."""
        return self._json_chars

    @property
    def block_count(self) -> int:
        """How many blocks the stored timeline holds."""
        return len(self._sizes)

    def remember(self, block: Block, record: BlockRecord) -> None:
        """Record that ``record`` is the stored form of ``block`` (it was just parsed from it)."""
        self._records[id(block)] = (block, record)

    def record(self, block: Block) -> BlockRecord:
        """Return the stored form of ``block`` (see :func:`block_record`), made at most once per block."""
        entry = self._records.get(id(block))
        if entry is None or entry[0] is not block:
            entry = self._records[id(block)] = (block, block_record(block))
        return entry[1]

    def logged(self, blocks: Sequence[Block], *, round_: int) -> None:
        """Remember that the turn log holds ``blocks`` as round ``round_``, in order.

        A commit then refers to those log entries instead of writing the blocks a second time.
        """
        for position, block in enumerate(blocks):
            self._logged[id(block)] = (block, block.turn_id, round_, position)

    def change(self, blocks: Sequence[Block]) -> TimelineChange:
        """Return what storing ``blocks`` as the timeline changes: the positions whose block is not stored there."""
        stored = self._stored
        logged = self._logged
        writes: list[tuple[int, BlockRecord | LoggedBlock]] = []
        sizes: dict[int, int] = {}
        for position, block in enumerate(blocks):
            if position < len(stored) and stored[position] is block:
                continue
            record = self.record(block)
            sizes[position] = len(record.json)
            entry = logged.get(id(block))
            if entry is not None and entry[0] is block:
                writes.append((position, LoggedBlock(entry[1], entry[2], entry[3], record)))
            else:
                writes.append((position, record))
        self._changing = (blocks, sizes)
        return TimelineChange(length=len(blocks), writes=tuple(writes))

    def stored(self, blocks: Sequence[Block]) -> None:
        """Record that ``blocks`` are now the stored timeline, and forget the records and log places held so far.

        A stored block is written again only if compaction moves it, so neither is worth keeping.
        """
        changing, self._changing = self._changing, None
        if changing is not None and changing[0] is blocks:
            self._account(len(blocks), changing[1])  # what the change written for these blocks said
        else:
            previous = self._stored
            self._account(
                len(blocks),
                {
                    position: len(self.record(block).json)
                    for position, block in enumerate(blocks)
                    if position >= len(previous) or previous[position] is not block
                },
            )
        self._stored = list(blocks)
        self._records = {}
        self._logged = {}

    def _account(self, length: int, written: dict[int, int]) -> None:
        """Update the JSON sizes for a stored timeline of ``length`` blocks whose positions ``written`` changed."""
        sizes = self._sizes
        total = self._json_chars
        if length < len(sizes):
            total -= sum(sizes[length:])
            del sizes[length:]
        else:
            sizes.extend([0] * (length - len(sizes)))
        for position, size in written.items():
            total += size - sizes[position]
            sizes[position] = size
        self._json_chars = total


@dataclass(frozen=True, slots=True)
class CommittedTimeline:
    """A timeline as this process committed it, at a store version, with what the store holds of it.

    Whoever restores from it takes the :class:`Timeline` over (with the layouts it has cached): hand
    it to one :func:`restore_conversation` only, and only once nothing else changes it.
    """

    version: int
    timeline: Timeline
    stored: StoredTimeline


def changed_source_records(before: SourcesPool, after: SourcesPool) -> tuple[SourceRecord, ...]:
    """Return the rows of ``after`` that are new or changed since ``before`` (the pool's rows are shared).

    A pool is immutable and a merge that changes nothing returns the same pool, so most rounds compare
    nothing; a row kept by a merge is the same object, compared by identity before its fields.
    """
    if after is before:
        return ()
    return tuple(
        SourceRecord(sid=row.sid, json=row.model_dump_json())
        for row in after.rows
        if (known := before.get(row.sid)) is not row and known != row
    )


RESTORE_ATTEMPTS = 5
"""How often :func:`restore_conversation` loads again when another writer committed the same fold-in first."""


def interrupted_status_block(log: TurnLog, *, now: datetime) -> Block:
    """Return the ``turn.status`` block that closes a turn which stopped without committing.

    A turn that never began (accepted, then the process died while it waited for a slot) has only the user's
    message in its log; the block says that message was not answered, so the model does not take the
    silence for an answer.
    """
    rounds = sum(1 for entry in log.rounds if entry.index > 0)
    began = any(record.type == BlockType.TURN_HEADER for entry in log.rounds[:1] for record in entry.blocks)
    turn_id = log.turn.turn_id
    if began:
        text = (
            f"This turn was interrupted (the host stopped) after {rounds} completed round(s). "
            "Everything shown above was kept; the round in progress was lost."
        )
    else:
        text = (
            "This turn was interrupted before it began (the host stopped while the message waited to be "
            "run): the user's message above was never answered."
        )
    return Block(
        type=BlockType.TURN_STATUS,
        path=f"ar:{turn_id}.turn.status",
        turn_id=turn_id,
        ts=now,
        author="runtime",
        text=text,
        meta={"state": "interrupted", "rounds": rounds, "began": began},
    )


@dataclass(frozen=True, slots=True)
class RestoredConversation:
    """A conversation as the next turn starts from it.

    :ivar version: the store version a commit must name as its base.
    :ivar interrupted_turn_ids: the turns found interrupted by this load (now recorded as such).
    :ivar stored: what the store holds of the timeline (hand it to the :class:`TurnRecorder`).
    :ivar reused: whether the timeline is the ``committed`` one given to :func:`restore_conversation`
        rather than one parsed from the store.
    """

    timeline: Timeline
    sources: SourcesPool
    version: int
    interrupted_turn_ids: tuple[str, ...]
    stored: StoredTimeline = field(default_factory=StoredTimeline)
    reused: bool = False


def _parsed_timeline(records: Sequence[BlockRecord]) -> tuple[Timeline, StoredTimeline]:
    """Return the timeline the stored ``records`` hold, and a :class:`StoredTimeline` that knows them."""
    stored = StoredTimeline()
    blocks = []
    for record in records:
        block = block_from_record(record)
        stored.remember(block, record)  # its JSON's size is counted from the record, not made again
        blocks.append(block)
    stored.stored(blocks)
    return Timeline(blocks), stored


async def restore_conversation(
    handle: ConversationHandle, *, now: datetime, committed: CommittedTimeline | None = None
) -> RestoredConversation:
    """Load a conversation; fold interrupted turns back in, marked as interrupted, and commit that.

    Two restores may race to fold in the same interrupted turn (a turn starting while the conversation
    is read, after a restart): the one whose commit comes second loads again and finds it folded in.

    :param now: the timestamp of the ``turn.status`` blocks of interrupted turns.
    :param committed: the timeline this process last committed for the conversation, if it knows one;
        it is taken over, and the store does not read its copy, when the store still holds its version.
    """
    attempt = 1
    while True:
        try:
            # A retry parses the stored timeline: the failed attempt may have added to ``committed``'s.
            return await _restore_once(handle, now=now, committed=committed if attempt == 1 else None)
        except StorageError as error:
            if error.code != "conflicting_commit" or attempt == RESTORE_ATTEMPTS:
                raise
        attempt += 1


async def _restore_once(
    handle: ConversationHandle, *, now: datetime, committed: CommittedTimeline | None
) -> RestoredConversation:
    """One attempt of :func:`restore_conversation`."""
    snapshot = await handle.load(known_version=committed.version if committed is not None else None, turn_index=False)
    reused = committed is not None and snapshot.timeline is None
    if committed is not None and reused:
        timeline, stored = committed.timeline, committed.stored
    else:
        timeline, stored = _parsed_timeline(snapshot.timeline or ())
    rows = [SourceRow.model_validate_json(record.json) for record in snapshot.sources]
    sources = SourcesPool(rows=tuple(sorted(rows, key=lambda row: row.sid)))
    version = snapshot.version
    for log in snapshot.uncommitted:
        blocks = []
        for entry in log.rounds:
            for record in entry.blocks:
                block = block_from_record(record)
                stored.remember(block, record)
                blocks.append(block)
        status = interrupted_status_block(log, now=now)
        timeline.contribute(*blocks, status)
        version = await handle.commit_turn(
            TurnCommit(
                turn_id=log.turn.turn_id,
                state="interrupted",
                ended_at=now,
                base_version=version,
                timeline=stored.change(timeline.blocks),
                final_round=(stored.record(status),),
                exit_reason="interrupted",
            )
        )
        stored.stored(timeline.blocks)
    interrupted = tuple(log.turn.turn_id for log in snapshot.uncommitted)
    return RestoredConversation(
        timeline=timeline,
        sources=sources,
        version=version,
        interrupted_turn_ids=interrupted,
        stored=stored,
        reused=reused,
    )


class TurnRecorder:
    """Writes one turn through a conversation handle: begin, one append per round, one atomic commit.

    :param handle: the conversation, bound to its scope.
    :param base_version: the version the turn was restored from (:attr:`RestoredConversation.version`).
    :param sources: the sources pool the turn started with (so rounds store only what changed).
    :param stored: what the store holds of the timeline (:attr:`RestoredConversation.stored`).
    """

    def __init__(
        self,
        handle: ConversationHandle,
        turn_id: str,
        *,
        base_version: int,
        sources: SourcesPool,
        stored: StoredTimeline,
    ) -> None:
        self._handle = handle
        self.turn_id = turn_id
        self._base_version = base_version
        self._stored_sources = sources
        self._stored = stored
        self._rounds = 0  # rounds appended to the turn log (the head is round 0)
        self._beginning: asyncio.Future[None] | None = None
        self._appending = asyncio.Lock()  # rounds and live events append to the log one at a time
        self._ended = False
        self.committed: CommittedTimeline | None = None
        """The timeline as the last :meth:`commit` stored it."""

    def resume(self, log: TurnLog) -> tuple[list[Block], list[list[Block]]]:
        """Take over a turn another process began: its logged head and rounds, parsed; later rounds follow them.

        Returns the head (round 0) and each later entry's blocks, in order, for the caller to put back on the
        timeline; the commit refers to their log entries instead of writing them again.
        """
        entries: list[list[Block]] = []
        for entry in log.rounds:
            blocks = []
            for record in entry.blocks:
                block = block_from_record(record)
                self._stored.remember(block, record)
                blocks.append(block)
            self._stored.logged(blocks, round_=entry.index)
            entries.append(blocks)
            self._rounds = max(self._rounds, entry.index)
        return (entries[0] if entries else []), entries[1:]

    async def begin(self, head: Sequence[Block], *, started_at: datetime, generation: str | None = None) -> None:
        """Record the turn as running with its head blocks (header, prompt, attachments)."""
        self.start(head, started_at=started_at, generation=generation)
        await self.begun()

    def start(self, head: Sequence[Block], *, started_at: datetime, generation: str | None = None) -> None:
        """Start recording the turn as running with its head blocks, without waiting for the write.

        The first round takes a model call; the head's write need not hold it up (under load it may wait
        for the database behind other turns' commits). :meth:`record_round` and :meth:`commit` wait for
        it, so the log stays in order, and a failure to begin surfaces there.
        """
        records = tuple(self._stored.record(block) for block in head)
        self._stored.logged(head, round_=0)
        self._rounds = 0
        self._beginning = asyncio.ensure_future(
            self._handle.begin_turn(self.turn_id, started_at=started_at, generation=generation, head=records)
        )

    async def begun(self) -> None:
        """Wait until the turn's head is stored (a cancelled caller does not cancel the write)."""
        if self._beginning is not None:
            await asyncio.shield(self._beginning)

    async def record_round(self, blocks: Sequence[Block], *, sources: SourcesPool) -> int:
        """Append a completed round's blocks and the source rows it changed; return the round index."""
        await self.begun()
        async with self._appending:
            changed = changed_source_records(self._stored_sources, sources)
            index = await self._handle.append_round(
                self.turn_id, tuple(self._stored.record(block) for block in blocks), sources=changed
            )
            self._stored.logged(blocks, round_=index)
            self._rounds = index
            self._stored_sources = sources
            return index

    async def record_live(self, blocks: Sequence[Block]) -> int | None:
        """Append a live event's blocks to the turn log as their own entry, at once; return its index.

        Returns None when the turn has already been committed (the commit stored what it took of them).
        """
        await self.begun()
        async with self._appending:
            if self._ended:
                return None
            index = await self._handle.append_round(self.turn_id, tuple(self._stored.record(b) for b in blocks))
            self._stored.logged(blocks, round_=index)
            self._rounds = index
            return index

    async def commit(
        self,
        timeline: Timeline,
        *,
        sources: SourcesPool,
        state: TurnState,
        ended_at: datetime,
        final_round: Sequence[Block] = (),
        artifacts: Sequence[ArtifactWrite] = (),
        title: str | None = None,
        usage: TurnUsage | None = None,
        exit_reason: str | None = None,
        memory: tuple[MemoryEntry, ...] = (),
    ) -> int:
        """Commit the turn: timeline change, changed sources, final round, artifacts, state; return the version.

        :param usage: the tokens the turn used, for the turn log.
        :param exit_reason: how the turn ended (the loop's outcome), for the turn log.
        :param memory: the turn's memory entries, written in the commit's transaction.
        """
        await self.begun()
        async with self._appending:
            version = await self._commit(
                timeline,
                sources=sources,
                state=state,
                ended_at=ended_at,
                final_round=final_round,
                artifacts=artifacts,
                title=title,
                usage=usage,
                exit_reason=exit_reason,
                memory=memory,
            )
            self._ended = True  # a live event that comes later is the next turn's
            return version

    async def _commit(
        self,
        timeline: Timeline,
        *,
        sources: SourcesPool,
        state: TurnState,
        ended_at: datetime,
        final_round: Sequence[Block],
        artifacts: Sequence[ArtifactWrite],
        title: str | None,
        usage: TurnUsage | None,
        exit_reason: str | None,
        memory: tuple[MemoryEntry, ...],
    ) -> int:
        blocks = tuple(timeline.blocks)
        if final_round:  # the commit appends it to the log as the next round (the store checks the reference)
            self._stored.logged(final_round, round_=self._rounds + 1)
        version = await self._handle.commit_turn(
            TurnCommit(
                turn_id=self.turn_id,
                state=state,
                ended_at=ended_at,
                base_version=self._base_version,
                timeline=self._stored.change(blocks),
                sources=changed_source_records(self._stored_sources, sources),
                final_round=tuple(self._stored.record(block) for block in final_round),
                artifacts=tuple(artifacts),
                title=title,
                usage=usage or TurnUsage(),
                exit_reason=exit_reason,
                memory=memory,
            )
        )
        self._stored.stored(blocks)
        self._stored_sources = sources
        self._base_version = version
        self.committed = CommittedTimeline(version=version, timeline=timeline, stored=self._stored)
        return version
