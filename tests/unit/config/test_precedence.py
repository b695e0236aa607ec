"""Every branch of the precedence resolver: default < platform < tenant < project < environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.config import ConfigError, Configuration, DescriptorError
from berth.config.merge import deep_merge

pytestmark = pytest.mark.usefixtures("clean_berth_env")


def write_assembly(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "assembly.yaml").write_text(text)
    return folder


ASSEMBLY = """
platform:
  react: {max_iterations: 10, cache_ttl_seconds: 120}
  models:
    default: {provider: anthropic, model: platform-model}
    roles:
      summarizer: {provider: anthropic, model: platform-summarizer}
tenants:
  acme:
    react: {max_iterations: 20}
    models:
      roles:
        summarizer: {model: tenant-summarizer}
    projects:
      support: {react: {max_iterations: 30}}
      plain: {}
  quiet:
    projects:
      main: {}
"""


@pytest.fixture
def config(tmp_path: Path) -> Configuration:
    return Configuration.load(write_assembly(tmp_path / "d", ASSEMBLY))


def test_built_in_default_applies_when_nothing_sets_a_value(config: Configuration) -> None:
    assert config.settings_for("quiet", "main").react.context_budget_tokens == 150_000


def test_platform_value_beats_the_built_in_default(config: Configuration) -> None:
    assert config.settings_for("quiet", "main").react.max_iterations == 10


def test_tenant_value_beats_the_platform(config: Configuration) -> None:
    assert config.settings_for("acme", "plain").react.max_iterations == 20
    assert config.settings_for("acme").react.max_iterations == 20


def test_project_value_beats_the_tenant(config: Configuration) -> None:
    assert config.settings_for("acme", "support").react.max_iterations == 30


def test_fields_an_override_does_not_name_are_inherited(config: Configuration) -> None:
    assert config.settings_for("acme", "support").react.cache_ttl_seconds == 120


def test_nested_mappings_merge_key_by_key(config: Configuration) -> None:
    summarizer = config.settings_for("acme", "support").models.roles["summarizer"]
    assert (summarizer.provider, summarizer.model) == ("anthropic", "tenant-summarizer")


def test_environment_variable_beats_a_project_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_PLATFORM__REACT__MAX_ITERATIONS", "99")
    config = Configuration.load(write_assembly(tmp_path / "d", ASSEMBLY))
    assert config.settings_for("acme", "support").react.max_iterations == 99
    assert config.settings_for("quiet", "main").react.max_iterations == 99
    assert config.settings_for("acme", "support").react.cache_ttl_seconds == 120


def test_environment_variable_names_are_case_insensitive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("berth_platform__react__cache_ttl_seconds", "7")
    config = Configuration.load(write_assembly(tmp_path / "d", ASSEMBLY))
    assert config.settings_for("acme", "support").react.cache_ttl_seconds == 7


def test_environment_reaches_deep_into_mappings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_PLATFORM__MODELS__ROLES__SUMMARIZER__MODEL", "env-summarizer")
    config = Configuration.load(write_assembly(tmp_path / "d", ASSEMBLY))
    summarizer = config.settings_for("acme", "support").models.roles["summarizer"]
    assert summarizer.model == "env-summarizer"
    assert summarizer.provider == "anthropic"


def test_environment_overrides_the_embedded_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_PLATFORM__STORAGE__ROOT", "/srv/berth")
    config = Configuration.load(None)
    assert config.settings_for().storage.root == "/srv/berth"


def test_embedded_defaults_resolve_with_no_files_at_all() -> None:
    config = Configuration.load(None)
    settings = config.settings_for("default", "default")
    assert settings.storage.kind == "embedded"
    assert settings.storage.root == "./var"
    assert settings.models.default.provider == "anthropic"
    assert settings.exec.default_profile == "sandbox"
    gateway = config.descriptors.gateway
    assert gateway.auth.mode == "none"
    assert gateway.listen.host == "127.0.0.1"


def test_an_invalid_environment_value_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERTH_PLATFORM__REACT__MAX_ITERATIONS", "lots")
    with pytest.raises(DescriptorError) as caught:
        Configuration.load(write_assembly(tmp_path / "d", ASSEMBLY))
    (problem,) = caught.value.problems
    assert (problem.file, problem.field) == ("environment", "BERTH_PLATFORM__REACT__MAX_ITERATIONS")
    assert problem.message == "expected a whole number, got the text 'lots'"


def test_the_resident_conversations_budget_defaults_to_256_mib_and_is_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = Configuration.load(write_assembly(tmp_path / "d", ASSEMBLY))
    assert config.settings_for().resident_conversations.max_bytes == 256 * 1024 * 1024
    monkeypatch.setenv("BERTH_PLATFORM__RESIDENT_CONVERSATIONS__MAX_MB", "0.5")
    config = Configuration.load(write_assembly(tmp_path / "e", ASSEMBLY))
    assert config.settings_for().resident_conversations.max_bytes == 512 * 1024


def test_a_resident_budget_in_bytes_from_the_environment_names_the_variable_and_the_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BERTH_PLATFORM__RESIDENT_CONVERSATIONS__MAX_MB", "268435456")
    with pytest.raises(DescriptorError) as caught:
        Configuration.load(write_assembly(tmp_path / "d", ASSEMBLY))
    (problem,) = caught.value.problems
    assert (problem.file, problem.field) == ("environment", "BERTH_PLATFORM__RESIDENT_CONVERSATIONS__MAX_MB")
    assert "max_mb is in MiB" in problem.message and "not a number of bytes" in problem.message


def test_an_invalid_project_override_names_its_line(tmp_path: Path) -> None:
    text = ASSEMBLY.replace("support: {react: {max_iterations: 30}}", "support: {react: {max_iterations: 0}}")
    with pytest.raises(DescriptorError) as caught:
        Configuration.load(write_assembly(tmp_path / "d", text))
    (problem,) = caught.value.problems
    assert problem.field == "tenants.acme.projects.support.react.max_iterations"
    assert problem.line == 15


def test_unknown_scope_is_a_config_error(config: Configuration) -> None:
    with pytest.raises(ConfigError) as caught:
        config.settings_for("initech", "main")
    assert caught.value.code == "unknown_scope"
    with pytest.raises(ConfigError):
        config.settings_for("acme", "nope")


def test_settings_are_immutable(config: Configuration) -> None:
    settings = config.settings_for("acme", "support")
    with pytest.raises(ValueError, match="frozen"):
        settings.react.max_iterations = 1  # type: ignore[misc]


def test_deep_merge_replaces_lists_and_merges_mappings() -> None:
    low = {"a": {"x": 1, "y": [1, 2]}, "b": 1}
    high = {"a": {"y": [3]}, "c": None}
    assert deep_merge(low, high) == {"a": {"x": 1, "y": [3]}, "b": 1, "c": None}
    assert low == {"a": {"x": 1, "y": [1, 2]}, "b": 1}


def test_retention_is_off_by_default_and_set_per_tenant_or_project(tmp_path: Path) -> None:
    assembly = """
platform:
  retention: {sweep_interval_s: 600}
tenants:
  acme:
    retention: {conversations_days: 30}
    projects:
      support: {}
      legal: {retention: {conversations_days: null}}
      chat: {retention: {conversations_days: 0.5}}
  quiet:
    projects:
      main: {}
"""
    config = Configuration.load(write_assembly(tmp_path / "d", assembly))
    assert config.settings_for("quiet", "main").retention.conversations_days is None
    assert config.settings_for("acme", "support").retention.conversations_days == 30
    assert config.settings_for("acme", "legal").retention.conversations_days is None  # a project keeps them
    assert config.settings_for("acme", "chat").retention.conversations_days == 0.5
    assert config.settings_for().retention.sweep_interval_s == 600


def test_a_retention_of_zero_days_is_refused_where_it_is_written(tmp_path: Path) -> None:
    assembly = "tenants:\n  acme:\n    retention: {conversations_days: 0}\n    projects:\n      support: {}\n"
    with pytest.raises(DescriptorError) as error:
        Configuration.load(write_assembly(tmp_path / "d", assembly))
    where = "assembly.yaml:3 tenants.acme.retention.conversations_days"
    assert f"{where}: Input should be greater than 0" in str(error.value)
