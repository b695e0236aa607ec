"""A platform plugin that fails is reported once, left out, and never takes the host down."""

from __future__ import annotations

import importlib
import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.host import plugins as plugins_module
from berth.host.plugins import PlatformPlugins

BERTH = str(Path(sys.executable).parent / "berth")

BROKEN_MODULES = {
    "broken_plugin": '''
        """A platform plugin whose import fails."""

        raise RuntimeError("boom")
    ''',
    "wrong_args_plugin": """
        from berth.hooks import hookimpl


        @hookimpl
        def berth_embedders(ctx):
            return {}
    """,
    "misspelt_plugin": """
        from berth.hooks import hookimpl


        @hookimpl
        def berth_embeders():
            return {}
    """,
    "raising_hook_plugin": """
        from berth.hooks import hookimpl


        @hookimpl
        def berth_secret_providers():
            raise ValueError("no vault address configured")
    """,
}
ENTRY_POINTS = {
    "broken": "broken_plugin",
    "wrong-args": "wrong_args_plugin",
    "misspelt": "misspelt_plugin",
    "raising-hook": "raising_hook_plugin",
}


def install_distribution(site: Path, entry_point: str, module: str, source: str) -> None:
    """Write ``module`` and a dist-info declaring it in ``berth.plugins``, as pip would install it."""
    (site / f"{module}.py").write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
    distribution = module.replace("_", "-")
    info = site / f"{module}-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.3\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[berth.plugins]\n{entry_point} = {module}\n", encoding="utf-8")


@pytest.fixture
def broken_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_berth_env: None) -> Iterator[Path]:
    """A site folder on ``sys.path`` holding four installed plugins that fail in four ways."""
    site = tmp_path / "site"
    site.mkdir()
    for entry_point, module in ENTRY_POINTS.items():
        install_distribution(site, entry_point, module, BROKEN_MODULES[module])
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(plugins_module, "_reported", set())
    importlib.invalidate_caches()
    yield site
    for module in ENTRY_POINTS.values():
        sys.modules.pop(module, None)


def test_a_plugin_that_raises_on_import_is_left_out_with_its_file_and_line(broken_site: Path) -> None:
    plugins = PlatformPlugins.discover()
    record = {r.name: r for r in plugins.records}["broken"]
    assert (record.state, record.package, record.version) == ("failed", "broken-plugin", "0.3")
    assert record.error is not None
    assert record.error.code == "plugin_import_failed"
    assert record.error.message == "RuntimeError: boom"
    assert (record.error.file, record.error.line) == (str(broken_site / "broken_plugin.py"), 3)


def test_hooks_with_wrong_signatures_or_names_are_refused_by_name(broken_site: Path) -> None:
    records = {r.name: r for r in PlatformPlugins.discover().records}
    wrong_args, misspelt = records["wrong-args"], records["misspelt"]
    assert wrong_args.state == misspelt.state == "failed"
    assert wrong_args.error is not None and misspelt.error is not None
    assert wrong_args.error.code == misspelt.error.code == "plugin_invalid_hooks"
    assert "PluginValidationError" in wrong_args.error.message
    assert "berth_embedders" in wrong_args.error.message and "ctx" in wrong_args.error.message
    assert (wrong_args.error.file, wrong_args.error.line) == (str(broken_site / "wrong_args_plugin.py"), 4)
    assert misspelt.error.message == "unknown hook(s): berth_embeders (did you mean berth_embedders?)"
    assert misspelt.error.line == 4


def test_a_hook_that_raises_when_called_drops_only_that_plugin(broken_site: Path) -> None:
    plugins = PlatformPlugins.discover()
    providers = plugins.secret_providers()
    record = {r.name: r for r in plugins.records}["raising-hook"]
    assert record.state == "failed"
    assert record.error is not None and record.error.code == "plugin_hook_failed"
    assert record.error.message == "berth_secret_providers: ValueError: no vault address configured"
    assert record.error.line == 6
    assert "raising-hook" not in {r.name for r in plugins.records if r.state == "loaded"}
    assert isinstance(providers, dict)


def test_the_default_plugins_still_load_beside_broken_ones(broken_site: Path) -> None:
    plugins = PlatformPlugins.discover()
    loaded = {r.name for r in plugins.records if r.state == "loaded"}
    assert {"anthropic", "scripted", "web", "embedded", "builtin-embedder"} <= loaded
    assert "scripted" in plugins.model_providers()
    assert "builtin" in plugins.embedders()


def test_each_failure_is_logged_once_at_warning(broken_site: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="berth.host.plugins"):
        PlatformPlugins.discover()
        PlatformPlugins.discover()
    about_broken = [r for r in caplog.records if "'broken'" in r.getMessage()]
    assert len(about_broken) == 1
    message = about_broken[0].getMessage()
    assert about_broken[0].levelno == logging.WARNING
    assert "broken-plugin 0.3" in message
    assert f"{broken_site / 'broken_plugin.py'}:3" in message


def test_a_disabled_plugin_is_listed_as_disabled(broken_site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_DISABLE_PLUGINS", "broken")
    record = {r.name: r for r in PlatformPlugins.discover().records}["broken"]
    assert (record.state, record.error) == ("disabled", None)


def run_berth(site: Path, *arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")}
    environment["PYTHONPATH"] = str(site)
    return subprocess.run(
        [BERTH, *arguments], cwd=cwd, env=environment, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    "arguments",
    [("descriptors", "check", "descriptors"), ("bundles", "list", "--descriptors", "descriptors")],
    ids=["descriptors-check", "bundles-list"],
)
def test_commands_go_on_and_report_the_plugin(broken_site: Path, repo_root: Path, arguments: tuple[str, ...]) -> None:
    result = run_berth(broken_site, *arguments, cwd=repo_root)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "platform plugin 'broken'" in line]
    assert len(warnings) == 1
    assert "broken-plugin 0.3" in warnings[0] and "broken_plugin.py:3" in warnings[0]


def test_plugins_list_shows_every_plugin_with_state_and_error(broken_site: Path, repo_root: Path) -> None:
    result = run_berth(broken_site, "plugins", "list", "--format", "json", cwd=repo_root)
    assert result.returncode == 0, result.stderr
    listed = {entry["name"]: entry for entry in json.loads(result.stdout)}
    assert listed["broken"]["state"] == "failed"
    assert listed["broken"]["error"]["file"].endswith("broken_plugin.py")
    assert listed["broken"]["error"]["line"] == 3
    assert listed["misspelt"]["error"]["code"] == "plugin_invalid_hooks"
    assert listed["scripted"]["state"] == "loaded"
    assert "model_providers" in listed["scripted"]["hooks"]
    table = run_berth(broken_site, "plugins", "list", cwd=repo_root)
    assert table.returncode == 0
    broken_row = next(line for line in table.stdout.splitlines() if line.startswith("broken "))
    assert "failed" in broken_row and "[plugin_import_failed] RuntimeError: boom" in broken_row
