"""Compaction mid-turn, TTL pruning with react.read recovery, hide, and the bundle's turn hooks."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from turn_harness import action, complete, turn_harness

from berth.runtime.blocks import BlockType
from berth.runtime.persistence import restore_conversation

pytestmark = pytest.mark.usefixtures("storage_kind")

HELLO = {"hello": {"source": {"entry_point": "hello"}}}


async def test_compaction_mid_turn_summarizes_old_turns(tmp_path: Path) -> None:
    async with turn_harness(
        tmp_path, HELLO, react={"context_budget_tokens": 2000, "compaction_threshold": 0.5}
    ) as harness:
        for n in range(4):
            await harness.turn(
                "hello", f"Tell me fact {n}: " + "lorem ipsum " * 60, script=[complete(f"Fact {n}. " + "dolor " * 60)]
            )
        harness.summarizer.extend(["Earlier: the user asked for four facts and got them."])
        result = await harness.turn("hello", "and now?", script=[action("hello.greet", name="x"), complete("ok")])
        assert result.outcome == "completed"
        compacted = [c for c in harness.of_type("compaction") if c["status"] == "compacted"]
        assert compacted, harness.of_type("compaction")
        assert "turn_1" in compacted[-1]["covered_turn_ids"]
        last_prompt = harness.model.requests[-1].prompt
        assert "Earlier: the user asked for four facts" in last_prompt.section_text("history")
        assert "Tell me fact 0" not in last_prompt.section_text("history")
        restored = await restore_conversation(harness.store.conversation(harness.scope), now=harness.clock())
        assert restored.timeline.blocks[0].type == BlockType.CONV_RANGE_SUMMARY
        log = await harness.store.conversation(harness.scope).read_turn_log("turn_1")
        assert log.rounds  # the turn log keeps what compaction dropped from the timeline


async def test_a_cold_cache_prunes_old_turns_and_react_read_reopens_them(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO, react={"cache_ttl_seconds": 300}) as harness:
        secret = "The secret word is PAPAYA. " + "It grows on trees in warm places. " * 20
        await harness.turn("hello", secret, script=[complete("Noted.")])
        for n in range(3):
            await harness.turn("hello", f"filler {n}", script=[complete("ok")])
        harness.clock.advance(600)  # the provider cache has gone cold
        await harness.turn(
            "hello",
            "what was the word?",
            script=[
                action("react.read", paths=["ar:turn_1.user.prompt"]),
                complete("PAPAYA"),
            ],
        )
        first = harness.model.requests[-2].prompt.section_text("history")
        assert secret.strip() not in first  # turn 1 shows as a card now
        assert "react.read" in first  # the pruning notice points to react.read
        assert "ar:turn_1.user.prompt" in first  # the card lists the path
        warm = harness.model.requests[-3].prompt.section_text("history")
        assert secret.strip() in warm  # before the cache went cold the turn was whole
        second = harness.model.requests[-1].prompt.section_text("current_turn")
        assert "The secret word is PAPAYA. It grows on trees" in second


async def test_hide_replaces_bulky_tail_content(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO, react={"cache_checkpoint_offset": 1}) as harness:
        await harness.turn(
            "hello",
            "go",
            script=[
                action("react.write", path="files/a.txt", content="x" * 300),
                action("react.hide", path="tc:turn_1.c1.result", replacement="wrote a.txt"),
                complete("done"),
            ],
        )
        assert [r["ok"] for r in harness.of_type("tool.result")] == [True, True]
        shown = harness.model.requests[-1].prompt.section_text("current_turn")
        assert "wrote a.txt" in shown


BUNDLE = '''
from berth import AgentSpec, BundleInfo, hookimpl, tool

SEEN = []

@tool
def ping() -> str:
    """Answer pong."""
    return "pong"

@tool
def secret_tool() -> str:
    """Not for this agent."""
    return "no"

@hookimpl
def berth_bundle():
    return BundleInfo(id="hooked", version="1")

@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="Ping things.", react={"max_iterations": 2}, tools=["hooked.ping", "react.read"])

@hookimpl
def berth_tools(ctx):
    return [ping, secret_tool]

@hookimpl
async def berth_before_turn(ctx, turn):
    if "forbidden" in turn.message:
        raise PermissionError("this bundle does not discuss that")
    SEEN.append(("before", ctx.tenant, turn.turn_id))

@hookimpl
async def berth_after_turn(ctx, turn, result):
    SEEN.append(("after", result.outcome, result.answer))
'''


async def test_agent_overrides_and_turn_hooks(tmp_path: Path) -> None:
    folder = tmp_path / "hooked"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(BUNDLE))
    async with turn_harness(tmp_path, {"hooked": {"source": {"path": str(folder)}}}) as harness:
        result = await harness.turn("hooked", "ping", script=[action("hooked.secret_tool"), action("hooked.ping")])
        assert (result.outcome, result.rounds) == ("iteration_limit", 2)  # AgentSpec max_iterations wins
        catalog = harness.model.requests[0].prompt.section_text("system")
        assert "hooked.ping" in catalog
        assert "hooked.secret_tool" not in catalog
        assert "react.write" not in catalog
        assert next(n["code"] for n in harness.of_type("notice")) == "unknown_tool"
        vetoed = await harness.turn("hooked", "something forbidden")
        assert vetoed.outcome == "failed"
        assert harness.of_type("turn.failed")[-1]["code"] == "turn_vetoed"
        module = harness.registry.current("hooked").manager.get_plugin("hooked.g1")
        assert module.SEEN[0] == ("before", "acme", "turn_1")
        assert module.SEEN[1] == ("after", "iteration_limit", None)
        assert module.SEEN[-1] == ("after", "failed", None)
