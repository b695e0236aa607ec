"""Generations: isolated imports, validation, atomic swap, pinning, unload, and failed loads."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from host_helpers import BASIC_INIT, path_entry

from berth.config import ConfigError, Configuration
from berth.host.registry import BundleRegistry, BundleStatus

FolderBundle = Callable[..., Path]
Descriptors = Callable[..., Configuration]


def configured_statuses(registry: BundleRegistry) -> list[BundleStatus]:
    """The rows of the bundles ``bundles.yaml`` names (installed example bundles it does not name are left out)."""
    return [status for status in registry.statuses() if status.state != "not_enabled"]


async def call_answer(registry: BundleRegistry, bundle_id: str) -> object:
    async with registry.use(bundle_id) as generation:
        entry = generation.catalog.get(f"{bundle_id}.answer")
        assert entry is not None
        assert entry.spec is not None
        return await entry.spec.invoke({})


async def test_a_folder_bundle_loads_under_a_synthetic_package(
    folder_bundle: FolderBundle, descriptors_for: Descriptors
) -> None:
    registry = BundleRegistry(descriptors_for({"alpha": path_entry(folder_bundle("alpha"))}))
    (outcome,) = await registry.start()
    assert outcome.ok
    generation = registry.current("alpha")
    assert generation.package == "berth_bundles.alpha.g1"
    assert generation.catalog.tool_ids == ["alpha.answer"]
    assert await call_answer(registry, "alpha") == "v1"
    await registry.close()
    assert "berth_bundles.alpha.g1" not in sys.modules


SIBLING_FILES = {
    "__init__.py": BASIC_INIT
    + """
from .tools import marker
from .utils.names import who
""",
    "tools.py": "marker = '{bundle_id}-tools'\n",
    "utils/__init__.py": "",
    "utils/names.py": "def who():\n    return '{bundle_id}-utils'\n",
}


async def test_two_bundles_with_the_same_module_names_never_meet(
    folder_bundle: FolderBundle, descriptors_for: Descriptors
) -> None:
    folders = {
        bundle_id: folder_bundle(bundle_id, {k: v.replace("{bundle_id}", bundle_id) for k, v in SIBLING_FILES.items()})
        for bundle_id in ("alpha", "beta")
    }
    registry = BundleRegistry(descriptors_for({k: path_entry(v) for k, v in folders.items()}))
    outcomes = await registry.start()
    assert all(o.ok for o in outcomes), outcomes
    alpha = registry.current("alpha").manager.get_plugin("alpha.g1")
    beta = registry.current("beta").manager.get_plugin("beta.g1")
    assert (alpha.marker, alpha.who()) == ("alpha-tools", "alpha-utils")
    assert (beta.marker, beta.who()) == ("beta-tools", "beta-utils")
    assert "tools" not in sys.modules
    assert "utils" not in sys.modules
    await registry.close()


async def test_an_absolute_import_of_a_sibling_says_to_make_it_relative(
    folder_bundle: FolderBundle, descriptors_for: Descriptors
) -> None:
    files = {
        "__init__.py": BASIC_INIT.replace("{bundle_id}", "gamma") + "\nimport helpers_gamma\n",
        "helpers_gamma.py": "X = 1\n",
    }
    registry = BundleRegistry(descriptors_for({"gamma": path_entry(folder_bundle("gamma", files))}))
    (outcome,) = await registry.start()
    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error.code == "bundle_import_failed"
    assert "from . import helpers_gamma" in outcome.error.message
    assert outcome.error.file is not None
    assert outcome.error.file.endswith("__init__.py")


@pytest.mark.parametrize("ending", ["raise SystemExit(3)", "import sys; sys.exit('bye')", "raise GeneratorExit"])
async def test_a_bundle_that_exits_on_import_fails_to_load_and_the_host_goes_on(
    folder_bundle: FolderBundle, descriptors_for: Descriptors, ending: str
) -> None:
    folders = {
        "alpha": folder_bundle("alpha"),
        "quitter": folder_bundle(
            "quitter", {"__init__.py": BASIC_INIT.replace("{bundle_id}", "quitter") + f"\n{ending}\n"}
        ),
    }
    registry = BundleRegistry(descriptors_for({k: path_entry(v) for k, v in folders.items()}))
    outcomes = {outcome.bundle_id: outcome for outcome in await registry.start()}
    assert outcomes["alpha"].ok
    failed = outcomes["quitter"]
    assert not failed.ok
    assert failed.error is not None
    assert failed.error.code == "bundle_import_failed"
    assert await call_answer(registry, "alpha") == "v1"
    await registry.close()


async def test_reload_swaps_in_new_code(folder_bundle: FolderBundle, descriptors_for: Descriptors) -> None:
    folder = folder_bundle("alpha")
    registry = BundleRegistry(descriptors_for({"alpha": path_entry(folder)}))
    await registry.start()
    (folder / "__init__.py").write_text((folder / "__init__.py").read_text().replace('"v1"', '"v2"'))
    outcome = await registry.reload("alpha")
    assert (outcome.ok, outcome.generation) == (True, 2)
    assert await call_answer(registry, "alpha") == "v2"
    assert "berth_bundles.alpha.g1" not in sys.modules
    await registry.close()


async def test_a_syntax_error_keeps_the_old_generation_serving_and_names_file_and_line(
    folder_bundle: FolderBundle, descriptors_for: Descriptors
) -> None:
    folder = folder_bundle("alpha")
    registry = BundleRegistry(descriptors_for({"alpha": path_entry(folder)}))
    await registry.start()
    (folder / "broken.py").write_text("x = 1\ndef oops(:\n")
    (folder / "__init__.py").write_text((folder / "__init__.py").read_text() + "\nfrom . import broken\n")
    outcome = await registry.reload("alpha")
    assert not outcome.ok
    assert outcome.error is not None
    assert (outcome.error.code, outcome.error.line) == ("bundle_import_failed", 2)
    assert outcome.error.file == str(folder / "broken.py")
    assert "SyntaxError" in outcome.error.message
    assert await call_answer(registry, "alpha") == "v1"
    (status,) = configured_statuses(registry)
    assert (status.state, status.generation) == ("loaded", 1)
    assert status.error == outcome.error
    (folder / "broken.py").write_text("x = 1\n")
    fixed = await registry.reload("alpha")
    assert fixed.ok
    assert configured_statuses(registry)[0].error is None
    await registry.close()


async def test_in_flight_work_finishes_on_its_generation_which_unloads_after(
    folder_bundle: FolderBundle, descriptors_for: Descriptors
) -> None:
    files = {
        "__init__.py": BASIC_INIT.replace("{bundle_id}", "alpha")
        + """
UNLOADED = []

@hookimpl
async def berth_on_unload(ctx):
    UNLOADED.append(ctx.generation)
"""
    }
    folder = folder_bundle("alpha", files)
    registry = BundleRegistry(descriptors_for({"alpha": path_entry(folder)}))
    await registry.start()
    first_module = registry.current("alpha").manager.get_plugin("alpha.g1")
    async with registry.use("alpha") as pinned:
        (folder / "__init__.py").write_text((folder / "__init__.py").read_text().replace('"v1"', '"v2"'))
        assert (await registry.reload("alpha")).ok
        assert pinned.number == 1
        assert pinned.retired
        assert not pinned.unloaded
        entry = pinned.catalog.get("alpha.answer")
        assert entry is not None
        assert entry.spec is not None
        assert await entry.spec.invoke({}) == "v1"
        assert await call_answer(registry, "alpha") == "v2"
        assert registry.retired_generations == [pinned]
        assert first_module.UNLOADED == []
    assert pinned.unloaded
    assert first_module.UNLOADED == [1]
    assert registry.retired_generations == []
    await registry.close()


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        ("\n@hookimpl\ndef berth_toolz(ctx):\n    return []\n", "bundle_hooks_invalid", "berth_toolz"),
        (
            "\n@hookimpl\ndef berth_widgets(ctx):\n    from berth import Widget\n"
            "    return [Widget(alias='w', title='W', static_dir='/nonexistent')]\n",
            "bundle_widget_invalid",
            "does not exist",
        ),
        (
            "\n@hookimpl\ndef berth_skills(ctx):\n    return ['missing-skill']\n",
            "bundle_skill_invalid",
            "SKILL.md: missing",
        ),
        (
            "\n@hookimpl\nasync def berth_on_load(ctx):\n    raise RuntimeError('database down')\n",
            "bundle_on_load_failed",
            "database down",
        ),
        (
            "\n@hookimpl\nasync def berth_on_load(ctx):\n    import asyncio\n    await asyncio.Event().wait()\n",
            "bundle_on_load_timeout",
            "within 0.2 s",
        ),
        (
            "\n@hookimpl(tryfirst=True)\ndef berth_tools(ctx):\n    return ['not a tool']\n",
            "bundle_tools_invalid",
            "not a @tool function",
        ),
        (
            "\n@hookimpl(tryfirst=True)\ndef berth_agent(ctx):\n    raise KeyError('instructions')\n",
            "bundle_agent_invalid",
            "KeyError",
        ),
        (
            "\n@hookimpl\ndef berth_knowledge(ctx):\n    from berth import KnowledgeSpace, MarkdownFolder\n"
            "    return [KnowledgeSpace(name='docs', indexer=MarkdownFolder('a')),"
            " KnowledgeSpace(name='docs', indexer=MarkdownFolder('b'))]\n",
            "bundle_knowledge_invalid",
            "knowledge space 'docs' is contributed twice",
        ),
        (
            "\n@hookimpl\ndef berth_knowledge(ctx):\n    from berth import KnowledgeSpace\n"
            "    return [KnowledgeSpace(name='docs', indexer=object())]\n",
            "bundle_knowledge_invalid",
            "is not a knowledge indexer: it needs files() and chunk(file, data)",
        ),
        (
            "\n@hookimpl\ndef berth_skills(ctx):\n    from berth import Skill\n"
            "    return [Skill(id='triage', description='Triage.', instructions='...', folder='.',"
            " knowledge=['runbooks'])]\n",
            "bundle_skill_invalid",
            "skill 'triage' names knowledge space 'runbooks', which the bundle does not have (spaces: none)",
        ),
    ],
)
async def test_validation_failures_have_stable_codes(
    folder_bundle: FolderBundle, descriptors_for: Descriptors, extra: str, code: str, message: str
) -> None:
    files = {"__init__.py": BASIC_INIT.replace("{bundle_id}", "alpha") + extra}
    registry = BundleRegistry(descriptors_for({"alpha": path_entry(folder_bundle("alpha", files))}), load_timeout_s=0.2)
    (outcome,) = await registry.start()
    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error.code == code
    assert message in outcome.error.message
    with pytest.raises(ConfigError, match="has no loaded generation"):
        registry.current("alpha")


async def test_bundle_id_must_match_the_descriptor(folder_bundle: FolderBundle, descriptors_for: Descriptors) -> None:
    files = {"__init__.py": BASIC_INIT.replace("{bundle_id}", "other")}
    registry = BundleRegistry(descriptors_for({"alpha": path_entry(folder_bundle("alpha", files))}))
    (outcome,) = await registry.start()
    assert outcome.error is not None
    assert outcome.error.code == "bundle_id_mismatch"


async def test_props_are_validated_in_every_scope_that_uses_the_bundle(
    folder_bundle: FolderBundle, descriptors_for: Descriptors
) -> None:
    config = descriptors_for(
        {"alpha": path_entry(folder_bundle("alpha"))},
        tenants={"acme/support": {"bundles": ["alpha"], "props": {"alpha": {"greeting": ["not", "text"]}}}},
    )
    registry = BundleRegistry(config)
    (outcome,) = await registry.start()
    assert outcome.error is not None
    assert outcome.error.code == "bundle_props_invalid"
    assert "tenants.acme/support.props.alpha.greeting" in outcome.error.message
    assert "bundle 'alpha'" in outcome.error.message


async def test_scoped_context_carries_scoped_props(folder_bundle: FolderBundle, descriptors_for: Descriptors) -> None:
    config = descriptors_for(
        {"alpha": path_entry(folder_bundle("alpha"), props={"greeting": "hi"})},
        tenants={"acme": {"bundles": ["alpha"]}, "acme/support": {"props": {"alpha": {"greeting": "support hi"}}}},
    )
    registry = BundleRegistry(config)
    await registry.start()
    generation = registry.current("alpha")
    assert generation.context.props.greeting == "hi"  # type: ignore[attr-defined]
    support = registry.context_for(generation, "acme", "support")
    assert (support.tenant, support.project, support.props.greeting) == ("acme", "support", "support hi")  # type: ignore[attr-defined]
    assert generation.hooks.agent(support).instructions == "support hi"
    assert [s.tenants for s in configured_statuses(registry)] == [("acme/sales", "acme/support")]
    await registry.close()


async def test_invisible_scope_is_refused(folder_bundle: FolderBundle, descriptors_for: Descriptors) -> None:
    config = descriptors_for(
        {"alpha": path_entry(folder_bundle("alpha"))}, tenants={"acme/support": {"bundles": ["alpha"]}}
    )
    registry = BundleRegistry(config)
    await registry.start()
    with pytest.raises(ConfigError, match="not enabled for acme/sales"):
        registry.context_for(registry.current("alpha"), "acme", "sales")
    await registry.close()


async def test_props_change_applies_without_reimport(
    folder_bundle: FolderBundle, descriptors_for: Descriptors, tmp_path: Path
) -> None:
    folder = folder_bundle("alpha")
    registry = BundleRegistry(descriptors_for({"alpha": path_entry(folder, props={"greeting": "one"})}))
    await registry.start()
    module = registry.current("alpha").manager.get_plugin("alpha.g1")
    changed = descriptors_for({"alpha": path_entry(folder, props={"greeting": "two"})})
    (outcome,) = await registry.apply_configuration(changed)
    assert (outcome.ok, outcome.generation) == (True, 1)
    generation = registry.current("alpha")
    assert generation.manager.get_plugin("alpha.g1") is module
    assert generation.context.props.greeting == "two"  # type: ignore[attr-defined]
    await registry.close()


async def test_an_invalid_props_change_keeps_the_previous_configuration(
    folder_bundle: FolderBundle, descriptors_for: Descriptors
) -> None:
    folder = folder_bundle("alpha")
    registry = BundleRegistry(descriptors_for({"alpha": path_entry(folder, props={"greeting": "one"})}))
    await registry.start()
    bad = descriptors_for({"alpha": path_entry(folder, props={"greeting": 7, "extra": 1})})
    (outcome,) = await registry.apply_configuration(bad)
    assert not outcome.ok
    assert registry.current("alpha").context.props.greeting == "one"  # type: ignore[attr-defined]
    assert registry.config is not bad
    await registry.close()


async def test_new_and_removed_bundles_follow_the_descriptors(
    folder_bundle: FolderBundle, descriptors_for: Descriptors
) -> None:
    alpha, beta = folder_bundle("alpha"), folder_bundle("beta")
    registry = BundleRegistry(descriptors_for({"alpha": path_entry(alpha)}))
    await registry.start()
    await registry.apply_configuration(descriptors_for({"beta": path_entry(beta)}))
    assert [s.id for s in configured_statuses(registry)] == ["beta"]
    assert registry.current("beta").number == 1
    with pytest.raises(ConfigError):
        registry.current("alpha")
    await registry.close()


async def test_reloading_an_unknown_bundle_is_a_clear_error(descriptors_for: Descriptors) -> None:
    registry = BundleRegistry(descriptors_for({}))
    with pytest.raises(ConfigError, match=r"not in bundles\.yaml"):
        await registry.reload("ghost")


async def test_a_missing_entry_point_says_to_install_it(descriptors_for: Descriptors) -> None:
    registry = BundleRegistry(descriptors_for({"ghost": {"source": {"entry_point": "ghost"}}}))
    (outcome,) = await registry.start()
    assert outcome.error is not None
    assert outcome.error.code == "bundle_not_installed"
    assert "pip install" in outcome.error.message


async def test_same_size_edits_within_one_second_reload_the_new_code(
    folder_bundle: FolderBundle, descriptors_for: Descriptors, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    files = {
        "__init__.py": BASIC_INIT.replace("{bundle_id}", "alpha").replace('return "v1"', "return impl.VALUE")
        + "\nfrom . import impl\n",
        "impl.py": 'VALUE = "r1"\n',
    }
    folder = folder_bundle("alpha", files)
    registry = BundleRegistry(descriptors_for({"alpha": path_entry(folder)}))
    await registry.start()
    for attempt in range(2, 6):
        (folder / "impl.py").write_text(f'VALUE = "r{attempt}"\n')
        assert (await registry.reload("alpha")).ok
        assert await call_answer(registry, "alpha") == f"r{attempt}"
    assert not (folder / "__pycache__").exists()
    await registry.close()


async def test_installed_bundles_that_bundles_yaml_does_not_name_are_listed_as_not_enabled(
    descriptors_for: Callable[..., Configuration],
) -> None:
    registry = BundleRegistry(descriptors_for({"hello": {"source": {"entry_point": "hello"}}}))
    await registry.start()
    try:
        rows = {status.id: status for status in registry.statuses()}
    finally:
        await registry.close()
    assert rows["hello"].state == "loaded"
    for installed in ("docs", "ops-copilot"):  # the example bundles' entry points, installed but not named
        assert rows[installed].state == "not_enabled"
        assert rows[installed].source == f"entry_point:{installed}"
        assert rows[installed].version == "1.0.0"
        assert rows[installed].generation is None and rows[installed].tenants == ()


def test_bundles_list_shows_installed_but_not_enabled_bundles(tmp_path: Path) -> None:
    descriptors = tmp_path / "descriptors"
    descriptors.mkdir()
    (descriptors / "bundles.yaml").write_text(
        "bundles:\n  hello:\n    source: {entry_point: hello}\ntenants:\n  default/default:\n    bundles: [hello]\n"
    )
    result = subprocess.run(
        [str(Path(sys.executable).parent / "berth"), "bundles", "list", "--descriptors", str(descriptors)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line and not line.startswith("ID ")}
    assert "installed (not enabled)" in rows["ops-copilot"]
    assert "loaded" in rows["hello"]
    assert "installed but not enabled: docs, ops-copilot" in result.stdout
