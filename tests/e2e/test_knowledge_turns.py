"""Knowledge spaces and skills at scale in real turns (the runtime, a folder bundle, SQLite, a scripted model):
chunks found by react.search_knowledge join the sources pool and are cited, react.read opens one chunk by its
anchor, tens of skills cost one line each in the prompt, and reading a skill admits its tools for the turn."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from turn_harness import action, complete, turn_harness

BUNDLE_INIT = textwrap.dedent(
    '''
    from pathlib import Path

    from berth import AgentSpec, BundleInfo, KnowledgeSpace, MarkdownFolder, hookimpl, tool

    HERE = Path(__file__).parent


    @hookimpl
    def berth_bundle():
        return BundleInfo(id="ops", version="1.0.0", title="Ops")


    @hookimpl
    def berth_agent(ctx):
        return AgentSpec(instructions="Follow the runbooks.", tools=["react.*"])


    @tool(read_only=False)
    def restart(service: str) -> str:
        """Restart one service.

        Args:
            service: the service's name.
        """
        return f"{service} restarted"


    @hookimpl
    def berth_tools(ctx):
        return [restart]


    @hookimpl
    def berth_skills(ctx):
        return sorted(str(path) for path in (HERE / "skills").iterdir())


    @hookimpl
    def berth_knowledge(ctx):
        return [KnowledgeSpace(name="runbooks", indexer=MarkdownFolder(HERE / "runbooks"))]
    '''
)

RUNBOOK = """# Database failover

## Before you start

Tell the on-call channel and freeze deploys.

## Promote the replica

Run the promotion job; the replica becomes primary within two minutes.
"""


def write_bundle(root: Path, skills: int) -> Path:
    """A folder bundle ``ops`` with ``skills`` skills; ``restart-service`` brings ``ops.restart`` and the runbooks."""
    folder = root / "ops_bundle"
    (folder / "runbooks").mkdir(parents=True)
    (folder / "__init__.py").write_text(BUNDLE_INIT)
    (folder / "runbooks" / "failover.md").write_text(RUNBOOK)
    for number in range(skills - 1):
        skill = folder / "skills" / f"skill-{number:02d}"
        skill.mkdir(parents=True)
        (skill / "SKILL.md").write_text(
            f"---\nname: skill-{number:02d}\ndescription: Handle situation number {number}.\n---\n"
            + f"Step {number}: a long procedure that stays out of the prompt until it is read.\n" * 40
        )
    restart = folder / "skills" / "restart-service"
    restart.mkdir(parents=True)
    (restart / "SKILL.md").write_text(
        "---\nname: restart-service\ndescription: Restart a service safely.\nknowledge: runbooks\n---\n"
        "Check the runbook first, then call ops.restart.\n"
    )
    (restart / "tools.yaml").write_text("- ops.restart\n")
    (restart / "sources.yaml").write_text("- url: https://runbooks.example/restart\n  title: Restart guide\n")
    return folder


async def test_tens_of_skills_cost_a_line_each_and_a_read_skill_admits_its_tools(tmp_path: Path) -> None:
    bundles = {"ops": {"source": {"path": str(write_bundle(tmp_path, skills=40))}}}
    async with turn_harness(tmp_path, bundles) as harness:
        result = await harness.turn(
            "ops",
            "restart the api",
            script=[
                action("ops.restart", service="api"),  # not in the agent's tools: refused
                action("react.read", paths=["sk:restart-service"]),
                action("ops.restart", service="api"),
                complete("Restarted."),
            ],
        )
        assert result.outcome == "completed"
        system = harness.model.requests[0].prompt.section_text("system")
        gallery = [line for line in system.splitlines() if line.startswith("- sk:")]
        assert len(gallery) == 40
        assert "a long procedure" not in system  # instructions load only when read
        assert max(len(line) for line in gallery) < 80
        assert "## ops.restart" not in system
        results = harness.of_type("tool.result")
        assert [r["ok"] for r in results] == [False, True, True]
        read = harness.model.requests[2].prompt.section_text("current_turn")
        assert "Tools this skill adds for the rest of the turn" in read and "## ops.restart" in read
        assert "react.search_knowledge with space 'runbooks'" in read
        assert "api restarted" in harness.model.requests[3].prompt.section_text("current_turn")
        assert "Restart guide" in harness.model.requests[3].prompt.section_text("sources")


async def test_a_skill_does_not_widen_the_tools_of_the_next_turn(tmp_path: Path) -> None:
    bundles = {"ops": {"source": {"path": str(write_bundle(tmp_path, skills=2))}}}
    async with turn_harness(tmp_path, bundles) as harness:
        await harness.turn("ops", "first", script=[action("react.read", paths=["sk:restart-service"]), complete("ok")])
        await harness.turn("ops", "second", script=[action("ops.restart", service="api"), complete("no")])
        assert [r["ok"] for r in harness.of_type("tool.result")] == [True, False]


async def test_knowledge_hits_are_cited_and_a_chunk_is_read_by_its_anchor(tmp_path: Path) -> None:
    bundles = {"ops": {"source": {"path": str(write_bundle(tmp_path, skills=1))}}}
    async with turn_harness(tmp_path, bundles) as harness:
        result = await harness.turn(
            "ops",
            "how do I promote the replica?",
            script=[
                action("react.search_knowledge", query="promote replica primary"),
                action("react.read", paths=["ks:runbooks/failover.md#promote-the-replica"]),
                complete("Run the promotion job [[S:1]]."),
            ],
        )
        assert result.outcome == "completed"
        found = harness.model.requests[1].prompt.section_text("current_turn")
        assert "ks:runbooks/failover.md#promote-the-replica" in found
        assert "Database failover > Promote the replica" in found
        read = harness.model.requests[2].prompt.section_text("current_turn")
        assert "[Database failover > Promote the replica, lines 7-9]" in read
        assert "Tell the on-call channel" not in read  # only the chunk, not the whole file
        sources = harness.model.requests[2].prompt.section_text("sources")
        assert "ks:runbooks/failover.md#promote-the-replica" in sources
        completed = harness.of_type("turn.completed")[0]
        assert completed["sources_used"][0]["url"] == "ks:runbooks/failover.md#promote-the-replica"


async def test_knowledge_search_takes_path_kind_and_language_filters(tmp_path: Path) -> None:
    bundles = {"ops": {"source": {"path": str(write_bundle(tmp_path, skills=1))}}}
    async with turn_harness(tmp_path, bundles) as harness:
        result = await harness.turn(
            "ops",
            "how do I promote the replica?",
            script=[
                action("react.search_knowledge", query="promote replica", path="failover.md", kind="section"),
                action("react.search_knowledge", query="promote replica", language="python"),
                action("react.search_knowledge", query="promote replica", language="cobol"),
                complete("Run the promotion job."),
            ],
        )
        assert result.outcome == "completed"
        results = harness.of_type("tool.result")
        assert [r["ok"] for r in results] == [True, True, False]
        assert "ks:runbooks/failover.md#promote-the-replica" in harness.model.requests[1].prompt.section_text(
            "current_turn"
        )
        assert results[1]["summary"] == "0 knowledge hit(s)"  # the runbooks have no python file
        assert "tool_params_invalid" in results[2]["summary"] and "unknown language 'cobol'" in results[2]["summary"]


async def test_the_docs_assistant_answers_about_berth_from_its_docs_and_source(tmp_path: Path) -> None:
    async with turn_harness(tmp_path, {"docs": {"source": {"entry_point": "docs"}}}) as harness:
        result = await harness.turn(
            "docs",
            "How does hot reload keep requests running?",
            script=[
                action("react.search_knowledge", query="reload generation pinned in-flight work", limit=8),
                action(
                    "react.search_knowledge", query="retire a generation when its last user ends", space="berth-source"
                ),
                complete("A reload swaps in a new generation; work pinned to the old one finishes on it [[S:1]]."),
            ],
        )
        assert result.outcome == "completed"
        found = harness.model.requests[1].prompt.section_text("current_turn")
        assert "ks:berth-docs/bundles.md#" in found  # the docs space answers, among the source's definitions
        code = harness.model.requests[2].prompt.section_text("current_turn")
        assert "ks:berth-source/host/registry.py#BundleRegistry." in code
        cited = harness.of_type("turn.completed")[0]["sources_used"]
        # [[S:1]] is the best hit of both spaces ranked on one scale (not a space's first by its name's order)
        assert cited[0]["url"].startswith(("ks:berth-docs/", "ks:berth-source/host/"))


BACKUPS = (
    "# Backups\n\n## Volumes\n\n"
    + "The platform keeps its settings in one file and reads them once at start. " * 8
    + "\n\nVolume snapshots are kept for a period that depends on the storage tier of the volume. "
    "The tier is chosen when the disk is created and cannot be changed later without a migration. "
    "Premium disks are replicated to a second zone; standard disks live in one zone only and cost less. "
    "On the standard tier the period is 35 days, on the premium tier 90 days.\n\n"
    + "Logs are shipped to the central store and rotated by size, never by age. " * 8
    + "\n\n## Alerts\n\nPage the on-call engineer.\n"
)


async def test_a_hit_shows_the_passage_that_answers_and_the_answer_cites_its_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an index of its own: the run's shared knowledge folder may hold the ops runbooks of another test (no backups.md),
    # which a search would answer from while this test's files are indexed in the background
    monkeypatch.setenv("BERTH_PLATFORM__KNOWLEDGE__ROOT", str(tmp_path / "knowledge"))
    folder = write_bundle(tmp_path, skills=1)
    (folder / "runbooks" / "backups.md").write_text(BACKUPS)
    # the platform's default preview (6,000 characters) shows every passage of a search whole
    async with turn_harness(
        tmp_path, {"ops": {"source": {"path": str(folder)}}}, result_preview_chars=6_000
    ) as harness:
        result = await harness.turn(
            "ops",
            "how long are volume snapshots kept?",
            script=[
                action("react.search_knowledge", query="how long are volume snapshots kept", limit=1),
                complete("They are kept for 35 days [[S:1]]."),
            ],
        )
        assert result.outcome == "completed"
        found = harness.model.requests[1].prompt.section_text("current_turn")
        # the hit: its ks: path, its heading path, and the passage holding the answer from the middle of the chunk
        assert "ks:runbooks/backups.md#volumes" in found
        assert "Backups > Volumes" in found
        # the words of the question are in one sentence, the answer three sentences on (beyond 240 characters)
        assert "On the standard tier the period is 35 days" in found
        assert "…" in found  # the chunk (about 1,500 characters) was cut around the answer
        assert found.count("reads them once at start") < 8
        completed = harness.of_type("turn.completed")[0]
        assert completed["sources_used"][0]["url"] == "ks:runbooks/backups.md#volumes"
