"""Platform plugins: entry-point discovery, allow/deny lists, and refusing duplicate names."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace

import pytest

from berth.config.secrets import SecretProvider
from berth.hooks import hookimpl
from berth.host.plugins import PlatformPlugins, PluginConflictError, plugin_selection


class EchoProvider:
    def resolve(self, ref: str) -> str:
        return ref[::-1]


def echo_factory(options: Mapping[str, object]) -> SecretProvider:
    return EchoProvider()


def provider_plugin(prefix: str) -> SimpleNamespace:
    @hookimpl
    def berth_secret_providers() -> dict[str, object]:
        return {prefix: echo_factory}

    return SimpleNamespace(berth_secret_providers=berth_secret_providers)


DEFAULT_PLUGINS = {"anthropic", "openai-compatible", "scripted", "web", "embedded", "builtin-embedder"}


def test_default_plugins_register_through_the_entry_point_group(clean_berth_env: None) -> None:
    plugins = PlatformPlugins.discover()
    packages = {r.name: r.package for r in plugins.records}
    assert set(packages) >= DEFAULT_PLUGINS
    assert {packages[name] for name in DEFAULT_PLUGINS} == {"berth-platform"}
    assert {"anthropic", "openai-compatible", "scripted"} <= set(plugins.model_providers())
    assert "web" in plugins.tool_packs()
    assert "embedded" in plugins.storage_backends()
    assert "builtin" in plugins.embedders()


def test_two_plugins_registering_one_name_are_refused_naming_both_packages() -> None:
    plugins = PlatformPlugins()
    plugins.register(provider_plugin("vault"), name="vault-a", package="acme-vault")
    plugins.register(provider_plugin("vault"), name="vault-b", package="globex-vault")
    with pytest.raises(PluginConflictError) as caught:
        plugins.secret_providers()
    assert caught.value.code == "plugin_conflict"
    assert "'acme-vault' and 'globex-vault' both register 'vault'" in str(caught.value)


def test_a_plugin_may_not_replace_a_builtin_secret_source() -> None:
    plugins = PlatformPlugins()
    plugins.register(provider_plugin("env"), name="sneaky", package="sneaky-env")
    with pytest.raises(PluginConflictError, match="'sneaky-env' registers 'env'"):
        plugins.secret_providers()


def test_unregistering_a_plugin_removes_its_backends() -> None:
    plugins = PlatformPlugins()
    plugins.register(provider_plugin("vault"), name="vault", package="acme-vault")
    try:
        assert "vault" in plugins.secret_providers()
    finally:
        plugins.unregister("vault")
    assert plugins.secret_providers() == {}


def test_disable_list_removes_named_plugins(monkeypatch: pytest.MonkeyPatch, clean_berth_env: None) -> None:
    monkeypatch.setenv("BERTH_DISABLE_PLUGINS", "web, other")
    assert plugin_selection(["scripted", "web"]) == ["scripted"]
    states = {r.name: r.state for r in PlatformPlugins.discover().records}
    assert states["web"] == "disabled"
    assert states["scripted"] == "loaded"


def test_allow_list_keeps_only_named_plugins(monkeypatch: pytest.MonkeyPatch, clean_berth_env: None) -> None:
    monkeypatch.setenv("BERTH_PLUGINS", "web")
    assert plugin_selection(["aws-sm", "web", "docker"]) == ["web"]


def test_every_platform_hook_has_a_typed_accessor() -> None:
    plugins = PlatformPlugins()
    for accessor in (
        plugins.storage_backends,
        plugins.model_providers,
        plugins.exec_backends,
        plugins.tool_packs,
        plugins.embedders,
        plugins.secret_providers,
    ):
        assert accessor() == {}
