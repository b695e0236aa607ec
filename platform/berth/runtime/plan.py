"""Plans: lineages of ``react.plan`` snapshot blocks the model manages with ``react.plan``.

Every change to a plan appends a new snapshot block (``ar:<turn>.react.plan.<plan_id>``) plus a short
``react.plan.ack``; nothing is edited in place. ``ar:plan.latest:<plan_id>`` resolves to a lineage's
newest snapshot. The *current* plan is the plan of the newest snapshot, if that snapshot is open; the
model reports step progress with marker lines in its notes (``✓ [2]`` done, ``✗ [2]`` failed,
``… [2]`` in progress, ``□ [2]`` pending), which update the current plan only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Final, Literal, Self, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from berth.runtime.blocks import Block, BlockType, UtcTimestamp
from berth.runtime.paths import PlanAliasPath, RecordPath
from berth.runtime.timeline import Timeline

__all__ = [
    "STEP_MARKERS",
    "PlanBook",
    "PlanCommand",
    "PlanError",
    "PlanSnapshot",
    "PlanStatus",
    "PlanStep",
    "StepStatus",
    "apply_plan_command",
    "apply_step_markers",
    "parse_step_markers",
]

StepStatus: TypeAlias = Literal["pending", "in_progress", "done", "failed"]
PlanStatus: TypeAlias = Literal["open", "closed", "superseded", "complete"]
PlanMode: TypeAlias = Literal["new", "replace", "activate", "close"]

STEP_MARKERS: Final[Mapping[StepStatus, str]] = {
    "done": "✓",
    "failed": "✗",
    "in_progress": "…",
    "pending": "□",
}
"""The marker the model writes (and ANNOUNCE shows) for each step status."""
_STATUS_BY_MARKER: Final[Mapping[str, StepStatus]] = {marker: status for status, marker in STEP_MARKERS.items()}
_MARKER_LINE: Final = re.compile(r"^\s*(?:[-*]\s*)?([✓✗…□])\s*\[(\d{1,4})\]", re.MULTILINE)
DEFAULT_OPEN_PLANS_SHOWN: Final = 4


class PlanError(Exception):
    """A ``react.plan`` request that cannot be carried out, with a stable ``code``."""

    def __init__(self, code: Literal["plan_not_found", "plan_not_open", "plan_steps_missing"], message: str):
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


class PlanStep(BaseModel):
    """One numbered step of a plan."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    n: int = Field(ge=1)
    label: str
    status: StepStatus = "pending"


class PlanSnapshot(BaseModel):
    """The state of a plan lineage at one moment; stored as the ``data`` of a ``react.plan`` block."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    plan_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,128}$")
    steps: tuple[PlanStep, ...]
    status: PlanStatus = "open"
    origin_turn_id: str
    last_turn_id: str
    closed_ts: UtcTimestamp | None = None
    superseded_ts: UtcTimestamp | None = None
    superseded_by: str | None = None

    @model_validator(mode="after")
    def _numbered_in_order(self) -> Self:
        if [step.n for step in self.steps] != list(range(1, len(self.steps) + 1)):
            raise ValueError("plan steps are numbered 1, 2, 3, … in order")
        return self

    @property
    def is_open(self) -> bool:
        """Whether the plan still appears in ANNOUNCE (not closed, superseded or complete)."""
        return self.status == "open"

    def with_step_statuses(self, updates: Mapping[int, StepStatus], *, turn_id: str) -> PlanSnapshot:
        """Return the snapshot after ``updates`` (step number → status); unknown step numbers are ignored.

        A plan whose every step is done or failed becomes ``complete``.
        """
        steps = tuple(
            step.model_copy(update={"status": updates[step.n]}) if step.n in updates else step for step in self.steps
        )
        finished = bool(steps) and all(step.status in ("done", "failed") for step in steps)
        return self.model_copy(
            update={"steps": steps, "last_turn_id": turn_id, "status": "complete" if finished else self.status}
        )

    def render(self, *, current: bool) -> str:
        """Render the plan for ANNOUNCE: its id, then one marker line per step."""
        head = f"plan_id={self.plan_id}" + (" (current)" if current else "")
        lines = [head] + [f"  {STEP_MARKERS[step.status]} [{step.n}] {step.label}" for step in self.steps]
        return "\n".join(lines)


class PlanBook:
    """The plans of a conversation, read from its ``react.plan`` blocks (newest snapshot wins)."""

    def __init__(self, latest: Mapping[str, tuple[PlanSnapshot, Block]], current_plan_id: str | None) -> None:
        self._latest = dict(latest)
        self.current_plan_id = current_plan_id

    @classmethod
    def from_blocks(cls, blocks: Iterable[Block]) -> PlanBook:
        """Collect the newest snapshot of every plan lineage from ``blocks`` (timeline order)."""
        return cls({}, None).extended(blocks)

    def extended(self, blocks: Iterable[Block]) -> PlanBook:
        """Return the book with ``blocks``, which follow every block read so far, read too (this one is unchanged)."""
        latest = dict(self._latest)
        newest: PlanSnapshot | None = None
        for block in blocks:
            if block.type != BlockType.REACT_PLAN:
                continue
            try:
                snapshot = PlanSnapshot.model_validate(block.data)
            except ValidationError:
                continue  # a damaged snapshot is skipped, not fatal; the lineage keeps its previous one
            latest.pop(snapshot.plan_id, None)  # re-insert: dict order is "most recently updated last"
            latest[snapshot.plan_id] = (snapshot, block)
            newest = snapshot
        if newest is None:
            return PlanBook(latest, self.current_plan_id)
        return PlanBook(latest, newest.plan_id if newest.is_open else None)

    def get(self, plan_id: str) -> PlanSnapshot | None:
        """Return the newest snapshot of ``plan_id``, or ``None``."""
        entry = self._latest.get(plan_id)
        return entry[0] if entry else None

    def resolve(self, alias: PlanAliasPath) -> Block | None:
        """Return the block ``ar:plan.latest:<plan_id>`` stands for, or ``None``."""
        entry = self._latest.get(alias.plan_id)
        return entry[1] if entry else None

    @property
    def current(self) -> PlanSnapshot | None:
        """The current plan, which ANNOUNCE re-shows every round and step markers update."""
        return self.get(self.current_plan_id) if self.current_plan_id else None

    def open_plans(self, limit: int = DEFAULT_OPEN_PLANS_SHOWN) -> tuple[PlanSnapshot, ...]:
        """Return up to ``limit`` open plans, most recently updated first."""
        found = [snapshot for snapshot, _ in reversed(self._latest.values()) if snapshot.is_open]
        return tuple(found[:limit])


class PlanCommand(BaseModel):
    """The parameters of ``react.plan``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: PlanMode
    plan_id: str | None = Field(default=None, description="the plan to replace, activate or close")
    steps: tuple[str, ...] = Field(default=(), description="step labels for new and replace")


def parse_step_markers(notes: str) -> dict[int, StepStatus]:
    """Parse ``✓ [n]``/``✗ [n]``/``… [n]``/``□ [n]`` lines of the model's notes; the last mark of a step wins."""
    return {int(number): _STATUS_BY_MARKER[marker] for marker, number in _MARKER_LINE.findall(notes)}


def _snapshot_block(snapshot: PlanSnapshot, *, turn_id: str, now: datetime, call_id: str | None) -> Block:
    return Block(
        type=BlockType.REACT_PLAN,
        path=str(RecordPath(turn_id, f"react.plan.{snapshot.plan_id}")),
        turn_id=turn_id,
        ts=now,
        author="runtime",
        mime="application/json",
        data=snapshot.model_dump(mode="json"),
        call_id=call_id,
    )


def _ack_block(text: str, plan_id: str, *, turn_id: str, now: datetime, call_id: str | None) -> Block:
    return Block(
        type=BlockType.REACT_PLAN_ACK,
        path=str(RecordPath(turn_id, f"react.plan.ack.{plan_id}")),
        turn_id=turn_id,
        ts=now,
        author="runtime",
        text=text,
        call_id=call_id,
    )


def _require(book: PlanBook, plan_id: str | None) -> PlanSnapshot:
    snapshot = book.get(plan_id) if plan_id else book.current
    if snapshot is None:
        raise PlanError("plan_not_found", f"no plan {plan_id!r}; ANNOUNCE lists the open plans")
    if not snapshot.is_open:
        raise PlanError("plan_not_open", f"plan {snapshot.plan_id!r} is {snapshot.status}; start a new one")
    return snapshot


def _new_snapshot(steps: Sequence[str], plan_id: str, turn_id: str) -> PlanSnapshot:
    if not steps:
        raise PlanError("plan_steps_missing", "give the plan at least one step")
    return PlanSnapshot(
        plan_id=plan_id,
        steps=tuple(PlanStep(n=i, label=label) for i, label in enumerate(steps, start=1)),
        origin_turn_id=turn_id,
        last_turn_id=turn_id,
    )


def apply_plan_command(
    book: PlanBook,
    command: PlanCommand,
    *,
    turn_id: str,
    now: datetime,
    new_plan_id: str,
    call_id: str | None = None,
) -> tuple[Block, ...]:
    """Carry out ``react.plan`` and return the blocks to contribute (snapshots, then an ack).

    ``new`` starts a lineage (id ``new_plan_id``); ``replace`` supersedes ``plan_id`` (default: the
    current plan) with a new lineage; ``activate`` makes an open plan current again (same id);
    ``close`` ends a plan without replacement.

    :raises PlanError: ``plan_not_found``, ``plan_not_open`` or ``plan_steps_missing``.
    """
    blocks: list[Block] = []
    if command.mode == "new":
        created = _new_snapshot(command.steps, new_plan_id, turn_id)
        blocks.append(_snapshot_block(created, turn_id=turn_id, now=now, call_id=call_id))
        ack = f"plan {new_plan_id} created with {len(created.steps)} steps; it is the current plan"
        plan_id = new_plan_id
    elif command.mode == "replace":
        old = _require(book, command.plan_id)
        created = _new_snapshot(command.steps, new_plan_id, turn_id)
        retired = old.model_copy(
            update={"status": "superseded", "superseded_ts": now, "superseded_by": new_plan_id, "last_turn_id": turn_id}
        )
        blocks.append(_snapshot_block(retired, turn_id=turn_id, now=now, call_id=call_id))
        blocks.append(_snapshot_block(created, turn_id=turn_id, now=now, call_id=call_id))
        ack = f"plan {old.plan_id} superseded by plan {new_plan_id}, now the current plan"
        plan_id = new_plan_id
    elif command.mode == "activate":
        target = _require(book, command.plan_id)
        touched = target.model_copy(update={"last_turn_id": turn_id})
        blocks.append(_snapshot_block(touched, turn_id=turn_id, now=now, call_id=call_id))
        ack = f"plan {target.plan_id} is the current plan again"
        plan_id = target.plan_id
    else:
        target = _require(book, command.plan_id)
        closed = target.model_copy(update={"status": "closed", "closed_ts": now, "last_turn_id": turn_id})
        blocks.append(_snapshot_block(closed, turn_id=turn_id, now=now, call_id=call_id))
        ack = f"plan {target.plan_id} closed"
        plan_id = target.plan_id
    blocks.append(_ack_block(ack, plan_id, turn_id=turn_id, now=now, call_id=call_id))
    return tuple(blocks)


def apply_step_markers(
    book: PlanBook, notes: str, *, turn_id: str, now: datetime, call_id: str | None = None
) -> tuple[Block, ...]:
    """Update the current plan from marker lines in ``notes``; return the snapshot and ack, or nothing.

    Nothing is returned when there is no current plan, no marker, or no status actually changes.
    """
    current = book.current
    updates = parse_step_markers(notes)
    if current is None or not updates:
        return ()
    updated = current.with_step_statuses(updates, turn_id=turn_id)
    if updated.steps == current.steps:
        return ()
    changed = ", ".join(
        f"{STEP_MARKERS[new.status]} [{new.n}]"
        for old, new in zip(current.steps, updated.steps, strict=True)
        if old.status != new.status
    )
    ack = f"plan {current.plan_id}: {changed}" + (" — all steps finished" if updated.status == "complete" else "")
    return (
        _snapshot_block(updated, turn_id=turn_id, now=now, call_id=call_id),
        _ack_block(ack, current.plan_id, turn_id=turn_id, now=now, call_id=call_id),
    )


class PlanBookCache:
    """The plan book of a timeline, kept current by reading only the blocks appended since the last read.

    A changed timeline (another object, or blocks swapped: hide, compaction) is read again whole.
    Kept with a resident conversation, so a turn does not re-read every earlier turn's plans.
    """

    def __init__(self) -> None:
        self._entry: tuple[Timeline, int, int, PlanBook] | None = None

    def book(self, timeline: Timeline) -> PlanBook:
        """Return the plans as ``timeline`` records them now."""
        blocks, revision = timeline.blocks, timeline.revision
        cached = self._entry
        if cached is not None and cached[0] is timeline and cached[1] == revision and cached[2] <= len(blocks):
            book = cached[3] if cached[2] == len(blocks) else cached[3].extended(blocks[cached[2] :])
        else:
            book = PlanBook.from_blocks(blocks)
        self._entry = (timeline, revision, len(blocks), book)
        return book
