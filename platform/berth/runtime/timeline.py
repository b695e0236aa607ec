"""The timeline: the ordered, persisted blocks of one conversation, and its per-round announcements.

Two ways in:

* :meth:`Timeline.contribute` appends persistent blocks. They are saved with the conversation and
  appear in every later render.
* :meth:`Timeline.announce` sets blocks for the current round only. They render at the very end of the
  prompt (in ANNOUNCE), are replaced or cleared each round and are never persisted.

A turn's blocks are its *head* (header, prompt, attachments) followed by *rounds*. A round is a
maximal run of consecutive blocks sharing a ``call_id`` (decision notes, call, code, every part of the
result); the final-answer family (:data:`~berth.runtime.blocks.FINAL_ANSWER_TYPES`) forms a round of
its own. A block without a ``call_id`` joins the round before it. The runtime contributes a round's
call and all its result blocks in one :meth:`Timeline.contribute` call, so a cache checkpoint placed at
the end of a round never falls inside a multi-block result.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict

from berth.runtime.blocks import FINAL_ANSWER_TYPES, Block, BlockType

__all__ = [
    "FINAL_ROUND_KEY",
    "Round",
    "Timeline",
    "TimelineError",
    "TimelineErrorCode",
    "TimelinePayload",
    "TurnLayout",
    "layout_turn",
]

TimelineErrorCode: TypeAlias = Literal["path_not_found", "hide_outside_tail", "not_hidden", "empty_replacement"]

FINAL_ROUND_KEY: Final = "final"
"""The round key of the final-answer family."""

_RESULT_TYPES: Final[frozenset[BlockType]] = frozenset({BlockType.REACT_TOOL_RESULT, BlockType.REACT_NOTICE})


class TimelineError(Exception):
    """A timeline operation the caller (often the model, through ``react.hide``) asked for and cannot have."""

    def __init__(self, code: TimelineErrorCode, message: str) -> None:
        self.code: TimelineErrorCode = code
        self.message = message
        super().__init__(f"{code}: {message}")


@dataclass(frozen=True, slots=True)
class Round:
    """One round of a turn: blocks ``[start, end)`` of the timeline sharing ``key``.

    ``key`` is the round's ``call_id``, or :data:`FINAL_ROUND_KEY` for the final answer. A tool round
    is ``complete`` once it holds a result or a notice; the final round is always complete.
    """

    key: str
    kind: Literal["tool", "final"]
    start: int
    end: int
    complete: bool


@dataclass(frozen=True, slots=True)
class TurnLayout:
    """Where one turn's blocks lie: ``[start, head_end)`` is its head, then its rounds, up to ``end``.

    ``complete_ends`` is the end of each round up to the first incomplete one (where a cached prefix
    may stop); it is computed with the layout, and extended with it, so reading it costs nothing.
    """

    turn_id: str
    start: int
    head_end: int
    end: int
    rounds: tuple[Round, ...]
    complete_ends: tuple[int, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not self.complete_ends and self.rounds and self.rounds[0].complete:
            object.__setattr__(self, "complete_ends", _complete_ends(self.rounds))


def _complete_ends(rounds: Sequence[Round], known: tuple[int, ...] = ()) -> tuple[int, ...]:
    """Extend ``known`` (the ends of ``rounds[:len(known)]``, all complete) up to the first incomplete round."""
    ends = list(known)
    for round_ in rounds[len(known) :]:
        if not round_.complete:
            break
        ends.append(round_.end)
    return tuple(ends)


def _round_key(block: Block) -> str | None:
    if block.type in FINAL_ANSWER_TYPES:
        return FINAL_ROUND_KEY
    return block.call_id


def layout_turn(blocks: Sequence[Block], start: int, end: int) -> TurnLayout:
    """Group ``blocks[start:end]`` (one turn) into its head and its rounds."""
    turn_id = blocks[start].turn_id if start < end else ""
    head_end = start
    while head_end < end and _round_key(blocks[head_end]) is None:
        head_end += 1
    return TurnLayout(
        turn_id=turn_id, start=start, head_end=head_end, end=end, rounds=_layout_rounds(blocks, head_end, end)
    )


def _layout_rounds(blocks: Sequence[Block], start: int, end: int) -> tuple[Round, ...]:
    """Group ``blocks[start:end]`` into rounds; ``blocks[start]`` opens the first one (it has a round key)."""
    rounds: list[Round] = []
    key: str | None = None
    round_start = start
    complete = False
    for index in range(start, end):
        block = blocks[index]
        block_key = _round_key(block)
        if block_key is None or block_key == key:
            complete = complete or block.type in _RESULT_TYPES
            continue
        if key is not None:
            rounds.append(_make_round(key, round_start, index, complete))
        key, round_start = block_key, index
        complete = block.type in _RESULT_TYPES
    if key is not None:
        rounds.append(_make_round(key, round_start, end, complete))
    return tuple(rounds)


def _extend_layout(blocks: Sequence[Block], layout: TurnLayout) -> TurnLayout:
    """Return ``layout`` grown over the blocks of its turn appended after it.

    Appending can only grow a turn's last round (or its head, while it has no round) and add rounds
    after it, so only the blocks from the last round's start on are grouped again.
    """
    end = layout.end
    while end < len(blocks) and blocks[end].turn_id == layout.turn_id:
        end += 1
    if end == layout.end:
        return layout
    if not layout.rounds:
        return layout_turn(blocks, layout.start, end)
    rounds = layout.rounds[:-1] + _layout_rounds(blocks, layout.rounds[-1].start, end)
    # Every round but the last is final; the ends known for them stay (the last one's may change).
    kept = layout.complete_ends[: len(layout.rounds) - 1]
    complete = kept if len(kept) < len(layout.rounds) - 1 else _complete_ends(rounds, kept)
    return TurnLayout(
        turn_id=layout.turn_id,
        start=layout.start,
        head_end=layout.head_end,
        end=end,
        rounds=rounds,
        complete_ends=complete,
    )


def _make_round(key: str, start: int, end: int, has_result: bool) -> Round:
    if key == FINAL_ROUND_KEY:
        return Round(key=key, kind="final", start=start, end=end, complete=True)
    return Round(key=key, kind="tool", start=start, end=end, complete=has_result)


class TimelinePayload(BaseModel):
    """The persisted form of a timeline: its contributed blocks (announcements are never in it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    blocks: tuple[Block, ...] = ()


class Timeline:
    """The mutable timeline of one conversation during a turn.

    Blocks are immutable; hiding or un-hiding swaps a block for a changed copy at the same position.
    """

    def __init__(self, blocks: Iterable[Block] = ()) -> None:
        self._blocks: list[Block] = list(blocks)
        self._view: tuple[Block, ...] | None = None
        self._revision = 0
        self._announced: tuple[Block, ...] = ()
        # Layouts by start index, each for the first ``length`` blocks. They depend only on each
        # block's turn, call and type, which hiding never changes, and appending can only extend the
        # last turn: so all but the last cached layout stay valid until a prefix is replaced.
        self._layouts: dict[int, tuple[int, tuple[TurnLayout, ...]]] = {}
        self._latest_summary = self._find_latest_summary(0)
        # What every round asks of the whole timeline (its turns in order, the blocks that show media), kept
        # for the blocks indexed so far: appending only adds to it, and hiding changes neither a block's turn
        # nor its meta; a replaced prefix starts it again.
        self._indexed = 0
        self._turn_order: dict[str, None] = {}
        self._turn_ids: tuple[str, ...] = ()
        self._media_indices: list[int] = []

    @classmethod
    def from_payload(cls, payload: TimelinePayload) -> Timeline:
        """Rebuild a timeline from its persisted payload."""
        return cls(payload.blocks)

    def to_payload(self) -> TimelinePayload:
        """Return what is persisted: every contributed block, never the announcements."""
        return TimelinePayload(blocks=tuple(self._blocks))

    @property
    def blocks(self) -> Sequence[Block]:
        """The contributed blocks, oldest first (a read-only view)."""
        if self._view is None:
            self._view = tuple(self._blocks)
        return self._view

    @property
    def revision(self) -> int:
        """How many times blocks already on the timeline were changed (hidden, restored, compacted).

        Appending does not count: while the revision stays the same, the first ``n`` blocks stay the
        same objects, so a cache of what was derived from them only has to add what was appended.
        """
        return self._revision

    @property
    def announced(self) -> tuple[Block, ...]:
        """The blocks announced for the current round."""
        return self._announced

    def __len__(self) -> int:
        return len(self._blocks)

    def contribute(self, *blocks: Block) -> None:
        """Append persistent blocks. Contribute a round's call and all its result blocks in one call."""
        first_new = len(self._blocks)
        self._blocks.extend(blocks)
        self._view = None
        self._latest_summary = self._find_latest_summary(first_new, self._latest_summary)

    def replace_prefix(self, end: int, summary: Block) -> None:
        """Replace blocks ``[0, end)`` with one ``conv.range.summary`` block (compaction).

        The payload then starts at the summary; the dropped blocks stay in the turn logs.
        """
        if summary.type != BlockType.CONV_RANGE_SUMMARY:
            raise ValueError(f"only a conv.range.summary block can replace a prefix, not {summary.type}")
        if not 0 < end <= len(self._blocks):
            raise ValueError(f"prefix end {end} is outside the timeline (1..{len(self._blocks)})")
        self._blocks[:end] = [summary]
        self._view = None
        self._revision += 1
        self._layouts = {}
        self._latest_summary = self._find_latest_summary(0)
        self._indexed, self._turn_order, self._turn_ids, self._media_indices = 0, {}, (), []

    def _find_latest_summary(self, from_index: int, known: int | None = None) -> int | None:
        latest = known
        for index in range(from_index, len(self._blocks)):
            if self._blocks[index].type == BlockType.CONV_RANGE_SUMMARY:
                latest = index
        return latest

    @property
    def latest_summary_index(self) -> int | None:
        """The position of the newest ``conv.range.summary`` block (where rendering starts), if any."""
        return self._latest_summary

    def announce(self, *blocks: Block) -> None:
        """Set the blocks announced for this round, replacing the previous round's; never persisted."""
        self._announced = tuple(blocks)

    def clear_announcements(self) -> None:
        """Drop this round's announcements (a turn's exit clears them)."""
        self._announced = ()

    def turn_ids(self) -> tuple[str, ...]:
        """Return the conversation's turn ids in timeline order."""
        self._index_appended()
        return self._turn_ids

    def media_blocks(self, start: int = 0) -> list[Block]:
        """The blocks from position ``start`` on whose meta names media (``meta.media``: an image or a PDF the
        prompt may show as itself), hidden or not, in timeline order."""
        self._index_appended()
        return [self._blocks[index] for index in self._media_indices if index >= start]

    def _index_appended(self) -> None:
        """Add the blocks appended since the last call to the turn order and the media positions."""
        blocks = self._blocks
        if self._indexed == len(blocks):
            return
        order = self._turn_order
        for index in range(self._indexed, len(blocks)):
            block = blocks[index]
            order.setdefault(block.turn_id, None)
            if block.meta.get("media"):
                self._media_indices.append(index)
        self._indexed = len(blocks)
        if len(order) != len(self._turn_ids):
            self._turn_ids = tuple(order)

    @property
    def current_turn_id(self) -> str | None:
        """The turn of the newest block, or ``None`` for an empty timeline."""
        return self._blocks[-1].turn_id if self._blocks else None

    def turn_layouts(self, start: int = 0) -> tuple[TurnLayout, ...]:
        """Return the layout of each turn whose blocks lie at or after index ``start``.

        Turns are maximal runs of blocks with the same ``turn_id``. The layouts are kept until the
        timeline changes; after an append only the last turn and the new ones are laid out again.
        """
        blocks = self._blocks
        cached = self._layouts.get(start)
        if cached is not None and cached[0] == len(blocks):
            return cached[1]
        layouts: list[TurnLayout] = []
        index = start
        if cached is not None and cached[1]:
            layouts.extend(cached[1][:-1])
            layouts.append(_extend_layout(blocks, cached[1][-1]))
            index = layouts[-1].end
        while index < len(blocks):
            turn_id = blocks[index].turn_id
            end = index + 1
            while end < len(blocks) and blocks[end].turn_id == turn_id:
                end += 1
            layouts.append(layout_turn(blocks, index, end))
            index = end
        result = tuple(layouts)
        self._layouts[start] = (len(blocks), result)
        return result

    def indices_of(self, path: str) -> tuple[int, ...]:
        """Return the positions of the blocks whose path is exactly ``path``."""
        return tuple(i for i, block in enumerate(self._blocks) if block.path == path)

    def hide(self, path: str, replacement: str, *, editable_from: int) -> int:
        """Hide every visible block at ``path`` behind ``replacement``; return how many were hidden.

        :param editable_from: the first index of the editable tail (see
            :func:`berth.runtime.caching.editable_tail_start`); blocks before it are in the cached
            prefix and cannot change.
        :raises TimelineError: ``empty_replacement``, ``path_not_found`` (no block at the path) or
            ``hide_outside_tail`` (the blocks exist, but only in the cached prefix).
        """
        if not replacement.strip():
            raise TimelineError("empty_replacement", "say in the replacement what was hidden and why")
        found = self.indices_of(path)
        if not found:
            raise TimelineError("path_not_found", f"no block has the path {path!r}")
        targets = [i for i in found if i >= editable_from and not self._blocks[i].hidden]
        if not targets:
            if all(self._blocks[i].hidden for i in found):
                return 0
            raise TimelineError(
                "hide_outside_tail",
                f"{path!r} is in the cached prefix; only blocks of the last rounds can be hidden",
            )
        for i in targets:
            self._blocks[i] = self._blocks[i].model_copy(update={"hidden": True, "replacement": replacement})
        self._view = None
        self._revision += 1
        return len(targets)

    def unhide(self, path: str) -> int:
        """Restore every hidden block at ``path``; return how many were restored.

        :raises TimelineError: ``path_not_found`` or ``not_hidden``.
        """
        found = self.indices_of(path)
        if not found:
            raise TimelineError("path_not_found", f"no block has the path {path!r}")
        targets = [i for i in found if self._blocks[i].hidden]
        if not targets:
            raise TimelineError("not_hidden", f"{path!r} is not hidden")
        for i in targets:
            self._blocks[i] = self._blocks[i].model_copy(update={"hidden": False, "replacement": None})
        self._view = None
        self._revision += 1
        return len(targets)
