"""``exec.python`` in a real turn: the scripted model writes a program that calls a bundle tool and draws a PNG."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.config import Configuration, DescriptorError
from berth.config.models.assembly import ModelRef
from berth.default_plugins.exec.local import LocalBackend
from berth.default_plugins.models.scripted import ScriptedProvider
from berth.default_plugins.storage.sqlite import SqliteConversationStore
from berth.execution.profiles import Execution, warn_unisolated
from berth.host.registry import BundleRegistry
from berth.runtime.events import TurnEvent
from berth.runtime.loop import TurnInput, TurnRunner
from berth.storage.conversations import ConversationHandle
from berth.storage.scope import ConversationScope

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("clean_berth_env")]

BUNDLE = Path(__file__).parent / "exec_probe_bundle"

PROGRAM = (BUNDLE / "chart_program.txt").read_text()
"""Calls ``probe.whoami`` from the sandbox, draws a 4x3 PNG into OUTPUT_DIR, prints what the tool said."""


def script() -> list[str]:
    call = {
        "action": "call_tool",
        "notes": "draw it",
        "tool_call": {"tool_id": "exec.python", "params": {"purpose": "draw a chart", "outputs": ["chart.png"]}},
    }
    first = (
        "<channel:thinking>I will write code</channel:thinking>"
        f"<channel:action>{json.dumps(call)}</channel:action><channel:code>{PROGRAM}</channel:code>"
    )
    done = (
        '<channel:action>{"action": "complete", "notes": ""}</channel:action>'
        "<channel:answer>Here it is.</channel:answer>"
    )
    return [first, done]


def descriptors(root: Path) -> Path:
    root.mkdir()
    assembly = {
        "platform": {"exec": {"profiles": {"sandbox": {"backend": "local", "timeout_s": 20}}}},
        "tenants": {"acme": {"projects": {"support": {}}}, "globex": {"projects": {"main": {}}}},
    }
    (root / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    bundles = {
        "bundles": {"probe": {"source": {"path": str(BUNDLE)}, "props": {"motto": "bundle motto"}}},
        "tenants": {"acme/support": {"bundles": ["probe"], "props": {"probe": {"motto": "acme motto"}}}},
    }
    (root / "bundles.yaml").write_text(yaml.safe_dump(bundles))
    secrets = {
        "bundles": {"probe": {"probe_key": "literal:shared-key-0000"}},
        "tenants": {"acme/support": {"probe": {"probe_key": "literal:acme01-key"}}},
    }
    (root / "bundles.secrets.yaml").write_text(yaml.safe_dump(secrets))
    return root


async def test_code_calls_a_bundle_tool_in_scope_and_its_png_becomes_an_artifact(tmp_path: Path) -> None:
    config = Configuration.load(descriptors(tmp_path / "descriptors"))
    registry = BundleRegistry(config)
    outcomes = await registry.start()
    assert all(outcome.ok for outcome in outcomes), outcomes
    store = SqliteConversationStore(tmp_path / "var")
    await store.open()
    model = ScriptedProvider(script())
    runner = TurnRunner(
        store=store,
        models=lambda role: (ModelRef(provider="scripted", model="script"), model),
        execution=Execution({"local": LocalBackend.from_profile}),
    )
    scope = ConversationScope(tenant="acme", project="support", user_id="ada", conversation_id="c1")
    events: list[TurnEvent] = []

    async def record(event: TurnEvent) -> None:
        events.append(event)

    try:
        async with registry.use("probe") as generation:
            context = registry.context_for(generation, "acme", "support")
            result = await runner.run(
                generation, context, TurnInput(scope=scope, turn_id="turn_1", message="chart"), record
            )
        assert result.outcome == "completed", [e for e in events if e.type in ("turn.failed", "notice")]
        tool_result = next(e.data for e in events if e.type == "tool.result" and e.data["tool_id"] == "exec.python")
        assert tool_result["ok"], tool_result
        handle = store.conversation(scope)
        log = await handle.read_turn_log("turn_1")
        records = [record for round_ in log.rounds for record in round_.blocks]
        result_block = next(json.loads(r.json) for r in records if r.path == "tc:turn_1.c1.result")
        full = result_block["text"]
        envelope = json.loads(full)
        assert envelope["ok"] is True
        assert json.loads(envelope["user_out_tail"]) == {
            "label": "from the sandbox",
            "tenant": "acme",
            "project": "support",
            "motto": "acme motto",
            "key_prefix": "acme01",
        }
        assert [(a["path"], a["mime"]) for a in envelope["artifacts"]] == [("fi:turn_1.outputs/chart.png", "image/png")]
        png = await handle.read_artifact("turn_1/outputs/chart.png")
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        program = await handle.read_artifact(f"turn_1/outputs/executed_programs/{envelope['exec_id']}/main.py")
        assert b'tools.call("probe.whoami"' in program
    finally:
        await store.aclose()
        await registry.close()


def test_a_bundle_names_an_undefined_exec_profile_with_file_and_line(tmp_path: Path) -> None:
    folder = descriptors(tmp_path / "descriptors")
    bundles = yaml.safe_load((folder / "bundles.yaml").read_text())
    bundles["bundles"]["probe"]["exec"] = {"profile": "sandbox", "profiles": ["gpu"]}
    (folder / "bundles.yaml").write_text(yaml.safe_dump(bundles))
    with pytest.raises(DescriptorError) as refused:
        Configuration.load(folder)
    [problem] = refused.value.problems
    assert problem.field == "bundles.probe.exec.profiles[0]"
    assert "exec profile 'gpu' is not defined (known: sandbox)" in problem.message
    assert problem.line > 1


async def test_the_operators_profile_choice_overrides_the_bundles(tmp_path: Path) -> None:
    folder = descriptors(tmp_path / "descriptors")
    assembly = yaml.safe_load((folder / "assembly.yaml").read_text())
    assembly["platform"]["exec"]["profiles"]["tight"] = {"backend": "local", "timeout_s": 5, "memory_mb": 64}
    (folder / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    bundles = yaml.safe_load((folder / "bundles.yaml").read_text())
    bundles["bundles"]["probe"]["exec"] = {"profile": "tight"}
    (folder / "bundles.yaml").write_text(yaml.safe_dump(bundles))
    config = Configuration.load(folder)
    execution = Execution(
        {"local": LocalBackend.from_profile}, bundle_exec=lambda b: config.descriptors.bundles.bundles[b].exec
    )
    options = execution.options_for("probe", {"profile": "sandbox"})
    assert options == {"profile": "tight"}
    backend, limits = execution.backend(config.settings_for("acme", "support").exec, options["profile"])
    assert (backend.name, limits.timeout_s, limits.memory_mb) == ("local", 5, 64)


def test_an_unsandboxed_profile_is_named_in_a_warning_at_start_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = descriptors(tmp_path / "descriptors")
    assembly = yaml.safe_load((folder / "assembly.yaml").read_text())
    assembly["platform"]["exec"]["profiles"]["trusted"] = {"backend": "local", "isolation": "none"}
    (folder / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    config = Configuration.load(folder)
    scopes = [(None, None), *config.descriptors.assembly.scopes()]
    with caplog.at_level("WARNING"):
        named = warn_unisolated((f"{t}/{p}", config.settings_for(t, p).exec) for t, p in scopes)
    assert named == ["trusted"]
    assert len([r for r in caplog.records if "isolation: none" in r.getMessage()]) == 1


@asynccontextmanager
async def exec_turn(
    tmp_path: Path, program: str, attachments: tuple[tuple[str, str, bytes], ...] = ()
) -> AsyncIterator[tuple[list[TurnEvent], dict[str, Any], ConversationHandle]]:
    """Run one turn of the probe bundle whose model runs ``program`` with ``exec.python``, then answers; yield its
    events, the run's envelope and the conversation (open until the block ends)."""
    config = Configuration.load(descriptors(tmp_path / "descriptors"))
    registry = BundleRegistry(config)
    assert all(outcome.ok for outcome in await registry.start())
    store = SqliteConversationStore(tmp_path / "var")
    await store.open()
    call = {"action": "call_tool", "tool_call": {"tool_id": "exec.python", "params": {"purpose": "run it"}}}
    model = ScriptedProvider(
        [
            f"<channel:action>{json.dumps(call)}</channel:action><channel:code>{program}</channel:code>",
            '<channel:action>{"action": "complete"}</channel:action><channel:answer>ok</channel:answer>',
        ]
    )
    runner = TurnRunner(
        store=store,
        models=lambda role: (ModelRef(provider="scripted", model="script"), model),
        execution=Execution({"local": LocalBackend.from_profile}),
    )
    scope = ConversationScope(tenant="acme", project="support", user_id="ada", conversation_id="c2")
    events: list[TurnEvent] = []

    async def record(event: TurnEvent) -> None:
        events.append(event)

    turn = TurnInput(scope=scope, turn_id="turn_1", message="go", attachments=attachments)
    try:
        async with registry.use("probe") as generation:
            context = registry.context_for(generation, "acme", "support")
            result = await runner.run(generation, context, turn, record)
        assert result.outcome == "completed"
        handle = store.conversation(scope)
        log = await handle.read_turn_log("turn_1")
        records = [r for round_ in log.rounds for r in round_.blocks]
        envelope = json.loads(next(json.loads(r.json) for r in records if r.path == "tc:turn_1.c1.result")["text"])
        yield events, envelope, handle
    finally:
        await store.aclose()
        await registry.close()


async def test_a_tool_called_from_the_sandbox_keeps_its_own_time_limit(tmp_path: Path) -> None:
    program = (
        "from berth_exec import tools\n"
        "try:\n    tools.call('probe.slow')\nexcept tools.ToolCallError as error:\n    print(error.code)\n"
    )
    async with exec_turn(tmp_path, program) as (_, envelope, _):
        assert envelope["user_out_tail"].strip() == "tool_timeout"
        assert envelope["duration_s"] < 1.5  # the call ended at the tool's 0.3 s, not after its 2 s


ATTACHMENT_PROGRAM = """\
import json, os, pathlib
path = pathlib.Path(os.environ["WORKDIR"], "turn_1", "attachments", "sales.csv")
rows = path.read_text().splitlines()
try:
    path.write_text("changed")
    wrote = "yes"
except PermissionError:
    wrote = "refused"
try:
    (path.parent / "new.txt").write_text("x")
    added = "yes"
except PermissionError:
    added = "refused"
pathlib.Path(os.environ["OUTPUT_DIR"], "total.txt").write_text(str(sum(int(r.split(",")[1]) for r in rows[1:])))
print(json.dumps({"rows": len(rows), "write": wrote, "add": added}))
"""


async def test_the_turns_attachments_are_read_only_files_of_the_program(tmp_path: Path) -> None:
    csv = b"region,sales\nnorth,10\nsouth,32\n"
    async with exec_turn(tmp_path, ATTACHMENT_PROGRAM, (("sales.csv", "text/csv", csv),)) as (_, envelope, handle):
        assert envelope["ok"], envelope
        assert json.loads(envelope["user_out_tail"]) == {"rows": 3, "write": "refused", "add": "refused"}
        assert await handle.read_artifact("turn_1/outputs/total.txt") == b"42"
        assert await handle.read_artifact("turn_1/attachments/sales.csv") == csv  # untouched
