"""Saving and restoring a conversation through a :class:`~berth.storage.conversations.ConversationStore`.

The runtime speaks blocks and sources pools; the store speaks JSON records. This module converts
between them and drives the write path of a turn (SPEC §4.1):

* :func:`restore_conversation` loads the timeline and the sources pool (one read each). A turn that
  never committed — the process stopped — comes back with every round its log kept, followed by a
  ``turn.status`` block saying it was interrupted; the restored timeline is committed for that turn at
  once, so the interruption is recorded exactly once.
* :class:`TurnRecorder` begins a turn, appends each round to the turn log as the round completes
  (only that round's blocks and the source rows it changed), and commits the turn atomically.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from berth.runtime.blocks import Block, BlockType
from berth.runtime.sources import SourceRow, SourcesPool
from berth.runtime.timeline import Timeline, TimelinePayload
from berth.storage.conversations import (
    ArtifactWrite,
    BlockRecord,
    ConversationHandle,
    SourceRecord,
    TurnCommit,
    TurnLog,
    TurnState,
)

__all__ = [
    "RestoredConversation",
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
    return Block.model_validate_json(record.json)


def changed_source_records(before: SourcesPool, after: SourcesPool) -> tuple[SourceRecord, ...]:
    """Return the rows of ``after`` that are new or changed since ``before`` (the pool's rows are shared)."""
    return tuple(
        SourceRecord(sid=row.sid, json=row.model_dump_json()) for row in after.rows if before.get(row.sid) != row
    )


def interrupted_status_block(log: TurnLog, *, now: datetime) -> Block:
    """Return the ``turn.status`` block that closes a turn which stopped without committing."""
    rounds = sum(1 for entry in log.rounds if entry.index > 0)
    turn_id = log.turn.turn_id
    return Block(
        type=BlockType.TURN_STATUS,
        path=f"ar:{turn_id}.turn.status",
        turn_id=turn_id,
        ts=now,
        author="runtime",
        text=(
            f"This turn was interrupted (the host stopped) after {rounds} completed round(s). "
            "Everything shown above was kept; the round in progress was lost."
        ),
        meta={"state": "interrupted", "rounds": rounds},
    )


@dataclass(frozen=True, slots=True)
class RestoredConversation:
    """A conversation as the next turn starts from it.

    :ivar version: the store version a commit must name as its base.
    :ivar interrupted_turn_ids: the turns found interrupted by this load (now recorded as such).
    """

    timeline: Timeline
    sources: SourcesPool
    version: int
    interrupted_turn_ids: tuple[str, ...]


async def restore_conversation(handle: ConversationHandle, *, now: datetime) -> RestoredConversation:
    """Load a conversation; fold interrupted turns back in, marked as interrupted, and commit that.

    :param now: the timestamp of the ``turn.status`` blocks of interrupted turns.
    """
    snapshot = await handle.load()
    payload = (
        TimelinePayload.model_validate_json(snapshot.timeline_json) if snapshot.timeline_json else TimelinePayload()
    )
    timeline = Timeline.from_payload(payload)
    rows = [SourceRow.model_validate_json(record.json) for record in snapshot.sources]
    sources = SourcesPool(rows=tuple(sorted(rows, key=lambda row: row.sid)))
    version = snapshot.version
    for log in snapshot.uncommitted:
        blocks = [block_from_record(record) for entry in log.rounds for record in entry.blocks]
        status = interrupted_status_block(log, now=now)
        timeline.contribute(*blocks, status)
        version = await handle.commit_turn(
            TurnCommit(
                turn_id=log.turn.turn_id,
                state="interrupted",
                ended_at=now,
                base_version=version,
                timeline_json=timeline.to_payload().model_dump_json(),
                final_round=(block_record(status),),
            )
        )
    interrupted = tuple(log.turn.turn_id for log in snapshot.uncommitted)
    return RestoredConversation(timeline=timeline, sources=sources, version=version, interrupted_turn_ids=interrupted)


class TurnRecorder:
    """Writes one turn through a conversation handle: begin, one append per round, one atomic commit.

    :param handle: the conversation, bound to its scope.
    :param base_version: the version the turn was restored from (:attr:`RestoredConversation.version`).
    :param sources: the sources pool the turn started with (so rounds store only what changed).
    """

    def __init__(self, handle: ConversationHandle, turn_id: str, *, base_version: int, sources: SourcesPool) -> None:
        self._handle = handle
        self.turn_id = turn_id
        self._base_version = base_version
        self._stored_sources = sources

    async def begin(self, head: Sequence[Block], *, started_at: datetime, generation: str | None = None) -> None:
        """Record the turn as running with its head blocks (header, prompt, attachments)."""
        await self._handle.begin_turn(
            self.turn_id,
            started_at=started_at,
            generation=generation,
            head=tuple(block_record(block) for block in head),
        )

    async def record_round(self, blocks: Sequence[Block], *, sources: SourcesPool) -> int:
        """Append a completed round's blocks and the source rows it changed; return the round index."""
        changed = changed_source_records(self._stored_sources, sources)
        index = await self._handle.append_round(
            self.turn_id, tuple(block_record(block) for block in blocks), sources=changed
        )
        self._stored_sources = sources
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
    ) -> int:
        """Commit the turn: timeline artifact, changed sources, final round, artifacts, state; return the version."""
        version = await self._handle.commit_turn(
            TurnCommit(
                turn_id=self.turn_id,
                state=state,
                ended_at=ended_at,
                base_version=self._base_version,
                timeline_json=timeline.to_payload().model_dump_json(),
                sources=changed_source_records(self._stored_sources, sources),
                final_round=tuple(block_record(block) for block in final_round),
                artifacts=tuple(artifacts),
                title=title,
            )
        )
        self._stored_sources = sources
        self._base_version = version
        return version
