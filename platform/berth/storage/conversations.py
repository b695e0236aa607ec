"""The conversation store seam: timeline, sources pool, per-turn log and conversation index.

A :class:`ConversationStore` has an explicit lifecycle (:meth:`~ConversationStore.open`,
:meth:`~ConversationStore.aclose`) and hands out :class:`ConversationHandle` objects bound to one
:class:`~berth.storage.scope.ConversationScope`; nothing a handle does can reach another conversation.

The write path of a turn, and what survives a crash at any point of it:

1. :meth:`ConversationHandle.begin_turn` records the turn as ``running`` with its head blocks.
2. :meth:`ConversationHandle.append_round` appends each completed round's blocks (and the source rows
   it changed) to the turn log, in one transaction. Its cost depends on the round only, never on the
   length of the conversation: nothing already stored is re-written.
3. :meth:`ConversationHandle.commit_turn` writes what changed on the timeline (a
   :class:`TimelineChange`: the blocks appended or swapped, never the unchanged rest), the changed
   source rows, the turn's final state and its artifacts atomically.

Before all three, the API records the turn :meth:`~ConversationHandle.accept_turn` (``accepted``, with
the user's message, durably) before it answers 202, so a turn a client was told about is never gone.

A crash before step 3 leaves the previous timeline intact and the completed rounds in the turn log. The
store records each turn it holds ``accepted`` or ``running`` for a process that is gone as ``interrupted``
(:meth:`ConversationStore.recover_interrupted_turns`, run when the store opens and by every
:meth:`ConversationHandle.load`), and the next load returns its rounds, so at most the round that was
open is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias

from berth.storage.scope import ConversationScope, OwnerScope

if TYPE_CHECKING:
    from berth.storage.memory import MemoryEntry

__all__ = [
    "ArtifactWrite",
    "BlockRecord",
    "ConversationHandle",
    "ConversationRecord",
    "ConversationSnapshot",
    "ConversationStore",
    "InterruptedTurn",
    "LoggedBlock",
    "SourceRecord",
    "StorageError",
    "StorageErrorCode",
    "TimelineChange",
    "TurnCommit",
    "TurnLog",
    "TurnRecord",
    "TurnRound",
    "TurnState",
    "TurnUsage",
]

TurnState: TypeAlias = Literal["accepted", "running", "completed", "interrupted", "failed", "cancelled"]
StorageErrorCode: TypeAlias = Literal[
    "turn_not_found",
    "turn_not_running",
    "turn_exists",
    "unknown_logged_block",
    "artifact_not_found",
    "unsafe_artifact_path",
    "conflicting_commit",
    "store_closed",
    "turn_in_progress",
    "turn_owned",
    "turn_needs_isolation",
    "store_probe_failed",
]


class StorageError(Exception):
    """A storage operation that cannot be done, with a stable ``code`` and a message saying what to do."""

    def __init__(self, code: StorageErrorCode, message: str) -> None:
        self.code: StorageErrorCode = code
        self.message = message
        super().__init__(f"{code}: {message}")


@dataclass(slots=True)
class BlockRecord:
    """A timeline block as it is stored: the columns a store indexes, plus the block's JSON.

    Made for every block of every round, so not declared ``frozen`` (a frozen dataclass's ``__init__``
    costs three times as much); treat it as immutable.
    """

    turn_id: str
    path: str
    type: str
    json: str


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One sources-pool row as it is stored: its SID and its JSON."""

    sid: int
    json: str


@dataclass(frozen=True, slots=True)
class ArtifactWrite:
    """A file of the conversation to write with a turn's commit, at a relative ``path`` (no ``..``)."""

    path: str
    data: bytes


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """The tokens a turn's model calls used, summed (Anthropic's accounting: the input counts do not overlap).

    :ivar input_tokens: uncached input tokens.
    :ivar cache_read_input_tokens: input tokens served from the provider's prompt cache.
    :ivar cache_creation_input_tokens: input tokens written to the provider's prompt cache.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One turn in the conversation index. ``rounds`` counts the rounds appended to its log.

    :ivar usage: the tokens the turn used, recorded at its commit (zero until then).
    :ivar exit_reason: how the turn ended (``completed``, ``exited``, ``iteration_limit``, ``failed``,
        ``cancelled``, ``interrupted``), recorded at its commit; ``None`` while it runs.
    """

    turn_id: str
    state: TurnState
    started_at: datetime
    ended_at: datetime | None
    generation: str | None
    rounds: int
    usage: TurnUsage = TurnUsage()
    exit_reason: str | None = None
    attempts: int = 0
    """How many times a worker began the turn (distributed storage; 0 elsewhere)."""
    error: str | None = None
    """Why its last attempt ended without it, or why it was parked (distributed storage)."""


@dataclass(frozen=True, slots=True)
class TurnRound:
    """One entry of a turn log: round 0 is the turn's head (header, prompt, attachments)."""

    index: int
    blocks: tuple[BlockRecord, ...]


@dataclass(frozen=True, slots=True)
class TurnLog:
    """Everything appended for one turn, in order; the log keeps blocks compaction dropped."""

    turn: TurnRecord
    rounds: tuple[TurnRound, ...]


@dataclass(slots=True)
class LoggedBlock:
    """A block the turn log already holds, named by where: the timeline refers to it instead of copying it.

    :ivar record: the block itself (a store may copy it instead of referring to the log).

    Not declared ``frozen``, as :class:`BlockRecord`; treat it as immutable.
    """

    turn_id: str
    round: int
    position: int
    record: BlockRecord


@dataclass(frozen=True, slots=True)
class TimelineChange:
    """How a commit changes the stored timeline: the blocks at some positions, and its new length.

    :ivar length: how many blocks the timeline holds after the commit; stored blocks at or past it are
        dropped (compaction shortens the timeline).
    :ivar writes: ``(position, block)`` for every position whose block is new or was swapped (hidden,
        restored, or shifted by compaction), in ascending order, all below ``length``. A
        :class:`LoggedBlock` is one this turn's log holds (including the commit's ``final_round``), at
        that round and position.
    """

    length: int
    writes: tuple[tuple[int, BlockRecord | LoggedBlock], ...] = ()

    def __post_init__(self) -> None:
        positions = [position for position, _ in self.writes]
        if self.length < 0 or any(not 0 <= p < self.length for p in positions) or positions != sorted(set(positions)):
            raise ValueError(
                f"a timeline change of length {self.length} needs distinct ascending positions below it, got "
                f"{positions[:8]}"
            )

    @classmethod
    def whole(cls, blocks: tuple[BlockRecord, ...]) -> TimelineChange:
        """The change that stores ``blocks`` as the whole timeline."""
        return cls(length=len(blocks), writes=tuple(enumerate(blocks)))


@dataclass(frozen=True, slots=True)
class ConversationSnapshot:
    """What a turn starts from: one read of the timeline, one of the sources pool, and the turn index.

    :ivar timeline: the committed timeline's blocks, oldest first (``()`` for a new conversation); or
        ``None`` when the load was told a ``known_version`` that is still the stored one, and skipped
        reading what the caller already holds.
    :ivar version: how many commits made it (0 for a new conversation); a commit must name it.
    :ivar uncommitted: the logs of turns that never committed (``interrupted`` in ``turns``), oldest
        first: the rounds that survived a crash.
    """

    scope: ConversationScope
    timeline: tuple[BlockRecord, ...] | None
    version: int
    sources: tuple[SourceRecord, ...]
    turns: tuple[TurnRecord, ...]
    uncommitted: tuple[TurnLog, ...]

    @property
    def interrupted_turn_ids(self) -> tuple[str, ...]:
        """The turns that stopped without a commit (a crash, or a worker that died)."""
        return tuple(turn.turn_id for turn in self.turns if turn.state == "interrupted")


@dataclass(frozen=True, slots=True)
class TurnCommit:
    """The atomic end of a turn.

    :ivar base_version: the :attr:`ConversationSnapshot.version` the turn started from; a commit from
        a stale base is refused (``conflicting_commit``) instead of overwriting a newer timeline.
    :ivar timeline: what changed on the timeline since ``base_version``.
    :ivar sources: the source rows added or changed since the last write.
    :ivar final_round: blocks to append to the turn log with the commit (e.g. the final answer).
    :ivar title: a title for the conversation index, when the turn produced one.
    :ivar usage: the tokens the turn used, for the turn log.
    :ivar exit_reason: how the turn ended, for the turn log (see :attr:`TurnRecord.exit_reason`).
    :ivar memory: the turn's entries for the memory index of the same backend, written in the commit's transaction:
        they are durable with the commit (one ``fsync``, not two) and a refused commit writes none of them.
    """

    turn_id: str
    state: TurnState
    ended_at: datetime
    base_version: int
    timeline: TimelineChange
    sources: tuple[SourceRecord, ...] = ()
    final_round: tuple[BlockRecord, ...] = ()
    artifacts: tuple[ArtifactWrite, ...] = ()
    title: str | None = None
    usage: TurnUsage = TurnUsage()
    exit_reason: str | None = None
    memory: tuple[MemoryEntry, ...] = ()
    attempts: int = 0
    """How many times a worker began the turn (distributed storage; 0 elsewhere)."""
    error: str | None = None
    """Why its last attempt ended without it, or why it was parked (distributed storage)."""


@dataclass(frozen=True, slots=True)
class InterruptedTurn:
    """A turn found ``accepted`` or ``running`` with no live process behind it, now recorded ``interrupted``.

    :ivar was: ``accepted`` (acknowledged, never begun: only the user's message is stored) or ``running``.
    """

    scope: ConversationScope
    turn_id: str
    was: TurnState


@dataclass(frozen=True, slots=True)
class ConversationRecord:
    """A row of the conversation index."""

    scope: ConversationScope
    title: str | None
    created_at: datetime
    updated_at: datetime
    turn_count: int


class ConversationHandle(Protocol):
    """One conversation of a store, bound to its scope."""

    @property
    def scope(self) -> ConversationScope:
        """The tenant, project, user and conversation every operation of this handle is limited to."""
        ...

    async def load(self, *, known_version: int | None = None, turn_index: bool = True) -> ConversationSnapshot:
        """Read the committed timeline, the sources pool, the turn index and the logs of interrupted turns.

        A turn of this conversation left ``accepted`` or ``running`` by a process that is gone is recorded
        ``interrupted`` first (it died after the store opened; see
        :meth:`ConversationStore.recover_interrupted_turns`).

        :param known_version: the version of a timeline the caller already holds; when the store still
            holds that version, the snapshot's ``timeline`` is ``None`` instead of a copy of it.
        :param turn_index: with ``False``, ``turns`` may hold only the interrupted turns (those of
            ``uncommitted``): a turn starting needs no more, and a long conversation's index costs.
        """
        ...

    async def accept_turn(self, turn_id: str, *, accepted_at: datetime, head: tuple[BlockRecord, ...]) -> None:
        """Record a turn the API acknowledged but has not begun (``accepted``), with its head (the user's
        message), before the client is told it exists: a process that dies before the turn begins leaves it
        ``interrupted``, never gone. Durable when it returns (it survives a power loss, not only a killed
        process): it is what a 202 promises.

        :raises StorageError: ``turn_exists`` when the turn id is already used.
        """
        ...

    async def end_unstarted_turn(self, turn_id: str, *, state: TurnState, ended_at: datetime) -> None:
        """End an ``accepted`` turn that never began (cancelled while it waited, or failed to start).
        Does nothing to a turn in any other state."""
        ...

    async def begin_turn(
        self, turn_id: str, *, started_at: datetime, generation: str | None, head: tuple[BlockRecord, ...]
    ) -> None:
        """Record a new ``running`` turn and its head blocks (round 0 of its log); an ``accepted`` turn of that
        id becomes ``running``, its head replaced.

        :raises StorageError: ``turn_exists`` when the turn id is already used by a turn that is not ``accepted``.
        """
        ...

    async def append_round(
        self, turn_id: str, blocks: tuple[BlockRecord, ...], *, sources: tuple[SourceRecord, ...] = ()
    ) -> int:
        """Append one completed round to the turn log in one transaction; return its round index.

        :param sources: the source rows the round added or changed (never the whole pool).
        :raises StorageError: ``turn_not_found`` or ``turn_not_running``.
        """
        ...

    async def commit_turn(self, commit: TurnCommit) -> int:
        """Write the timeline, sources, final round, artifacts and turn state atomically; return the new version.

        :raises StorageError: ``turn_not_found``, ``conflicting_commit``, ``unsafe_artifact_path``.
        """
        ...

    async def read_turn_log(self, turn_id: str) -> TurnLog:
        """Return one turn's log (every round appended, whatever compaction later dropped).

        :raises StorageError: ``turn_not_found``.
        """
        ...

    async def read_artifact(self, path: str) -> bytes:
        """Return a committed artifact of this conversation.

        :raises StorageError: ``artifact_not_found`` or ``unsafe_artifact_path``.
        """
        ...

    async def store_files(self, turn_id: str, files: tuple[ArtifactWrite, ...]) -> None:
        """Store files a running turn produced, before the turn announces them: from then on they can be downloaded
        and outlive the process (a turn resumed elsewhere finds them: :meth:`turn_files`). The commit stores them
        again, unchanged.

        :raises StorageError: ``unsafe_artifact_path``; ``turn_owned`` when the turn was taken over.
        """
        ...

    async def turn_files(self, turn_id: str) -> tuple[ArtifactWrite, ...]:
        """The files stored for turn ``turn_id`` so far (by :meth:`store_files` or its commit), by path."""
        ...

    async def erase(self) -> tuple[str, ...]:
        """Delete everything the store holds of this conversation: its turns and their logs, the timeline, the
        sources pool and its files (their index and their bytes); return the ids of the turns it had.

        Nothing of it is readable afterwards, through this store or in its files (an embedded store overwrites
        what it deletes; see ``docs/storage.md``). Erasing a conversation the store does not hold returns ``()``.
        A turn still running is not stopped: stop it first (a write of it afterwards may store it anew).
        """
        ...


class ConversationStore(Protocol):
    """Where conversations live. Open it before use and close it when done (or use ``async with``)."""

    async def open(self) -> None:
        """Prepare the store (create or migrate its schema, open connections), then
        :meth:`recover_interrupted_turns`."""
        ...

    async def recover_interrupted_turns(self) -> tuple[InterruptedTurn, ...]:
        """Record as ``interrupted`` every turn left ``accepted`` or ``running`` by a process that is gone, in
        every conversation; return them. Turns of a live process (this one, or another sharing the store)
        are left alone. The next load of their conversation returns their rounds (``uncommitted``), for the
        runtime to fold into the timeline.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; the store refuses further work (``store_closed``)."""
        ...

    def conversation(self, scope: ConversationScope) -> ConversationHandle:
        """Return a handle bound to one conversation (created on its first write)."""
        ...

    async def list_conversations(self, owner: OwnerScope) -> tuple[ConversationRecord, ...]:
        """Return the conversation index of one user in one tenant/project, newest first."""
        ...
