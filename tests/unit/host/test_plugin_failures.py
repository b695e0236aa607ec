"""A platform plugin that fails is reported once, left out, and never takes the host down."""

from __future__ import annotations

import importlib
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
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


def install_distribution(site: Path, entry_point: str, module: str, source: str, attribute: str = "") -> None:
    """Write ``module`` and a dist-info declaring it (or its ``attribute``) in ``berth.plugins``, as pip would."""
    (site / f"{module}.py").write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
    distribution = module.replace("_", "-")
    info = site / f"{module}-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.3\n", encoding="utf-8")
    target = f"{module}:{attribute}" if attribute else module
    (info / "entry_points.txt").write_text(f"[berth.plugins]\n{entry_point} = {target}\n", encoding="utf-8")


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


def berth_environment(site: Path) -> dict[str, str]:
    """This process's environment without ``BERTH_*``, with ``site`` first on the path (the rest kept: a
    worktree's sources stay ahead of the installed ones)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return environment


def run_berth(site: Path, *arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = berth_environment(site)
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


EXITING_MODULES = {
    "exiting_plugin": '''
        """A platform plugin that ends the process on import, as a careless script would."""
        import sys

        sys.exit(3)
    ''',
    "generator_exit_plugin": """
        raise GeneratorExit("not from a generator")
    """,
    "exiting_hook_plugin": """
        from berth.hooks import hookimpl


        @hookimpl
        def berth_embedders():
            raise SystemExit("no GPU here")
    """,
    "exiting_attribute_plugin": """
        class Plugin:
            def __dir__(self):  # pluggy lists a plugin's attributes to find its hooks
                raise SystemExit(5)


        plugin = Plugin()
    """,
}


@pytest.fixture
def exiting_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_berth_env: None) -> Iterator[Path]:
    """A site folder on ``sys.path`` with plugins that raise ``SystemExit`` or ``GeneratorExit`` (on import, in a
    hook, when pluggy lists their attributes), and the one whose hook raises ``ValueError``."""
    site = tmp_path / "site"
    site.mkdir()
    install_distribution(site, "exits", "exiting_plugin", EXITING_MODULES["exiting_plugin"])
    install_distribution(site, "generator-exit", "generator_exit_plugin", EXITING_MODULES["generator_exit_plugin"])
    install_distribution(site, "exits-in-hook", "exiting_hook_plugin", EXITING_MODULES["exiting_hook_plugin"])
    attribute = EXITING_MODULES["exiting_attribute_plugin"]
    install_distribution(site, "exits-reading", "exiting_attribute_plugin", attribute, attribute="plugin")
    install_distribution(site, "raising-hook", "raising_hook_plugin", BROKEN_MODULES["raising_hook_plugin"])
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(plugins_module, "_reported", set())
    importlib.invalidate_caches()
    yield site
    for module in [*EXITING_MODULES, "raising_hook_plugin"]:
        sys.modules.pop(module, None)


def test_a_plugin_that_exits_on_import_is_left_out_and_the_host_goes_on(exiting_site: Path) -> None:
    plugins = PlatformPlugins.discover()
    records = {r.name: r for r in plugins.records}
    exits, generator_exit = records["exits"], records["generator-exit"]
    assert exits.state == generator_exit.state == "failed"
    assert exits.error is not None and generator_exit.error is not None
    assert (exits.error.code, exits.error.message) == ("plugin_import_failed", "SystemExit: 3")
    assert (exits.error.file, exits.error.line) == (str(exiting_site / "exiting_plugin.py"), 4)
    assert generator_exit.error.message == "GeneratorExit: not from a generator"
    assert records["scripted"].state == "loaded"


def test_a_hook_or_an_attribute_that_exits_leaves_only_that_plugin_out(exiting_site: Path) -> None:
    plugins = PlatformPlugins.discover()
    reading = {r.name: r for r in plugins.records}["exits-reading"]
    assert reading.state == "failed" and reading.error is not None
    assert reading.error.code == "plugin_invalid_hooks"
    assert reading.error.message == "reading its hooks: SystemExit: 5"
    embedders = plugins.embedders()
    in_hook = {r.name: r for r in plugins.records}["exits-in-hook"]
    assert in_hook.state == "failed" and in_hook.error is not None
    assert in_hook.error.code == "plugin_hook_failed"
    assert in_hook.error.message == "berth_embedders: SystemExit: no GPU here"
    assert "builtin" in embedders


def test_a_keyboard_interrupt_on_import_still_stops_the_host(exiting_site: Path) -> None:
    install_distribution(exiting_site, "interrupted", "interrupted_plugin", "raise KeyboardInterrupt\n")
    importlib.invalidate_caches()
    try:
        with pytest.raises(KeyboardInterrupt):
            PlatformPlugins.discover()
    finally:
        sys.modules.pop("interrupted_plugin", None)


def test_plugins_list_goes_on_and_shows_what_the_host_left_out(exiting_site: Path, repo_root: Path) -> None:
    result = run_berth(exiting_site, "plugins", "list", "--format", "json", cwd=repo_root)
    assert result.returncode == 0, result.stderr
    listed = {entry["name"]: entry for entry in json.loads(result.stdout)}
    assert listed["exits"]["state"] == "failed"
    assert listed["exits"]["error"]["code"] == "plugin_import_failed"
    assert listed["exits"]["error"]["message"] == "SystemExit: 3"
    assert listed["exits"]["error"]["file"].endswith("exiting_plugin.py")
    for name, code, message in (
        ("raising-hook", "plugin_hook_failed", "berth_secret_providers: ValueError: no vault address configured"),
        ("exits-in-hook", "plugin_hook_failed", "berth_embedders: SystemExit: no GPU here"),
        ("exits-reading", "plugin_invalid_hooks", "reading its hooks: SystemExit: 5"),
    ):
        assert listed[name]["state"] == "failed", listed[name]  # a hook that fails: left out, so not "loaded"
        assert (listed[name]["error"]["code"], listed[name]["error"]["message"]) == (code, message)
    assert listed["scripted"]["state"] == "loaded"
    table = run_berth(exiting_site, "plugins", "list", cwd=repo_root)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith("raising-hook "))
    assert "failed" in row and "[plugin_hook_failed]" in row


def test_bundles_list_goes_on_beside_a_plugin_that_exits(exiting_site: Path, repo_root: Path) -> None:
    result = run_berth(exiting_site, "bundles", "list", "--descriptors", "descriptors", cwd=repo_root)
    assert result.returncode == 0, result.stderr
    assert "hello" in result.stdout
    assert any("platform plugin 'exits'" in line and "SystemExit: 3" in line for line in result.stderr.splitlines())


def test_berth_run_serves_beside_a_plugin_that_exits(exiting_site: Path, repo_root: Path, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [BERTH, "run", "--demo", "--port", str(port), "--descriptors", "descriptors"]
    command += ["--var", str(tmp_path / "var")]
    log = tmp_path / "berth.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, cwd=repo_root, env=berth_environment(exiting_site), stdout=output, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while not ready(f"http://127.0.0.1:{port}/readyz"):
            assert process.poll() is None, f"berth run exited {process.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(10)
    assert "platform plugin 'exits'" in log.read_text()


def ready(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
