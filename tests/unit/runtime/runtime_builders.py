"""A deterministic conversation builder for the runtime tests (usable outside fixtures, e.g. in hypothesis)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from berth.runtime.blocks import Block, BlockType
from berth.runtime.timeline import Timeline

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


class ConversationBuilder:
    """Builds a timeline turn by turn and round by round, the way the loop contributes blocks."""

    def __init__(self) -> None:
        self.timeline = Timeline()
        self._clock = T0
        self.turn_id = ""

    def tick(self) -> datetime:
        self._clock += timedelta(seconds=1)
        return self._clock

    def block(self, type_: BlockType, path: str, **fields: object) -> Block:
        fields.setdefault("author", "runtime")
        return Block(type=type_, path=path, turn_id=self.turn_id, ts=self.tick(), **fields)  # type: ignore[arg-type]

    def turn(self, turn_id: str, prompt: str = "What changed?") -> ConversationBuilder:
        self.turn_id = turn_id
        self.timeline.contribute(
            self.block(BlockType.TURN_HEADER, f"ar:{turn_id}.turn.header"),
            self.block(BlockType.USER_PROMPT, f"ar:{turn_id}.user.prompt", text=prompt, author="user"),
        )
        return self

    def round_blocks(self, call_id: str, *, result_parts: int = 1, result_text: str = "ok") -> list[Block]:
        t = self.turn_id
        blocks = [
            self.block(BlockType.REACT_NOTES, f"ar:{t}.react.notes.{call_id}", text="look it up", call_id=call_id),
            self.block(
                BlockType.REACT_TOOL_CALL,
                f"tc:{t}.{call_id}.call",
                mime="application/json",
                data={"tool_id": "web.search", "params": {"query": call_id}},
                author="assistant",
            ),
            self.block(BlockType.REACT_TOOL_RESULT, f"tc:{t}.{call_id}.result", text=result_text, author="tool"),
        ]
        for part in range(1, result_parts):
            blocks.append(
                self.block(
                    BlockType.REACT_TOOL_RESULT,
                    f"fi:{t}.outputs/{call_id}/part{part}.txt",
                    text=f"{result_text} part {part}",
                    call_id=call_id,
                    author="tool",
                )
            )
        return blocks

    def tool_round(self, call_id: str, *, result_parts: int = 1, result_text: str = "ok") -> ConversationBuilder:
        self.timeline.contribute(*self.round_blocks(call_id, result_parts=result_parts, result_text=result_text))
        return self

    def final(self, answer: str = "Done [[S:1]].") -> ConversationBuilder:
        t = self.turn_id
        self.timeline.contribute(
            self.block(BlockType.ASSISTANT_COMPLETION, f"ar:{t}.assistant.completion", text=answer, author="assistant"),
            self.block(
                BlockType.ASSISTANT_FOLLOWUPS,
                f"ar:{t}.assistant.followups",
                mime="application/json",
                data={"followups": ["More?"]},
                author="assistant",
            ),
        )
        return self

    def full_turn(self, turn_id: str, rounds: int) -> ConversationBuilder:
        self.turn(turn_id)
        for n in range(1, rounds + 1):
            self.tool_round(f"c{n}")
        return self.final()

    @classmethod
    def from_shape(cls, shape: list[list[int]]) -> ConversationBuilder:
        """Build turns from ``shape``: one list per turn, one result-part count per tool round.

        Every turn but the last ends with a final answer; the last one is the current, open turn.
        """
        conversation = cls()
        for turn_number, rounds in enumerate(shape, start=1):
            conversation.turn(f"turn_{turn_number}")
            for round_number, parts in enumerate(rounds, start=1):
                conversation.tool_round(f"c{round_number}", result_parts=parts)
            if turn_number < len(shape):
                conversation.final()
        return conversation
