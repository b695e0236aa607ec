"""Builds real timelines and renders them with the real renderer, for the model-provider tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from berth.runtime.announce import AnnounceState
from berth.runtime.blocks import Block, BlockType
from berth.runtime.render import RenderedPrompt, TimelineRenderer
from berth.runtime.sources import SourcesPool
from berth.runtime.timeline import Timeline

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
SYSTEM = "You are a careful assistant. Answer in channels.\n[TOOLS]\nreact.read — read a logical path\nweb.search"


class Conversation:
    """A timeline grown the way the loop grows it: turns of tool rounds, each turn closed by an answer."""

    def __init__(self, *, result_text: str = "ok") -> None:
        self.timeline = Timeline()
        self.renderer = TimelineRenderer()
        self.result_text = result_text
        self.turn_id = ""
        self._clock = T0
        self._iteration = 0

    def _block(self, type_: BlockType, path: str, **fields: object) -> Block:
        self._clock += timedelta(seconds=1)
        fields.setdefault("author", "runtime")
        return Block(type=type_, path=path, turn_id=self.turn_id, ts=self._clock, **fields)  # type: ignore[arg-type]

    def turn(self, turn_id: str, prompt: str = "What changed?") -> Conversation:
        """Open a turn with a user prompt."""
        self.turn_id = turn_id
        self._iteration = 0
        self.timeline.contribute(
            self._block(BlockType.TURN_HEADER, f"ar:{turn_id}.turn.header"),
            self._block(BlockType.USER_PROMPT, f"ar:{turn_id}.user.prompt", text=prompt, author="user"),
        )
        return self

    def tool_round(self, call_id: str) -> Conversation:
        """Contribute one complete tool round (notes, call, result)."""
        t = self.turn_id
        self.timeline.contribute(
            self._block(BlockType.REACT_NOTES, f"ar:{t}.react.notes.{call_id}", text="look it up", call_id=call_id),
            self._block(
                BlockType.REACT_TOOL_CALL,
                f"tc:{t}.{call_id}.call",
                mime="application/json",
                data={"tool_id": "web.search", "params": {"query": call_id}},
                author="assistant",
            ),
            self._block(
                BlockType.REACT_TOOL_RESULT,
                f"tc:{t}.{call_id}.result",
                text=f"{call_id}: {self.result_text}",
                author="tool",
            ),
        )
        return self

    def final(self, answer: str = "Done.") -> Conversation:
        """Close the turn with an answer."""
        t = self.turn_id
        self.timeline.contribute(
            self._block(BlockType.ASSISTANT_COMPLETION, f"ar:{t}.assistant.completion", text=answer, author="assistant")
        )
        return self

    def render(self, *, system: str = SYSTEM) -> RenderedPrompt:
        """Render the next round, as the loop would (the clock and the iteration move every round)."""
        self._iteration += 1
        announce = AnnounceState(
            iteration=self._iteration,
            max_iterations=15,
            budget_tokens_left=100_000 - 1000 * self._iteration,
            now=self._clock + timedelta(seconds=30),
        )
        return self.renderer.render(self.timeline, system=system, sources=SourcesPool(), announce=announce)
