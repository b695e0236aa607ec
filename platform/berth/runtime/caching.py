"""Where prompt-cache checkpoints go, and which part of the timeline may still change.

A provider serves a cached prefix only if it ends where an earlier request put a breakpoint (within
the cache's lifetime), and a request carries at most :data:`MAX_CACHE_BREAKPOINTS` breakpoints. So
every request should put one breakpoint where the previous request put its last one (to *read* that
prefix) and one at the end of what is now stable (to *write* the prefix the next request reads).

Besides the system message, a render carries at most three timeline checkpoints, each at a *stop*:
the end of a turn's head (header, prompt, attachments) or of one of its complete rounds, so none falls
inside a multi-block tool result.

1. ``previous_turn``: the end of the turn before the current one;
2. ``pre_tail``: the end of the complete round ``offset`` rounds before the last one (only when the
   current turn has more than ``offset`` complete rounds);
3. ``tail``: the last stop of the current turn: the end of its last complete round, or of its head
   while no round is complete.

In the first request of a turn, the previous turn's final answer sits between the previous request's
tail and ``previous_turn``, and no pre-tail exists yet, so a fourth one is free:

4. ``previous_turn_tail``: the previous turn's last stop before its end, where the previous turn's
   last request put its tail. That request's prefix is served, and only the final answer and the
   new head are read again.

Everything after ``pre_tail`` (or, without one, after ``previous_turn``) is the *editable tail*: the
only place ``react.hide`` may change, so the prefix up to the pre-tail checkpoint stays cached.
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
    "turn_stops",
]

CheckpointKind: TypeAlias = Literal["system", "previous_turn_tail", "previous_turn", "pre_tail", "tail"]

MAX_CACHE_BREAKPOINTS: Final = 4
"""Most cache breakpoints one request may carry (Anthropic's limit), the system message included."""
DEFAULT_PRE_TAIL_OFFSET: Final = 2
"""How many rounds before the tail the pre-tail checkpoint sits by default."""


@dataclass(frozen=True, slots=True)
class CacheCheckpoint:
    """A timeline checkpoint: the cached prefix ends right after block ``end - 1``."""

    kind: CheckpointKind
    end: int


def _complete_round_ends(layout: TurnLayout) -> tuple[int, ...]:
    """Return the end index of each round of the turn, up to its first incomplete round."""
    return layout.complete_ends


def turn_stops(layout: TurnLayout) -> tuple[int, ...]:
    """Return where a cached prefix may end inside one turn, in order.

    The stops are the end of the turn's head (when it has one) and the end of each round up to the
    first incomplete one. Nothing after a stop can change what comes before it, and no stop falls
    inside a round, so none splits a tool call from its result.
    """
    head = (layout.head_end,) if layout.head_end > layout.start else ()
    return (*head, *_complete_round_ends(layout))


def plan_checkpoints(
    timeline: Timeline, *, start: int = 0, offset: int = DEFAULT_PRE_TAIL_OFFSET
) -> tuple[CacheCheckpoint, ...]:
    """Return the timeline checkpoints for a render of ``timeline`` from block ``start`` on.

    :param start: the first rendered block (the latest compaction summary, or 0).
    :param offset: rounds between the pre-tail and the tail checkpoint; 0 disables the pre-tail one.
    :returns: at most three checkpoints (the system message is the fourth breakpoint), ordered by
        position, at distinct positions.
    """
    if offset < 0:
        raise ValueError("offset must be >= 0")
    layouts = timeline.turn_layouts(start)
    if not layouts:
        return ()
    global _last_plan
    last = _last_plan
    if last[0] is layouts and last[1] == start and last[2] == offset:
        return last[3]
    planned = _planned(layouts, start, offset)
    _last_plan = (layouts, start, offset, planned)
    return planned


_last_plan: tuple[tuple[TurnLayout, ...] | None, int, int, tuple[CacheCheckpoint, ...]] = (None, 0, 0, ())
"""The last plan made, with the layouts it was made from (a round plans for its render and again for
:func:`editable_tail_start`: the second time it is taken from here). The timeline keeps one layouts
tuple while it does not change, and the entry holds it, so a tuple seen here is the same timeline state."""


def _planned(layouts: tuple[TurnLayout, ...], start: int, offset: int) -> tuple[CacheCheckpoint, ...]:
    """The checkpoints of :func:`plan_checkpoints` for these turn layouts."""
    current = layouts[-1]
    checkpoints: list[CacheCheckpoint] = []
    stops = turn_stops(current)
    rounds = len(_complete_round_ends(current))
    if current.start > start:
        if rounds == 0:
            previous = layouts[-2]
            earlier = [stop for stop in turn_stops(previous) if stop < previous.end]
            if earlier:
                checkpoints.append(CacheCheckpoint(kind="previous_turn_tail", end=earlier[-1]))
        checkpoints.append(CacheCheckpoint(kind="previous_turn", end=current.start))
    if offset and rounds > offset:
        checkpoints.append(CacheCheckpoint(kind="pre_tail", end=stops[-1 - offset]))
    if stops:
        checkpoints.append(CacheCheckpoint(kind="tail", end=stops[-1]))
    return tuple(checkpoints)


def editable_tail_start(timeline: Timeline, *, start: int = 0, offset: int = DEFAULT_PRE_TAIL_OFFSET) -> int:
    """Return the first block index ``react.hide`` may change.

    That is the end of the pre-tail checkpoint, else of the previous-turn checkpoint, else ``start``:
    the blocks before it are in a prefix that stays cached across the next rounds.
    """
    stable = [cp.end for cp in plan_checkpoints(timeline, start=start, offset=offset) if cp.kind != "tail"]
    return max(stable, default=start)
