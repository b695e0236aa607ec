"""Builders for the storage tests: blocks of a turn on a fixed clock, and store opening."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from berth.default_plugins.storage.sqlite import SqliteConversationStore
from berth.runtime.blocks import Block, BlockType

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


def open_store(root: Path, *, trace: Callable[[str], None] | None = None) -> SqliteConversationStore:
    """Open an embedded store under ``root``."""
    store = SqliteConversationStore(root, trace=trace)
    asyncio.run(store.open())
    return store


def head(turn_id: str, prompt: str = "What changed?", *, at: datetime = T0) -> list[Block]:
    """The head blocks of a turn: header and prompt."""
    return [
        Block(type=BlockType.TURN_HEADER, path=f"ar:{turn_id}.turn.header", turn_id=turn_id, ts=at, author="runtime"),
        Block(
            type=BlockType.USER_PROMPT,
            path=f"ar:{turn_id}.user.prompt",
            turn_id=turn_id,
            ts=at,
            author="user",
            text=prompt,
        ),
    ]


def tool_round(turn_id: str, call_id: str, *, result: str = "ok", at: datetime = T0) -> list[Block]:
    """One complete tool round: notes, call and result."""
    at = at + timedelta(seconds=1)
    return [
        Block(
            type=BlockType.REACT_NOTES,
            path=f"ar:{turn_id}.react.notes.{call_id}",
            turn_id=turn_id,
            ts=at,
            author="assistant",
            text="look it up",
            call_id=call_id,
        ),
        Block(
            type=BlockType.REACT_TOOL_CALL,
            path=f"tc:{turn_id}.{call_id}.call",
            turn_id=turn_id,
            ts=at,
            author="assistant",
            mime="application/json",
            data={"tool_id": "web.search", "params": {"query": call_id}},
        ),
        Block(
            type=BlockType.REACT_TOOL_RESULT,
            path=f"tc:{turn_id}.{call_id}.result",
            turn_id=turn_id,
            ts=at,
            author="tool",
            text=result,
        ),
    ]


def final(turn_id: str, answer: str = "Done.", *, at: datetime = T0) -> list[Block]:
    """The final answer of a turn."""
    return [
        Block(
            type=BlockType.ASSISTANT_COMPLETION,
            path=f"ar:{turn_id}.assistant.completion",
            turn_id=turn_id,
            ts=at + timedelta(seconds=2),
            author="assistant",
            text=answer,
        )
    ]
