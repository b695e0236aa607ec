"""Render a timeline into a provider-neutral prompt with cache checkpoints.

Order (SPEC §4.5): the system message → history (from the latest compaction summary on; TTL-pruned
turns as compact cards) → the current turn → SOURCES POOL → ANNOUNCE. The system message and up to
three timeline ranges carry a cache checkpoint (:mod:`berth.runtime.caching`); SOURCES POOL and
ANNOUNCE come after the last checkpoint and are rebuilt every round. Nothing before the last
checkpoint depends on the clock, the budget, the plans' progress or the sources pool, so two renders
of the same timeline share their cached prefix byte for byte.

A provider plugin maps the result onto its API: each :class:`PromptPart` becomes one content block, and
a part with a ``cache_checkpoint`` gets the provider's cache marker (Anthropic ``cache_control``).
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict

from berth.runtime.announce import AnnounceState, render_announce
from berth.runtime.blocks import Block, BlockType, format_utc
from berth.runtime.caching import (
    DEFAULT_PRE_TAIL_OFFSET,
    MAX_CACHE_BREAKPOINTS,
    CacheCheckpoint,
    CheckpointKind,
    plan_checkpoints,
)
from berth.runtime.media import PromptMedia, media_of
from berth.runtime.pruning import PRUNING_NOTICE, render_pruned_turn
from berth.runtime.sources import SourcesPool, listed_rows
from berth.runtime.timeline import Round, Timeline, TurnLayout
from berth.runtime.unvalidated import unvalidated

__all__ = [
    "BLOCK_SEPARATOR",
    "PromptMessage",
    "PromptPart",
    "PromptSection",
    "RenderedPrompt",
    "TimelineRenderer",
    "render_block",
    "render_timeline",
    "visible_start",
]

PromptSection: TypeAlias = Literal["system", "history", "current_turn", "sources", "announce"]

BLOCK_SEPARATOR: Final = "\n\n"
"""What separates two rendered blocks inside one prompt part."""


@dataclass(frozen=True, slots=True)
class PromptPart:
    """One content block of the prompt; ``cache_checkpoint`` marks the end of a cached prefix.

    A slotted dataclass rather than a pydantic model: the renderer makes the parts (there is nothing
    to validate), and a resident conversation keeps one per turn head and round, so each part being
    one object instead of three (instance, ``__dict__``, fields-set) keeps the garbage collector's
    full passes short on a busy host.
    """

    section: PromptSection
    text: str
    cache_checkpoint: CheckpointKind | None = None
    media: tuple[PromptMedia, ...] = ()
    """Images and PDFs that follow the text, before the checkpoint (:mod:`berth.runtime.media`)."""


class PromptMessage(BaseModel):
    """One message of the provider-neutral prompt."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["system", "user"]
    parts: tuple[PromptPart, ...]


class RenderedPrompt(BaseModel):
    """A rendered round: the messages to send and where the timeline checkpoints were placed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    messages: tuple[PromptMessage, ...]
    checkpoints: tuple[CacheCheckpoint, ...]
    start: int
    characters: int | None = None
    """The length of every part's text joined by :data:`BLOCK_SEPARATOR`, when the renderer counted it
    (it keeps a running count, so estimating a long prompt's size does not walk all its parts)."""

    def parts(self) -> tuple[PromptPart, ...]:
        """Return every part of every message, in order."""
        return tuple(part for message in self.messages for part in message.parts)

    def breakpoint_count(self) -> int:
        """Return how many parts carry a cache checkpoint (never more than four)."""
        return sum(part.cache_checkpoint is not None for part in self.parts())

    def cached_prefix(self) -> tuple[str, ...]:
        """Return the texts of the parts up to and including the last one with a checkpoint."""
        parts = self.parts()
        last = max((i for i, part in enumerate(parts) if part.cache_checkpoint), default=-1)
        return tuple(part.text for part in parts[: last + 1])

    def section_text(self, section: PromptSection) -> str:
        """Return the text of one section (parts joined by :data:`BLOCK_SEPARATOR`)."""
        return BLOCK_SEPARATOR.join(part.text for part in self.parts() if part.section == section)


_PRUNING_NOTICE_PART: Final = PromptPart(section="history", text=PRUNING_NOTICE)


def _body(block: Block) -> str:
    if block.text is not None:
        return block.text
    if block.data is not None:
        return json.dumps(block.data, ensure_ascii=False, sort_keys=True)
    if block.blob_ref is not None:
        return f"(binary {block.mime} stored at {block.blob_ref}; react.read({json.dumps([block.path])}) loads it)"
    return ""


def render_block(block: Block) -> str:
    """Render one block as text: a header line naming its type and logical path, then its content.

    A hidden block shows its replacement and how to re-open it; the turn header shows the turn id and
    its start time (a fixed fact of the timeline, not the clock of this round).
    """
    if block.type == BlockType.TURN_HEADER:
        header = f"[TURN {block.turn_id}] started {format_utc(block.ts)}"
    else:
        mime = "" if block.mime == "text/plain" else f" ({block.mime})"
        header = f"[{block.type}] {block.path}{mime}"
    if block.hidden:
        reopen = json.dumps([block.path])
        return f"{header} [hidden]\n{block.replacement}\n(react.read({reopen}) shows it again)"
    body = _body(block)
    return f"{header}\n{body}" if body else header


def visible_start(blocks: Sequence[Block]) -> int:
    """Return the index rendering starts at: the latest ``conv.range.summary`` block, else 0."""
    for index in range(len(blocks) - 1, -1, -1):
        if blocks[index].type == BlockType.CONV_RANGE_SUMMARY:
            return index
    return 0


_SYSTEM_TEXTS: dict[str, str] = {}
_SYSTEM_TEXTS_LIMIT: Final = 64


def _shared_system(system: str) -> str:
    """The one copy of the system message ``system`` that renderers keep.

    Every conversation of a bundle has the same system message (about 8 KB with the hello bundle), made again
    for every turn; a renderer kept with its conversation holds the copy it rendered first, so conversations
    kept in memory share one instead of holding one each.
    """
    shared = _SYSTEM_TEXTS.get(system)
    if shared is None:
        if len(_SYSTEM_TEXTS) >= _SYSTEM_TEXTS_LIMIT:
            _SYSTEM_TEXTS.clear()
        shared = _SYSTEM_TEXTS[system] = system
    return shared


_PartCache: TypeAlias = dict[tuple[object, ...], tuple[tuple[Block, ...], PromptPart]]

_PART_CACHE_SLACK: Final = 64
"""Parts a cache may hold beyond twice those of the last render before a full render rebuilds it."""


def _round_start(round_: Round) -> int:
    return round_.start


def _unit_ends(layout: TurnLayout, first: int) -> list[int]:
    """Return the end of each part of ``layout`` (its head, then each round) that starts at or after ``first``."""
    ends = [layout.head_end] if first <= layout.start < layout.head_end else []
    ends.extend(round_.end for round_ in layout.rounds[bisect_left(layout.rounds, first, key=_round_start) :])
    return ends


@dataclass(slots=True)
class _Segments:
    """The timeline parts of a render, in order, and what they were made from.

    ``ends[i]`` is the block index ``parts[i]`` ends at. While the timeline, its revision, the start,
    the pruned turns and the current turn stay the same, every part but the last one is final: blocks
    can only be appended, and they grow the current turn's last round or add rounds after it.
    """

    timeline: Timeline
    revision: int
    start: int
    pruned_turns: frozenset[str]
    current_start: int
    ends: list[int]
    parts: list[PromptPart]
    last_start: int
    """The block index the last part starts at."""
    characters: int = 0
    """The summed length of the parts' texts."""
    current_first: int = 0
    """The index of the current turn's first part."""
    listed: frozenset[str] = frozenset()
    """The source row lines ``parts[:listed_upto]`` hold (see :meth:`history_listed`)."""
    listed_upto: int = 0

    def history_listed(self) -> frozenset[str]:
        """The source row lines the history parts hold (tool results list the rows they brought); kept as the
        history grows, so a round pays only for the parts added since."""
        if self.listed_upto > self.current_first:
            self.listed, self.listed_upto = frozenset(), 0
        if self.listed_upto < self.current_first:
            more = [listed_rows(part.text) for part in self.parts[self.listed_upto : self.current_first]]
            self.listed = self.listed.union(*more)
            self.listed_upto = self.current_first
        return self.listed

    def made_from(self, timeline: Timeline, start: int, pruned_turns: frozenset[str]) -> bool:
        """Whether these parts were made from ``timeline`` as it is now (only appended to since)."""
        return (
            self.timeline is timeline
            and self.revision == timeline.revision
            and self.start == start
            and self.pruned_turns == pruned_turns
        )

    def following(self, timeline: Timeline, current_start: int, keep: int) -> _Segments:
        """Return segments for the same timeline with the first ``keep`` parts of these, to add to."""
        return _Segments(
            timeline,
            self.revision,
            self.start,
            self.pruned_turns,
            current_start,
            self.ends[:keep],
            self.parts[:keep],
            self.last_start,
            self.characters - sum(len(part.text) for part in self.parts[keep:]),
            min(self.current_first, keep),
            *((self.listed, self.listed_upto) if keep >= self.listed_upto else ()),
        )

    def add(self, end: int, part: PromptPart) -> None:
        """Append ``part``, which ends at block index ``end``."""
        self.ends.append(end)
        self.parts.append(part)
        self.characters += len(part.text)


class TimelineRenderer:
    """Renders one conversation round after round, reusing the text of the parts it has rendered.

    A part's text depends only on its blocks, and blocks are immutable, so the text of a turn head,
    a round or a pruned card is computed once; a hidden or restored block is a new object, so its
    part is rendered again. Between two renders of a timeline that only grew, only the current
    turn's last part and the parts after it are made again, so a round costs what it added, not
    what the timeline holds. The cache holds the parts of the latest full render and those made since.
    """

    def __init__(self) -> None:
        # Keyed by the section and the ids of the part's blocks; the entry holds the blocks, so none
        # of those ids can be reused by another object while the entry exists.
        self._parts: _PartCache = {}
        self._segments: _Segments | None = None
        self._system: PromptPart | None = None
        self._sources: PromptPart | None = None
        # (id of a part, checkpoint kind) → (that part, its copy carrying the checkpoint), for the last render
        self._marked: dict[tuple[int, CheckpointKind], tuple[PromptPart, PromptPart]] = {}
        self.media: dict[str, bytes] = {}
        """The shelf: the bytes of attachments shown as themselves, by ``fi:`` path (:mod:`berth.runtime.media`)."""

    @property
    def text_chars(self) -> int:
        """The length of the prompt text kept for the next render: the parts of the last one (counted as they
        were made) and the sources pool's part (the system message is one copy shared by every renderer)."""
        segments = self._segments
        return (segments.characters if segments is not None else 0) + (
            len(self._sources.text) if self._sources is not None else 0
        )

    @property
    def media_bytes(self) -> int:
        """The bytes of the images and PDFs on the shelf."""
        return sum(len(data) for data in self.media.values())

    def forget_parts(self) -> None:
        """Make every part again at the next render (the shelf gained files that parts made before lack)."""
        self._parts = {}
        self._segments = None
        self._marked = {}

    def _system_part(self, system: str) -> PromptPart:
        part = self._system
        if part is None or part.text != system:
            part = self._system = PromptPart(section="system", text=_shared_system(system), cache_checkpoint="system")
        return part

    def _sources_part(self, text: str) -> PromptPart:
        part = self._sources
        if part is None or part.text is not text:
            part = self._sources = PromptPart(section="sources", text=text)
        return part

    def _marked_part(
        self,
        part: PromptPart,
        kind: CheckpointKind,
        marked: dict[tuple[int, CheckpointKind], tuple[PromptPart, PromptPart]],
    ) -> PromptPart:
        """Return ``part`` carrying the ``kind`` checkpoint (the same copy while ``part`` keeps it)."""
        key = (id(part), kind)
        entry = self._marked.get(key)
        if entry is None or entry[0] is not part:
            entry = (part, PromptPart(section=part.section, text=part.text, cache_checkpoint=kind, media=part.media))
        marked[key] = entry
        return entry[1]

    def _part(
        self, section: PromptSection, blocks: Sequence[Block], into: _PartCache, *, card: bool = False
    ) -> PromptPart:
        key = (section, card, *map(id, blocks))
        entry = self._parts.get(key)
        if entry is None:
            text = render_pruned_turn(blocks) if card else BLOCK_SEPARATOR.join(map(render_block, blocks))
            media = media_of(blocks, self.media) if self.media and not card else ()
            entry = (tuple(blocks), PromptPart(section=section, text=text, media=media))
        into[key] = entry
        return entry[1]

    def _add_units(
        self,
        segments: _Segments,
        section: PromptSection,
        blocks: Sequence[Block],
        layout: TurnLayout,
        first: int,
        into: _PartCache,
    ) -> None:
        """Append a part for each unit (head, round) of ``layout`` from block ``first`` on."""
        for end in _unit_ends(layout, first):
            segments.add(end, self._part(section, blocks[first:end], into))
            segments.last_start, first = first, end

    def _timeline_segments(
        self, timeline: Timeline, layouts: Sequence[TurnLayout], start: int, pruned_turns: frozenset[str]
    ) -> _Segments:
        """Return one part per turn head, per round and per pruned card, each ending at a block index.

        The parts before a stop never change shape, so a prefix written by an earlier request (which
        a provider keys by its content blocks) is still a prefix of this one.
        """
        blocks = timeline.blocks
        current = layouts[-1]
        made = self._segments
        extendable = made is not None and made.made_from(timeline, start, pruned_turns)
        if made is not None and extendable and made.current_start == current.start:
            # Only appended since: keep every part but the last, and make the rest of the current turn.
            segments = made.following(timeline, current.start, len(made.parts) - 1)
            self._add_units(segments, "current_turn", blocks, current, made.last_start, self._parts)
            self._segments = segments
            return segments
        if (
            made is not None
            and extendable
            and len(layouts) >= 2
            and layouts[-2].start == made.current_start
            and layouts[-2].turn_id not in pruned_turns
            and len(self._parts) <= 2 * len(made.parts) + _PART_CACHE_SLACK
        ):
            # A new turn began after the one rendered last: that one becomes history (its parts are
            # made again in that section), the new one is the current turn; nothing before changes.
            previous = layouts[-2]
            segments = made.following(timeline, current.start, made.current_first)
            self._add_units(segments, "history", blocks, previous, previous.start, self._parts)
            segments.current_first = len(segments.parts)
            self._add_units(segments, "current_turn", blocks, current, current.start, self._parts)
            self._segments = segments
            return segments
        # Anything else (a first render, a changed timeline, other pruning, a part cache grown with
        # parts no render uses any more): make every part, and keep only those in the cache.
        fresh: _PartCache = {}
        segments = _Segments(timeline, timeline.revision, start, pruned_turns, current.start, [], [], start)
        history = len(layouts) - 1  # every turn but the current one; the current one is never pruned
        pruned = {number for number in range(history) if layouts[number].turn_id in pruned_turns}
        last_card = max(pruned, default=-1)  # the pruning notice follows the last card
        for number, layout in enumerate(layouts):
            section: PromptSection = "history" if number < history else "current_turn"
            if number == history:
                segments.current_first = len(segments.parts)
            if number in pruned:
                segments.add(layout.end, self._part(section, blocks[layout.start : layout.end], fresh, card=True))
                if number == last_card:
                    segments.add(layout.end, _PRUNING_NOTICE_PART)
                continue
            self._add_units(segments, section, blocks, layout, layout.start, fresh)
        self._parts = fresh
        self._segments = segments
        return segments

    def render(
        self,
        timeline: Timeline,
        *,
        system: str,
        sources: SourcesPool,
        announce: AnnounceState,
        offset: int = DEFAULT_PRE_TAIL_OFFSET,
        source_snippet_chars: int = 160,
        pruned_turns: frozenset[str] = frozenset(),
    ) -> RenderedPrompt:
        """Render ``timeline`` for one round.

        :param system: the stable system message (protocol, instructions, tool catalog, skills).
        :param sources: the conversation's sources pool, rendered after the last checkpoint.
        :param announce: this round's ANNOUNCE state; the timeline's announced blocks follow it.
        :param offset: rounds between the pre-tail and the tail checkpoint.
        :param pruned_turns: turns to render as compact cards (see :func:`berth.runtime.pruning.plan_pruning`);
            the current turn is never pruned.
        """
        start = timeline.latest_summary_index or 0
        layouts = timeline.turn_layouts(start)
        checkpoints = plan_checkpoints(timeline, start=start, offset=offset)
        parts = [self._system_part(system)]
        characters = len(system)
        if layouts:
            segments = self._timeline_segments(timeline, layouts, start, pruned_turns)
            # A checkpoint goes on the last part ending at its position (after the pruning notice); one
            # that ends inside a pruned card cannot be placed and is left out.
            placed: list[CacheCheckpoint] = []
            marked: dict[tuple[int, CheckpointKind], tuple[PromptPart, PromptPart]] = {}
            parts.extend(segments.parts)
            characters += segments.characters
            for checkpoint in checkpoints:
                index = bisect_right(segments.ends, checkpoint.end) - 1
                if index >= 0 and segments.ends[index] == checkpoint.end:
                    placed.append(checkpoint)
                    parts[1 + index] = self._marked_part(parts[1 + index], checkpoint.kind, marked)
            self._marked = marked
            checkpoints = tuple(placed)
        else:
            checkpoints = ()
        listed = segments.history_listed() if layouts else frozenset()
        parts.append(self._sources_part(sources.rendered(snippet_chars=source_snippet_chars, listed_above=listed)))
        parts.append(PromptPart(section="announce", text=render_announce(announce, timeline.announced)))

        assert 1 + len(checkpoints) <= MAX_CACHE_BREAKPOINTS  # the system message's and the placed ones
        characters += sum(len(part.text) for part in parts[-2:]) + len(BLOCK_SEPARATOR) * (len(parts) - 1)
        # Built from parts this method made: constructed without validating every part again.
        messages = (
            unvalidated(PromptMessage, {"role": "system", "parts": tuple(parts[:1])}),
            unvalidated(PromptMessage, {"role": "user", "parts": tuple(parts[1:])}),
        )
        return unvalidated(
            RenderedPrompt, {"messages": messages, "checkpoints": checkpoints, "start": start, "characters": characters}
        )


def render_timeline(
    timeline: Timeline,
    *,
    system: str,
    sources: SourcesPool,
    announce: AnnounceState,
    offset: int = DEFAULT_PRE_TAIL_OFFSET,
    pruned_turns: frozenset[str] = frozenset(),
) -> RenderedPrompt:
    """Render ``timeline`` once (see :meth:`TimelineRenderer.render`, which also caches block texts)."""
    return TimelineRenderer().render(
        timeline, system=system, sources=sources, announce=announce, offset=offset, pruned_turns=pruned_turns
    )
