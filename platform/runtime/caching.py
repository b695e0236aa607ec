"""Where prompt-cache checkpoints go, and which part of the timeline may still change.

A rendered prompt carries at most :data:`MAX_CACHE_BREAKPOINTS` breakpoints: the system message plus up
to three on the timeline, each at the end of a block range:

1. ``previous_turn``: the end of the turn before the current one;
2. ``pre_tail``: the end of the complete round ``offset`` rounds before the last complete one (only
   when the current turn has that many rounds);
3. ``tail``: the end of the last complete round of the current turn.

Checkpoints sit only at round ends, so none falls inside a multi-block tool result. Everything after
``pre_tail`` (or, without one, after ``previous_turn``) is the *editable tail*: the only place
``react.hide`` may change, so the prefix up to the pre-tail checkpoint stays cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from berth.runtime.timeline import Timeline, TurnLayout

__all__ = [
    "DEFAULT_PRE_TAIL_OFFSET",
    "MAX_CACHE_BREAKPOINTS",
    "CacheCheckpoint",
    "CheckpointKind",
    "editable_tail_start",
    "plan_checkpoints",
]

CheckpointKind: TypeAlias = Literal["system", "previous_turn", "pre_tail", "tail"]

MAX_CACHE_BREAKPOINTS: Final = 4
"""Most cache breakpoints one request may carry (Anthropic's limit), the system message included."""
DEFAULT_PRE_TAIL_OFFSET: Final = 2
"""How many rounds before the last the pre-tail checkpoint sits by default."""


@dataclass(frozen=True, slots=True)
class CacheCheckpoint:
    """A timeline checkpoint: the cached prefix ends right after block ``end - 1``."""

    kind: CheckpointKind
    end: int


def _complete_prefix_ends(layout: TurnLayout) -> list[int]:
    """Return the end index of each round of the turn, up to its first incomplete round."""
    ends: list[int] = []
    for round_ in layout.rounds:
        if not round_.complete:
            break
        ends.append(round_.end)
    return ends


def plan_checkpoints(
    timeline: Timeline, *, start: int = 0, offset: int = DEFAULT_PRE_TAIL_OFFSET
) -> tuple[CacheCheckpoint, ...]:
    """Return the timeline checkpoints for a render of ``timeline`` from block ``start`` on.

    :param start: the first rendered block (the latest compaction summary, or 0).
    :param offset: rounds between the pre-tail and the tail checkpoint; 0 disables the pre-tail one.
    :returns: at most three checkpoints, ordered by position, at distinct positions.
    """
    if offset < 0:
        raise ValueError("offset must be >= 0")
    layouts = timeline.turn_layouts(start)
    if not layouts:
        return ()
    current = layouts[-1]
    checkpoints: list[CacheCheckpoint] = []
    if current.start > start:
        checkpoints.append(CacheCheckpoint(kind="previous_turn", end=current.start))
    ends = _complete_prefix_ends(current)
    if offset and len(ends) > offset:
        checkpoints.append(CacheCheckpoint(kind="pre_tail", end=ends[-1 - offset]))
    if ends:
        checkpoints.append(CacheCheckpoint(kind="tail", end=ends[-1]))
    return tuple(checkpoints)


def editable_tail_start(timeline: Timeline, *, start: int = 0, offset: int = DEFAULT_PRE_TAIL_OFFSET) -> int:
    """Return the first block index ``react.hide`` may change.

    That is the end of the pre-tail checkpoint, else of the previous-turn checkpoint, else ``start``:
    the blocks before it are in a prefix that stays cached across the next rounds.
    """
    stable = [cp.end for cp in plan_checkpoints(timeline, start=start, offset=offset) if cp.kind != "tail"]
    return max(stable, default=start)
