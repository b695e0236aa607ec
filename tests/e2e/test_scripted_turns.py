"""Full turns through the real runtime, bundles and SQLite store, with a scripted model."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from turn_harness import action, complete, turn_harness

from berth.runtime.blocks import BlockType
from berth.runtime.persistence import restore_conversation

pytestmark = pytest.mark.usefixtures("storage_kind")

HELLO = {"hello": {"source": {"entry_point": "hello"}}}
DOCS = {"docs": {"source": {"entry_point": "docs"}}}


def notice_codes(harness_events: list[dict[str, object]]) -> list[object]:
    return [event["code"] for event in harness_events]


async def test_a_tool_call_then_an_answer(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO) as harness:
        result = await harness.turn(
            "hello",
            "Greet Ada in French",
            script=[action("hello.greet", name="Ada", language="fr"), complete("Bonjour, Ada! 👋", ["Greet Bob?"])],
        )
        assert (result.outcome, result.answer, result.followups) == ("completed", "Bonjour, Ada! 👋", ("Greet Bob?",))
        assert result.rounds == 2
        assert harness.streamed() == "Bonjour, Ada! 👋"
        assert harness.of_type("tool.call")[0]["tool_id"] == "hello.greet"
        assert harness.of_type("tool.result")[0]["ok"] is True
        assert harness.events[0].type == "turn.started"
        assert harness.events[-1].type == "turn.completed"
        # the model saw the tool result in round 2
        second = harness.model.requests[1].prompt.section_text("current_turn")
        assert "Bonjour, Ada!" in second
        # the persisted timeline has the whole turn
        restored = await restore_conversation(harness.store.conversation(harness.scope), now=harness.clock())
        types = [block.type for block in restored.timeline.blocks]
        assert types[:2] == [BlockType.TURN_HEADER, BlockType.USER_PROMPT]
        assert BlockType.REACT_TOOL_RESULT in types
        assert types[-2:] == [BlockType.ASSISTANT_COMPLETION, BlockType.ASSISTANT_FOLLOWUPS]


async def test_every_protocol_problem_becomes_a_notice_and_the_turn_goes_on(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO) as harness:
        script = [
            "no channels at all",
            "<channel:action>{not json}</channel:action>",
            action("hello.nope"),
            action("hello.greet", nam="typo"),
            "<channel:weird>x</channel:weird>" + action("hello.greet", name="Ada"),
            '<channel:action>{"action": "complete"}</channel:action>',
            complete("Hello, Ada!"),
        ]
        result = await harness.turn("hello", "hi", script=script)
        assert result.outcome == "completed"
        codes = notice_codes(harness.of_type("notice"))
        for code in (
            "text_outside_channels",
            "no_action",
            "action_invalid",
            "unknown_tool",
            "tool_params_invalid",
            "unknown_channel",
            "answer_missing",
        ):
            assert code in codes, (code, codes)
        # the model is told about each problem in its next prompt
        assert "unknown_tool" in harness.model.requests[3].prompt.section_text("current_turn")


async def test_the_iteration_limit_ends_the_turn(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO, react={"max_iterations": 3}) as harness:
        result = await harness.turn("hello", "loop", script=[action("hello.greet", name="x")] * 3)
        assert (result.outcome, result.rounds) == ("iteration_limit", 3)
        assert "iteration_limit" in notice_codes(harness.of_type("notice"))
        assert harness.model.remaining == 0


async def test_a_plan_is_tracked_across_turns(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO) as harness:
        await harness.turn(
            "hello",
            "plan it",
            script=[
                action("react.plan", mode="new", steps=["greet Ada", "greet Bob"]),
                action("hello.greet", notes="✓ [1]", name="Ada"),
                complete("Greeted Ada."),
            ],
        )
        plans = harness.of_type("plan")
        assert plans[0]["plan"]["steps"][0]["label"] == "greet Ada"
        await harness.turn(
            "hello", "go on", script=[action("hello.greet", notes="✓ [2]", name="Bob"), complete("Done.")]
        )
        first_of_turn_2 = harness.model.requests[-2].prompt.section_text("announce")
        assert "✓" in first_of_turn_2
        assert "□" in first_of_turn_2
        assert harness.of_type("plan")[-1]["plan"]["status"] == "complete"


async def test_a_file_of_an_earlier_turn_is_patched_after_checkout(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO) as harness:
        await harness.turn(
            "hello",
            "write it",
            script=[
                action("react.write", path="files/app.py", content="def main():\n    return 1\n"),
                complete("Wrote app.py."),
            ],
        )
        diff = "@@ -1,2 +1,2 @@\n def main():\n-    return 1\n+    return 2\n"
        result = await harness.turn(
            "hello",
            "fix it",
            script=[
                action("react.pull", paths=["fi:turn_1.files/app.py"]),
                action("react.checkout", turn_id="turn_1", mode="replace"),
                action("react.patch", path="files/app.py", diff=diff),
                action("react.patch", path="files/app.py", diff="@@ -1,1 +1,1 @@\n-def nope():\n+def x():\n"),
                action("react.read", paths=["fi:turn_2.files/app.py"]),
                complete("Patched."),
            ],
        )
        assert result.outcome == "completed"
        results = harness.of_type("tool.result")
        assert [r["ok"] for r in results[-5:]] == [True, True, True, False, True]
        assert "hunk_mismatch" in results[-2]["summary"]
        assert "expected at line 1" in results[-2]["summary"] or "hunk 1" in results[-2]["summary"]
        stored = await harness.store.conversation(harness.scope).read_artifact("turn_2/files/app.py")
        assert stored == b"def main():\n    return 2\n"


async def test_large_results_are_capped_and_readable_in_full(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO) as harness:
        long_text = "line\n" * 400
        result = await harness.turn(
            "hello",
            "big",
            script=[
                action("react.write", path="files/big.txt", content=long_text),
                action("react.read", paths=["fi:turn_1.files/big.txt"]),
                action("react.read", paths=["tc:turn_1.c2.result"], lines="1-3"),
                complete("ok"),
            ],
        )
        assert result.outcome == "completed"
        third = harness.model.requests[2].prompt.section_text("current_turn")
        assert "characters in all; read the rest with react.read" in third
        fourth = harness.model.requests[3].prompt.section_text("current_turn")
        assert "1: === fi:turn_1.files/big.txt" in fourth


async def test_memsearch_finds_an_earlier_turn(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO) as harness:
        await harness.turn("hello", "My favourite colour is ultramarine blue.", script=[complete("Noted!")])
        await harness.turn("hello", "unrelated", script=[complete("Sure.")])
        await harness.turn(
            "hello",
            "what colour did I say?",
            script=[
                action("react.memsearch", query="favourite colour"),
                complete("Ultramarine blue."),
            ],
        )
        found = harness.model.requests[-1].prompt.section_text("current_turn")
        assert "ultramarine" in found.lower()
        assert "ar:turn_1.user.prompt" in found


class BrokenEmbedder:
    """An embedder whose model cannot run (a plugin's model session that fails at every call)."""

    dimensions = 8

    async def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        raise RuntimeError("the embedding model's session failed")

    async def embed_query(self, query: str) -> tuple[float, ...]:
        raise RuntimeError("the embedding model's session failed")


async def test_a_turn_whose_memory_entries_cannot_be_embedded_completes_and_is_stored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with turn_harness(tmp_path, HELLO, embedder=BrokenEmbedder()) as harness:
        result = await harness.turn("hello", "My favourite colour is ultramarine blue.", script=[complete("Noted!")])
        assert (result.outcome, result.answer) == ("completed", "Noted!")
        stored = await harness.store.conversation(harness.scope).load()
        assert [turn.state for turn in stored.turns] == ["completed"]
    assert "its embedder failed" in caplog.text


async def test_knowledge_search_and_read(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, DOCS) as harness:
        result = await harness.turn(
            "docs",
            "how many vacation days?",
            script=[
                action("react.search_knowledge", query="vacation days"),
                action("react.read", paths=["ks:handbook/vacation.md"]),
                complete("25 days."),
            ],
        )
        assert result.outcome == "completed"
        seen = harness.model.requests[2].prompt.section_text("current_turn")
        assert "ks:handbook/vacation.md" in seen
        assert "25 days of paid vacation" in seen


async def test_a_skill_is_read_and_its_sources_join_the_pool(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO) as harness:
        await harness.turn(
            "hello",
            "etiquette?",
            script=[
                action("react.read", paths=["sk:greeting-etiquette"]),
                complete("Use names [[S:1]]."),
            ],
        )
        assert "sk:greeting-etiquette" in harness.model.requests[0].prompt.section_text("system")
        second = harness.model.requests[1].prompt
        assert "Greeting (Wikipedia)" in second.section_text("sources")
        assert "[Greeting (Wikipedia)](https://en.wikipedia.org/wiki/Greeting)" in harness.streamed()
        completed = harness.of_type("turn.completed")[0]
        assert completed["sources_used"][0]["sid"] == 1


async def test_the_cached_prefix_is_stable_across_rounds(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO) as harness:
        await harness.turn(
            "hello",
            "hi",
            script=[
                action("hello.greet", name="A"),
                action("hello.greet", name="B"),
                action("hello.greet", name="C"),
                complete("done"),
            ],
        )
        prompts = [request.prompt for request in harness.model.requests]
        for earlier, later in itertools.pairwise(prompts):
            assert later.breakpoint_count() <= 4
            assert later.parts()[0].text == earlier.parts()[0].text  # the system message never changes
        assert json.dumps(prompts[-1].cached_prefix()).startswith(json.dumps(prompts[-2].cached_prefix())[:-1])


async def test_safe_fanout_runs_several_read_only_actions_but_refuses_a_mix(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO, react={"multi_action": "safe_fanout"}) as harness:
        both_read_only = action("hello.greet", name="A") + action("react.rg", pattern="x")
        mixed = action("hello.greet", name="B") + action("react.write", path="files/x.txt", content="x")
        result = await harness.turn("hello", "fan out", script=[both_read_only, mixed, complete("ok")])
        assert result.outcome == "completed"
        calls = [c["tool_id"] for c in harness.of_type("tool.call")]
        assert calls == ["hello.greet", "react.rg", "hello.greet"]
        assert "multi_action_refused" in [n["code"] for n in harness.of_type("notice")]


async def test_without_safe_fanout_only_the_first_action_runs(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, HELLO) as harness:
        await harness.turn(
            "hello", "two", script=[action("hello.greet", name="A") + action("react.rg", pattern="x"), complete("ok")]
        )
        assert [c["tool_id"] for c in harness.of_type("tool.call")] == ["hello.greet"]
        assert "multi_action_refused" in [n["code"] for n in harness.of_type("notice")]
