"""TTL pruning: once the provider's prompt cache has gone cold, older turns render as compact cards.

Nothing is deleted: a pruned turn keeps all its blocks on the timeline; only its rendering shrinks to
its working summary, or to one line per artifact with its logical path, and a ``system.message`` tells
the model to use ``react.read(path)`` to re-open anything. The set of pruned turns changes only when
the cache is cold (a cold cache is re-written anyway), so pruning never breaks a warm prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

from berth.runtime.blocks import Block, BlockType
from berth.runtime.timeline import Timeline

__all__ = [
    "DEFAULT_KEEP_RECENT_TURNS",
    "PRUNING_NOTICE",
    "cache_is_cold",
    "plan_pruning",
    "render_pruned_turn",
]

DEFAULT_KEEP_RECENT_TURNS: Final = 2
"""How many turns before the current one stay intact when older turns are pruned."""

PRUNING_NOTICE: Final = (
    "[system.message] Older turns are shown as compact cards to keep the context small. Nothing was "
    'deleted: react.read(["<logical path>"]) re-opens any path listed on a card.'
)
"""The text rendered after the pruned cards (fixed, so it never disturbs the cached prefix)."""

_CARD_SKIPPED: Final[frozenset[BlockType]] = frozenset({BlockType.TURN_HEADER})


def cache_is_cold(*, now: datetime, last_request_at: datetime | None, cache_ttl_seconds: int | None) -> bool:
    """Whether the provider cache written by the previous request has expired.

    Without a TTL (``None``) pruning is off and the cache is never considered cold; without a
    previous request there is nothing cached to keep warm, so the cache is cold.
    """
    if cache_ttl_seconds is None:
        return False
    if last_request_at is None:
        return True
    return now - last_request_at > timedelta(seconds=cache_ttl_seconds)


def plan_pruning(
    timeline: Timeline,
    *,
    now: datetime,
    last_request_at: datetime | None,
    cache_ttl_seconds: int | None,
    previously_pruned: frozenset[str] = frozenset(),
    keep_recent_turns: int = DEFAULT_KEEP_RECENT_TURNS,
) -> frozenset[str]:
    """Return the turn ids to render as cards this round.

    While the cache is warm the previous decision stands (same cards, same prefix). When it is cold,
    every turn except the current one and the ``keep_recent_turns`` before it is pruned.
    """
    if not cache_is_cold(now=now, last_request_at=last_request_at, cache_ttl_seconds=cache_ttl_seconds):
        return previously_pruned
    turns = timeline.turn_ids()
    keep = 1 + max(keep_recent_turns, 0)
    return frozenset(turns[:-keep]) if len(turns) > keep else frozenset()


def _first_line(text: str, limit: int = 100) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def render_pruned_turn(blocks: Sequence[Block]) -> str:
    """Render one turn's blocks as a compact card.

    With a working summary (``conv.working.summary``) the card is that summary and its path; without
    one it lists each block's type and logical path, with the first words of user and assistant text.
    """
    turn_id = blocks[0].turn_id if blocks else "?"
    compacted = [b for b in blocks if b.type == BlockType.CONV_RANGE_SUMMARY and b.text]
    if compacted:  # a compaction summary is already compact: pruning keeps it whole
        return f"[{compacted[-1].type}] {compacted[-1].path}\n{compacted[-1].text}"
    summaries = [b for b in blocks if b.type == BlockType.CONV_WORKING_SUMMARY and b.text]
    if summaries:
        summary = summaries[-1]
        return f"[TURN {turn_id} · pruned] working summary {summary.path}\n{summary.text}"
    lines = [f"[TURN {turn_id} · pruned]"]
    seen: set[str] = set()
    for block in blocks:
        if block.type in _CARD_SKIPPED or block.path in seen:
            continue
        seen.add(block.path)
        hint = ""
        if block.text and block.type in (BlockType.USER_PROMPT, BlockType.ASSISTANT_COMPLETION):
            hint = f" — {_first_line(block.text)}"
        lines.append(f"- {block.type} {block.path}{hint}")
    return "\n".join(lines)
