"""Compaction: the hard ceiling that keeps a conversation inside the model's context window.

When the estimated input exceeds ``threshold * context_budget_tokens``, the oldest *whole* turns before
the current one are summarized by a ``summarizer`` (the ``summarizer`` model role, passed in as an async
callable) into one ``conv.range.summary`` block. The block lists the turn ids it covers and the logical
paths it dropped from the prompt, and replaces those turns at the head of the timeline, so the
persisted payload starts at the summary. Nothing is deleted from the turn logs: the dropped paths stay
readable through ``react.read`` and ``react.memsearch``.

Turns are cut only at turn boundaries, so a tool call is never separated from its result. A previous
summary is folded into the new one (its covered turns and dropped paths carry over).

A compaction that fails (the summarizer raises) or does not shrink the input is retried once with a
tighter summary budget; if the retry fails too, nothing is applied and the outcome says why. A provider
"context too long" error forces one compaction and one retry of the call
(:func:`call_with_overflow_retry`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal, Protocol, TypeAlias, TypeVar

from berth.runtime.blocks import Block, BlockType
from berth.runtime.paths import RangeSummaryPath
from berth.runtime.render import BLOCK_SEPARATOR, RenderedPrompt, render_block, visible_start
from berth.runtime.sources import SOURCE_LINE, trailing_listing
from berth.runtime.timeline import Timeline, TurnLayout

__all__ = [
    "DEFAULT_COMPACTION_THRESHOLD",
    "DEFAULT_MAX_SUMMARY_TOKENS",
    "DEFAULT_TARGET_RATIO",
    "CompactionOutcome",
    "CompactionStatus",
    "ContextOverflowError",
    "Summarizer",
    "SummaryRequest",
    "TimelineEstimator",
    "call_with_overflow_retry",
    "compact_timeline",
    "estimate_prompt_tokens",
    "estimate_timeline_tokens",
    "estimate_tokens",
    "needs_compaction",
]

DEFAULT_COMPACTION_THRESHOLD: Final = 0.9
"""Share of the context budget above which the input is compacted (SPEC §4.6)."""
DEFAULT_TARGET_RATIO: Final = 0.6
"""Share of the context budget a compaction aims to bring the input under, so it is not needed every round."""
DEFAULT_MAX_SUMMARY_TOKENS: Final = 1_500
"""Token budget the summarizer is asked to respect on the first attempt (halved on the retry)."""
MAX_LISTED_PATHS: Final = 80
"""How many dropped paths the summary text lists; all of them are kept in ``meta['dropped_paths']``."""

CompactionStatus: TypeAlias = Literal[
    "not_needed", "compacted", "nothing_to_compact", "not_shrunk", "summarizer_failed"
]
TimelineEstimator: TypeAlias = Callable[[Timeline], int]
"""Estimates the input tokens of the prompt a timeline renders to."""

_T = TypeVar("_T")


def estimate_tokens(text: str) -> int:
    """Estimate the tokens of ``text``: about four characters per token, rounded up."""
    return _tokens_of_length(len(text))


def _tokens_of_length(characters: int) -> int:
    return math.ceil(characters / 4)


def estimate_timeline_tokens(timeline: Timeline) -> int:
    """Estimate the tokens of the timeline part of the prompt: the rendered blocks from the latest summary on."""
    blocks = timeline.blocks
    start = visible_start(blocks)
    return estimate_tokens(BLOCK_SEPARATOR.join(render_block(block) for block in blocks[start:]))


def estimate_prompt_tokens(prompt: RenderedPrompt) -> int:
    """Estimate the input tokens of a whole rendered prompt (system, timeline, sources and announce)."""
    if prompt.characters is not None:  # counted by the renderer as it went
        return _tokens_of_length(prompt.characters)
    parts = prompt.parts()
    # The length of the parts joined by the separator, without building that text every round.
    length = sum(len(part.text) for part in parts) + len(BLOCK_SEPARATOR) * max(len(parts) - 1, 0)
    return _tokens_of_length(length)


def needs_compaction(estimated_tokens: int, *, context_budget_tokens: int, threshold: float) -> bool:
    """Whether an input of ``estimated_tokens`` exceeds ``threshold * context_budget_tokens``."""
    return estimated_tokens > threshold * context_budget_tokens


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What the summarizer is asked to condense.

    :ivar turn_ids: the turns being compacted, oldest first (not counting those of ``previous_summary``).
    :ivar transcript: those turns rendered as the model saw them.
    :ivar previous_summary: the text of the summary being folded in, if the range starts at one.
    :ivar max_tokens: the length the summary must stay under.
    :ivar attempt: 1, or 2 on the retry after a failed or non-shrinking first attempt.
    """

    turn_ids: tuple[str, ...]
    transcript: str
    previous_summary: str | None
    max_tokens: int
    attempt: int


class Summarizer(Protocol):
    """The ``summarizer`` model role: turns a :class:`SummaryRequest` into summary text."""

    def __call__(self, request: SummaryRequest, /) -> Awaitable[str]:
        """Return the summary of ``request.transcript`` (and ``request.previous_summary``)."""
        ...


@dataclass(frozen=True, slots=True)
class CompactionOutcome:
    """What a compaction did, for the loop to log, stream (``chat.compaction``) and announce.

    ``applied`` is true only for ``compacted``; in every other status the timeline is unchanged.
    """

    status: CompactionStatus
    tokens_before: int
    tokens_after: int
    attempts: int = 0
    covered_turn_ids: tuple[str, ...] = ()
    summary: Block | None = None
    errors: tuple[str, ...] = field(default=())

    @property
    def applied(self) -> bool:
        """Whether the timeline now starts at a new summary."""
        return self.status == "compacted"

    @property
    def message(self) -> str:
        """One line saying what happened, fit for a notice or a log record."""
        if self.status == "compacted":
            return (
                f"compacted {len(self.covered_turn_ids)} turn(s) into a summary: "
                f"~{self.tokens_before} → ~{self.tokens_after} tokens"
            )
        if self.status == "not_needed":
            return f"no compaction needed (~{self.tokens_before} tokens)"
        if self.status == "nothing_to_compact":
            return f"~{self.tokens_before} tokens, but only the current turn is left and it is never compacted"
        detail = "; ".join(self.errors)
        return f"compaction not applied after {self.attempts} attempt(s) ({self.status}): {detail}"


class ContextOverflowError(Exception):
    """A model provider refused the request because the prompt is longer than its context window."""


@dataclass(frozen=True, slots=True)
class _Range:
    """The part of the timeline a compaction replaces."""

    end: int
    turns: tuple[TurnLayout, ...]
    previous: Block | None


def _previous_summary(blocks: Sequence[Block], start: int) -> Block | None:
    if start < len(blocks) and blocks[start].type == BlockType.CONV_RANGE_SUMMARY:
        return blocks[start]
    return None


def _turn_tokens(blocks: Sequence[Block], layout: TurnLayout) -> int:
    text = BLOCK_SEPARATOR.join(render_block(block) for block in blocks[layout.start : layout.end])
    return estimate_tokens(text) + estimate_tokens(BLOCK_SEPARATOR)


def _choose_range(
    timeline: Timeline, *, tokens_before: int, target_tokens: int, summary_allowance: int
) -> _Range | None:
    """Pick the fewest oldest whole turns whose replacement brings the estimate under ``target_tokens``."""
    blocks = timeline.blocks
    start = visible_start(blocks)
    previous = _previous_summary(blocks, start)
    layouts = timeline.turn_layouts(start + 1 if previous else start)
    candidates = layouts[:-1]  # the current turn is never compacted
    if not candidates:
        return None
    remaining = tokens_before
    chosen: list[TurnLayout] = []
    for layout in candidates:
        chosen.append(layout)
        remaining -= _turn_tokens(blocks, layout)
        if remaining + summary_allowance <= target_tokens:
            break
    return _Range(end=chosen[-1].end, turns=tuple(chosen), previous=previous)


def _meta_strings(block: Block | None, key: str) -> list[str]:
    if block is None:
        return []
    value = block.meta.get(key)
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _dropped_paths(blocks: Sequence[Block], chosen: _Range) -> list[str]:
    seen: dict[str, None] = dict.fromkeys(_meta_strings(chosen.previous, "dropped_paths"))
    for layout in chosen.turns:
        for block in blocks[layout.start : layout.end]:
            seen.setdefault(block.path, None)
    return list(seen)


SOURCES_HEADING: Final = "Sources of these turns (cite as [[S:n]]):"


def _summary_text(summary: str, covered: Sequence[str], dropped: Sequence[str], sources: Sequence[str]) -> str:
    listed = dropped[:MAX_LISTED_PATHS]
    more = len(dropped) - len(listed)
    lines = [
        f"[COMPACTED PRIOR CONVERSATION MEMORY] {len(covered)} turn(s): {', '.join(covered)}",
        summary.strip(),
        'Dropped from the prompt, not deleted — react.read(["<path>"]) re-opens any of these:',
        " ".join(listed),
    ]
    if more > 0:
        lines.append(f"(and {more} more; react.memsearch finds them by topic, turn or time)")
    if sources:
        lines += [SOURCES_HEADING, *sources]
    return "\n".join(lines)


def _source_lines(blocks: Sequence[Block], chosen: _Range) -> list[str]:
    """The source rows the compacted turns (and the summary they continue) list, one per SID, by SID: the
    summary keeps them in the cached history, so the SOURCES POOL rebuilt every round need not."""
    texts = [chosen.previous.text or ""] if chosen.previous is not None else []
    texts += [block.text or "" for layout in chosen.turns for block in blocks[layout.start : layout.end]]
    rows: dict[int, str] = {}
    for index, text in enumerate(texts):
        # the previous summary's own section, and each tool result's trailing listing (never a page's text)
        lines = text.partition(SOURCES_HEADING)[2].splitlines() if index == 0 and chosen.previous else None
        for line in lines if lines is not None else trailing_listing(text):
            found = SOURCE_LINE.fullmatch(line)
            if found is not None:
                rows.setdefault(int(found.group(1)), line)
    return [rows[sid] for sid in sorted(rows)]


def _covered_turn_ids(chosen: _Range) -> tuple[str, ...]:
    covered = [*_meta_strings(chosen.previous, "covered_turn_ids"), *(t.turn_id for t in chosen.turns)]
    return tuple(dict.fromkeys(covered))


def _summary_block(summary: str, chosen: _Range, blocks: Sequence[Block], now: datetime) -> Block:
    covered = _covered_turn_ids(chosen)
    dropped = _dropped_paths(blocks, chosen)
    last_turn = chosen.turns[-1].turn_id
    return Block(
        type=BlockType.CONV_RANGE_SUMMARY,
        path=str(RangeSummaryPath(turn_id=last_turn)),
        turn_id=last_turn,
        ts=now,
        author="runtime",
        text=_summary_text(summary, covered, dropped, _source_lines(blocks, chosen)),
        meta={"covered_turn_ids": list(covered), "dropped_paths": list(dropped)},
    )


def _request(timeline: Timeline, chosen: _Range, *, max_tokens: int, attempt: int) -> SummaryRequest:
    blocks = timeline.blocks
    transcript = BLOCK_SEPARATOR.join(
        render_block(block) for layout in chosen.turns for block in blocks[layout.start : layout.end]
    )
    return SummaryRequest(
        turn_ids=tuple(layout.turn_id for layout in chosen.turns),
        transcript=transcript,
        previous_summary=chosen.previous.text if chosen.previous else None,
        max_tokens=max_tokens,
        attempt=attempt,
    )


async def compact_timeline(
    timeline: Timeline,
    *,
    summarizer: Summarizer,
    context_budget_tokens: int,
    now: datetime,
    threshold: float = DEFAULT_COMPACTION_THRESHOLD,
    target_ratio: float = DEFAULT_TARGET_RATIO,
    max_summary_tokens: int = DEFAULT_MAX_SUMMARY_TOKENS,
    estimate: TimelineEstimator = estimate_timeline_tokens,
    force: bool = False,
) -> CompactionOutcome:
    """Compact the oldest whole turns of ``timeline`` into a ``conv.range.summary`` when it is too big.

    :param summarizer: the ``summarizer`` model role; called at most twice.
    :param context_budget_tokens: the model's input budget in tokens.
    :param now: the summary block's timestamp.
    :param threshold: compact when ``estimate(timeline) > threshold * context_budget_tokens``.
    :param target_ratio: how far under the budget the compaction aims (decides how many turns go).
    :param max_summary_tokens: the length the summarizer is asked to respect (halved on the retry).
    :param estimate: how the input is measured; the loop passes one that renders the full prompt.
    :param force: compact even under the threshold (after a provider "context too long" error).
    :returns: the outcome; on ``compacted`` the timeline now starts at the new summary, otherwise it
        is unchanged.
    """
    if context_budget_tokens <= 0:
        raise ValueError("context_budget_tokens must be positive")
    if not 0 < threshold <= 1 or not 0 < target_ratio <= 1:
        raise ValueError("threshold and target_ratio must be in (0, 1]")
    before = estimate(timeline)
    if not force and not needs_compaction(before, context_budget_tokens=context_budget_tokens, threshold=threshold):
        return CompactionOutcome(status="not_needed", tokens_before=before, tokens_after=before)
    chosen = _choose_range(
        timeline,
        tokens_before=before,
        target_tokens=int(target_ratio * context_budget_tokens),
        summary_allowance=max_summary_tokens,
    )
    if chosen is None:
        return CompactionOutcome(status="nothing_to_compact", tokens_before=before, tokens_after=before)

    errors: list[str] = []
    status: CompactionStatus = "summarizer_failed"
    for attempt in (1, 2):
        budget = max(max_summary_tokens // attempt, 1)
        try:
            text = await summarizer(_request(timeline, chosen, max_tokens=budget, attempt=attempt))
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a failing summarizer is reported, never fatal to the turn
            errors.append(f"attempt {attempt}: summarizer failed: {type(error).__name__}: {error}")
            status = "summarizer_failed"
            continue
        if not text.strip():
            errors.append(f"attempt {attempt}: the summarizer returned an empty summary")
            status = "summarizer_failed"
            continue
        summary = _summary_block(text, chosen, timeline.blocks, now)
        candidate = Timeline(timeline.blocks)
        candidate.replace_prefix(chosen.end, summary)
        after = estimate(candidate)
        if after < before:
            timeline.replace_prefix(chosen.end, summary)
            return CompactionOutcome(
                status="compacted",
                tokens_before=before,
                tokens_after=after,
                attempts=attempt,
                covered_turn_ids=_covered_turn_ids(chosen),
                summary=summary,
                errors=tuple(errors),
            )
        errors.append(f"attempt {attempt}: the summary did not shrink the input (~{before} → ~{after} tokens)")
        status = "not_shrunk"
    return CompactionOutcome(status=status, tokens_before=before, tokens_after=before, attempts=2, errors=tuple(errors))


async def call_with_overflow_retry(
    call: Callable[[], Awaitable[_T]],
    *,
    compact: Callable[[], Awaitable[CompactionOutcome]],
) -> _T:
    """Run ``call``; on :class:`ContextOverflowError` force one compaction and retry the call once.

    :param call: the model request (rendering inside it, so the retry sends the compacted prompt).
    :param compact: a forced compaction, e.g. ``compact_timeline(..., force=True)``.
    :raises ContextOverflowError: when the compaction could not be applied, or the retry overflows too.
    """
    try:
        return await call()
    except ContextOverflowError as overflow:
        outcome = await compact()
        if not outcome.applied:
            raise ContextOverflowError(f"{overflow}; {outcome.message}") from overflow
    return await call()
