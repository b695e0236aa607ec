"""The demo model (``berth run --demo``) gives a clean first turn in every example bundle and in a new one."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from turn_harness import turn_harness

from berth.config.models.assembly import ModelRef
from berth.default_plugins.models.demo import DemoProvider, PromptView, example_params

pytestmark = pytest.mark.usefixtures("clean_berth_env")

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {
    "hello": {"source": {"entry_point": "hello"}},
    "docs": {"source": {"path": str(REPO_ROOT / "bundles" / "docs-assistant"), "module": "docs_assistant"}},
    "ops-copilot": {"source": {"entry_point": "ops-copilot"}},
}
DEMO = ModelRef(provider="demo", model="demo")


def demo_models(role: str | None) -> tuple[ModelRef, Any]:
    return DEMO, DemoProvider()


@pytest.mark.parametrize("bundle_id", sorted(EXAMPLES))
async def test_a_first_turn_in_each_example_bundle_is_clean(tmp_path: Path, bundle_id: str) -> None:
    async with turn_harness(tmp_path, {bundle_id: EXAMPLES[bundle_id]}, models=demo_models) as harness:
        result = await harness.turn(bundle_id, "Hello, what can you do?")
        assert result.outcome == "completed"
        assert harness.of_type("notice") == []
        results = harness.of_type("tool.result")
        assert results and all(r["ok"] for r in results), results
        own = [r["tool_id"] for r in results if not r["tool_id"].startswith("react.")]
        assert own, f"the demo model used none of {bundle_id}'s own tools"
        answer = harness.streamed()
        assert "[[S:" not in answer
        assert "demo model" in answer


async def test_the_hello_turn_reads_its_skill_and_cites_its_source(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, {"hello": EXAMPLES["hello"]}, models=demo_models) as harness:
        result = await harness.turn("hello", "Greet me")
        assert [r["tool_id"] for r in harness.of_type("tool.result")] == ["react.read", "hello.greet"]
        assert result.sources_used and result.sources_used[0]["url"] == "https://en.wikipedia.org/wiki/Greeting"


async def test_a_newly_scaffolded_bundle_gets_a_clean_turn_too(tmp_path: Path) -> None:
    made = await asyncio.to_thread(
        subprocess.run,
        [str(Path(sys.executable).parent / "berth"), "bundles", "new", "tidewatch", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert made.returncode == 0
    package = next(p for p in (tmp_path / "tidewatch").iterdir() if (p / "__init__.py").is_file())
    bundles = {"tidewatch": {"source": {"path": str(package.parent), "module": package.name}}}
    async with turn_harness(tmp_path / "stack", bundles, models=demo_models) as harness:
        result = await harness.turn("tidewatch", "hi")
        assert result.outcome == "completed"
        assert harness.of_type("notice") == []
        assert all(r["ok"] for r in harness.of_type("tool.result"))


@pytest.mark.parametrize(
    ("schema", "params"),
    [
        ({"required": ["name"], "properties": {"name": {"type": "string"}}}, {"name": "friend"}),
        ({"required": ["query"], "properties": {"query": {"type": "string"}}}, {"query": "tides"}),
        ({"required": ["n"], "properties": {"n": {"type": "integer", "minimum": 3}}}, {"n": 3}),
        ({"required": ["mode"], "properties": {"mode": {"enum": ["a", "b"]}}}, {"mode": "a"}),
        ({"required": ["notes"], "properties": {"notes": {"type": "array", "items": {"type": "string"}}}},
         {"notes": ["tides"]}),
        ({"required": ["blob"], "properties": {"blob": {"type": "object"}}}, None),
    ],
)  # fmt: skip
def test_example_params_fill_what_a_schema_requires(schema: dict[str, Any], params: dict[str, Any] | None) -> None:
    assert example_params(schema, "tides") == params


def test_the_prompt_view_reads_the_catalog_skills_and_the_current_turn() -> None:
    system = (
        "# Your role (Hello)\nbe kind\n\n# Tools\n\n## hello.greet (read-only)\nGreet.\n"
        'params: {"required":["name"],"properties":{"name":{"type":"string"}}}\n\n'
        "# Skills\n- sk:etiquette — how to greet\n"
    )
    turn = (
        "[TURN turn_2] started now\n{}\n\n[user.prompt] ar:turn_2.user.prompt\nhi there\n\n"
        '[react.tool.call] tc:turn_2.c1.call (application/json)\n{"params": {"paths": ["sk:etiquette"]}, '
        '"tool_id": "react.read"}\n\n[react.tool.result] tc:turn_2.c1.result\nbe polite\nsources: [[S:1]]'
    )
    view = PromptView.read([system, "[TURN turn_1] old\n\n[user.prompt] ar:turn_1.user.prompt\nold", turn])
    assert view.bundle_title == "Hello"
    assert [t.tool_id for t in view.tools] == ["hello.greet"]
    assert view.skills == ["etiquette"]
    assert view.message == "hi there"
    assert view.calls == [("react.read", {"paths": ["sk:etiquette"]})]
    assert re.search("be polite", view.results[0])
