"""Mapping a rendered prompt onto Anthropic's Messages API: cache markers exactly at the checkpoints."""

from __future__ import annotations

import pytest
from conversations import SYSTEM, Conversation

from berth.default_plugins.models.anthropic import anthropic_prompt
from berth.models import ModelProviderError
from berth.runtime.render import PromptMessage, PromptPart, RenderedPrompt

EPHEMERAL = {"type": "ephemeral"}


def prompt_of(*messages: tuple[str, list[tuple[str, str | None]]]) -> RenderedPrompt:
    """A hand-made prompt, for shapes the renderer never produces."""
    return RenderedPrompt(
        messages=tuple(
            PromptMessage(
                role=role,  # type: ignore[arg-type]
                parts=tuple(
                    PromptPart(section="system" if role == "system" else "current_turn", text=text, cache_checkpoint=cp)  # type: ignore[arg-type]
                    for text, cp in parts
                ),
            )
            for role, parts in messages
        ),
        checkpoints=(),
        start=0,
    )


def test_the_system_message_becomes_system_blocks_with_its_checkpoint(conversation: Conversation) -> None:
    mapped = anthropic_prompt(conversation.turn("turn_1").render())
    assert mapped.system == [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]


def test_every_timeline_part_becomes_one_block_of_a_single_user_turn(conversation: Conversation) -> None:
    conversation.turn("turn_1").tool_round("c1").final().turn("turn_2").tool_round("c1").tool_round("c2")
    prompt = conversation.render()
    mapped = anthropic_prompt(prompt)
    assert [message["role"] for message in mapped.messages] == ["user"]
    user_parts = [part.text for message in prompt.messages if message.role == "user" for part in message.parts]
    assert [block["text"] for block in mapped.user] == user_parts


def test_cache_control_sits_on_exactly_the_parts_with_a_checkpoint(conversation: Conversation) -> None:
    conversation.turn("turn_1").tool_round("c1").final().turn("turn_2")
    for n in range(1, 6):
        conversation.tool_round(f"c{n}")
    prompt = conversation.render()
    mapped = anthropic_prompt(prompt)
    marked = [block["text"] for block in [*mapped.system, *mapped.user] if "cache_control" in block]
    assert marked == [part.text for part in prompt.parts() if part.cache_checkpoint is not None]
    assert mapped.breakpoint_count() == prompt.breakpoint_count() == 4
    assert all(block.get("cache_control") in (None, EPHEMERAL) for block in mapped.user)


def test_sources_and_announce_never_carry_a_cache_marker(conversation: Conversation) -> None:
    conversation.turn("turn_1").tool_round("c1").tool_round("c2")
    mapped = anthropic_prompt(conversation.render())
    assert "cache_control" not in mapped.user[-1]
    assert "cache_control" not in mapped.user[-2]
    assert mapped.user[-1]["text"].startswith("[ANNOUNCE]")


def test_more_than_four_checkpoints_are_refused_before_sending() -> None:
    prompt = prompt_of(
        ("system", [("sys", "system")]),
        ("user", [("a", "previous_turn"), ("b", "pre_tail"), ("c", "tail"), ("d", "tail")]),
    )
    with pytest.raises(ModelProviderError) as caught:
        anthropic_prompt(prompt)
    assert caught.value.code == "invalid_prompt"
    assert "5 cache checkpoints" in caught.value.message


def test_consecutive_user_messages_merge_into_one_turn() -> None:
    prompt = prompt_of(("system", [("sys", "system")]), ("user", [("a", None)]), ("user", [("b", "tail")]))
    mapped = anthropic_prompt(prompt)
    assert mapped.messages == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b", "cache_control": EPHEMERAL}],
        }
    ]


def test_an_empty_part_is_left_out_and_its_checkpoint_moves_to_the_block_before() -> None:
    prompt = prompt_of(("system", [("sys", None)]), ("user", [("a", None), ("  ", "tail"), ("announce", None)]))
    mapped = anthropic_prompt(prompt)
    assert mapped.user == [
        {"type": "text", "text": "a", "cache_control": EPHEMERAL},
        {"type": "text", "text": "announce"},
    ]


def test_a_system_message_after_user_content_is_refused() -> None:
    prompt = prompt_of(("user", [("a", None)]), ("system", [("late", None)]))
    with pytest.raises(ModelProviderError, match="system message follows user content"):
        anthropic_prompt(prompt)


def test_a_prompt_without_user_content_is_refused() -> None:
    with pytest.raises(ModelProviderError) as caught:
        anthropic_prompt(prompt_of(("system", [("sys", "system")])))
    assert caught.value.code == "invalid_prompt"
