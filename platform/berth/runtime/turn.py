"""The state of one running turn that the loop and the ``react.*`` tools share."""

from __future__ import annotations

import itertools
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from berth.bundle.skills import Skill
from berth.config.models.assembly import ModelRef
from berth.models.protocol import Usage
from berth.runtime.blocks import Block
from berth.runtime.memory import MemorySearch
from berth.runtime.plan import PlanBook, PlanBookCache
from berth.runtime.sources import SourcesPool
from berth.runtime.timeline import Timeline
from berth.runtime.workspace import Workspace
from berth.storage.conversations import ArtifactWrite
from berth.storage.scope import ConversationScope

if TYPE_CHECKING:
    from berth.knowledge.space import SpaceIndex


class WideningTools(Protocol):
    """What a running tool may ask of its turn's tools (:class:`~berth.runtime.toolbox.ToolBox` is the one the loop
    sets): admitting withheld tools for the rest of the turn."""

    def widen(self, patterns: Sequence[str]) -> list[Any]:
        """Admit the withheld tools matching ``patterns``; return those newly added."""
        ...


@dataclass(frozen=True)
class BundleView:
    """What the turn needs from the bundle's generation: skills and knowledge spaces."""

    bundle_id: str
    skills: Mapping[str, Skill] = field(default_factory=dict)
    knowledge: Mapping[str, SpaceIndex] = field(default_factory=dict)
    """The indexes of the bundle's knowledge spaces, by name."""

    @property
    def knowledge_spaces(self) -> tuple[str, ...]:
        """The names of the bundle's knowledge spaces, sorted."""
        return tuple(sorted(self.knowledge))


_numbered_call = re.compile(r"\.c(\d+)(?=\.|$)")
"""A call number in a logical path: ``tc:<turn>.c3.call``, ``ar:<turn>.react.thinking.c3``."""
_plan_name = re.compile(r"react\.plan\.(?:ack\.)?([^.]+)$")
"""A plan id at the end of a plan block's path: ``ar:<turn>.react.plan.<plan_id>``."""


@dataclass
class TurnState:
    """Mutable state of the running turn (only the loop's task touches it)."""

    scope: ConversationScope
    turn_id: str
    bundle: BundleView
    timeline: Timeline
    sources: SourcesPool
    workspace: Workspace
    clock: Callable[[], datetime]
    memory: MemorySearch | None = None
    full_results: dict[str, str] = field(default_factory=dict)
    """The whole text of each capped tool result, by its ``tc:`` path (the timeline holds a preview)."""
    stored_results: set[str] = field(default_factory=set)
    """The ``tc:`` paths of :attr:`full_results` already stored among the turn's files (the commit skips them)."""
    pulled: dict[str, bytes] = field(default_factory=dict)
    editable_from: int = 0
    visible_from: int = 0
    pruned_turns: frozenset[str] = frozenset()
    notices: list[str] = field(default_factory=list)
    current_call_id: str | None = None
    current_code: str | None = None
    """The ``code`` channel of the decision whose tool call runs now (``exec.python`` runs it)."""
    pending_blocks: list[Block] = field(default_factory=list)
    model: ModelRef | None = None
    """The turn's model (what it reads besides text: ``react.read`` shows it an image again if it reads images)."""
    toolbox: WideningTools | None = None
    """The turn's tools (a skill that is read may widen them for the rest of the turn)."""
    media_shelf: dict[str, bytes] = field(default_factory=dict)
    """The renderer's shelf of image and PDF bytes by ``fi:`` path (:mod:`berth.runtime.media`)."""
    model_copies: dict[str, bytes] = field(default_factory=dict)
    """The downscaled copies of images shown to the model by their ``fi:`` paths (``attachments/downscaled/…``),
    stored with the turn's commit."""
    reopened_media: list[tuple[str, str]] = field(default_factory=list)
    """``(fi: path, mime)`` of an image the running tool call shows again (its result block carries it)."""
    store_files: Callable[[tuple[ArtifactWrite, ...]], Awaitable[None]] | None = None
    """Stores files the turn produced before they are announced (the loop's recorder, once the turn has begun)."""
    compaction_usage: Usage = field(default_factory=Usage)
    """What compaction's summaries cost this turn (added to the rounds' usage when the turn ends)."""
    streamed_answer: list[tuple[int, str]] = field(default_factory=list)
    """``(instance, raw text)`` of the answer the model call in progress has streamed so far: what the user saw
    of it, kept as the turn's partial answer when the turn is cancelled before that call completes."""
    _call_numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _plan_numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    plans: PlanBookCache = field(default_factory=PlanBookCache, repr=False)
    """The plan book, read incrementally (a resident conversation hands its cache to the next turn)."""

    def now(self) -> datetime:
        """The current UTC time (injectable for tests)."""
        return self.clock()

    def continue_numbering(self, logged: Iterable[Block]) -> None:
        """Number the next calls and plans after those of ``logged``: the rounds a resumed turn's log holds.

        A turn taken over from a worker that died goes on with ``c4`` after its logged ``c3``, never ``c1`` again,
        so no logical path (``tc:<turn>.c1.call``, ``ar:<turn>.react.thinking.c1``) is stored twice and a tool's
        idempotency key (turn id + call id) names one call.
        """
        plan_prefix = f"{self.turn_id.removeprefix('turn_')}p"
        calls = plans = 0
        for block in logged:
            if block.turn_id != self.turn_id:
                continue
            if block.call_id is not None:
                calls = max(calls, int(block.call_id.removeprefix("c")))
            for number in _numbered_call.findall(block.path):
                calls = max(calls, int(number))
            for name in _plan_name.findall(block.path):
                if name.startswith(plan_prefix) and name[len(plan_prefix) :].isdigit():
                    plans = max(plans, int(name[len(plan_prefix) :]))
        self._call_numbers = itertools.count(calls + 1)
        self._plan_numbers = itertools.count(plans + 1)

    def next_call_id(self) -> str:
        """A call id unique within the turn (``c1``, ``c2``, …)."""
        return f"c{next(self._call_numbers)}"

    def next_plan_id(self) -> str:
        """A plan id unique within the conversation (turn id + counter)."""
        return f"{self.turn_id.removeprefix('turn_')}p{next(self._plan_numbers)}"

    def partial_answer(self) -> str:
        """The answer streamed so far by the latest model call (its instances separated by a blank line)."""
        parts: list[str] = []
        instance: int | None = None
        for number, text in self.streamed_answer:
            if instance is not None and number != instance:
                parts.append("\n\n")
            parts.append(text)
            instance = number
        return "".join(parts)

    def plan_book(self) -> PlanBook:
        """The plans as the timeline records them now."""
        return self.plans.book(self.timeline)
