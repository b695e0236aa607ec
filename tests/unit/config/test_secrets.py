"""Secret sources, resolution, bundle scoping, caching — and that no value ever leaks."""

from __future__ import annotations

import io
import json
import logging
import pickle
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from berth.cli import cli
from berth.config import ConfigError, Configuration, DescriptorError, Secret
from berth.config.redaction import install_redaction, redact
from berth.config.secrets import parse_secret_source

pytestmark = pytest.mark.usefixtures("clean_berth_env")

PLATFORM_VALUE = "sk-ant-platform-5f1e2d3c4b5a"
DOCS_VALUE = "docs-search-0a9b8c7d6e5f"
ACME_DOCS_VALUE = "acme-docs-search-112233445566"
LITERAL_DSN = "postgres://berth:hunter2-xyz@db.internal/berth"


@pytest.fixture
def descriptors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "descriptors"
    folder.mkdir()
    (folder / "pg_password").write_text("pg-file-secret-998877\n")
    (folder / "assembly.yaml").write_text(
        "platform:\n"
        "  storage:\n"
        "    kind: distributed\n"
        f"    postgres: {{dsn: '{LITERAL_DSN}'}}\n"
        "    redis: {url: 'secret:redis_url'}\n"
        "  models:\n"
        "    default: {model: m, api_key: 'secret:anthropic_api_key'}\n"
        "tenants:\n"
        "  acme: {projects: {support: {}, sales: {}}}\n"
    )
    (folder / "secrets.yaml").write_text(
        "anthropic_api_key: env:TEST_ANTHROPIC_KEY\n"
        "pg_password: file:pg_password\n"
        "redis_url: redis://127.0.0.1:6379/0\n"
        "colon_literal: 'literal:a:b:c'\n"
        "unset: env:TEST_UNSET_VARIABLE\n"
    )
    (folder / "bundles.yaml").write_text(
        "bundles:\n  docs: {source: {entry_point: docs}}\n  hello: {source: {entry_point: hello}}\n"
    )
    (folder / "bundles.secrets.yaml").write_text(
        "bundles:\n"
        "  docs: {search_api_key: env:TEST_DOCS_KEY}\n"
        "  hello: {token: literal:hello-token-4455}\n"
        "tenants:\n"
        "  acme/support: {docs: {search_api_key: env:TEST_ACME_DOCS_KEY}}\n"
    )
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", PLATFORM_VALUE)
    monkeypatch.setenv("TEST_DOCS_KEY", DOCS_VALUE)
    monkeypatch.setenv("TEST_ACME_DOCS_KEY", ACME_DOCS_VALUE)
    monkeypatch.delenv("TEST_UNSET_VARIABLE", raising=False)
    return folder


@pytest.fixture
def config(descriptors: Path) -> Configuration:
    return Configuration.load(descriptors)


def test_env_source_reads_the_variable(config: Configuration) -> None:
    assert config.secret("anthropic_api_key").reveal() == PLATFORM_VALUE


def test_file_source_is_relative_to_the_descriptors_and_drops_the_newline(config: Configuration) -> None:
    assert config.secret("pg_password").reveal() == "pg-file-secret-998877"


def test_file_source_accepts_an_absolute_path(tmp_path: Path, descriptors: Path) -> None:
    secret_file = tmp_path / "abs_secret"
    secret_file.write_text("absolute-value-7766")
    with (descriptors / "secrets.yaml").open("a") as handle:
        handle.write(f"absolute: file:{secret_file}\n")
    assert Configuration.load(descriptors).secret("absolute").reveal() == "absolute-value-7766"


def test_a_url_is_a_literal_not_a_provider(config: Configuration) -> None:
    assert config.secret("redis_url").reveal() == "redis://127.0.0.1:6379/0"


def test_literal_prefix_keeps_colons(config: Configuration) -> None:
    assert config.secret("colon_literal").reveal() == "a:b:c"


def test_secret_reference_in_a_setting_resolves_through_secrets_yaml(config: Configuration) -> None:
    settings = config.settings_for("acme", "support")
    assert settings.models.default.api_key is not None
    assert config.secret_resolver.resolve_setting(settings.models.default.api_key).reveal() == PLATFORM_VALUE


def test_literal_secret_setting_resolves_to_its_value(config: Configuration) -> None:
    storage = config.settings_for().storage
    assert storage.kind == "distributed"
    assert config.secret_resolver.resolve_setting(storage.postgres.dsn).reveal() == LITERAL_DSN


def test_missing_environment_variable_names_it_and_the_secret(config: Configuration) -> None:
    with pytest.raises(ConfigError) as caught:
        config.secret("unset")
    assert caught.value.code == "secret_missing"
    assert "TEST_UNSET_VARIABLE" in str(caught.value)
    assert "'unset'" in str(caught.value)


def test_missing_file_is_a_clear_error(descriptors: Path) -> None:
    (descriptors / "pg_password").unlink()
    with pytest.raises(ConfigError) as caught:
        Configuration.load(descriptors).secret("pg_password")
    assert caught.value.code == "secret_missing"
    assert "pg_password" in str(caught.value)


def test_undeclared_secret_is_a_clear_error(config: Configuration) -> None:
    with pytest.raises(ConfigError) as caught:
        config.secret("nope")
    assert caught.value.code == "secret_unknown"


def test_values_are_cached_per_process(config: Configuration, monkeypatch: pytest.MonkeyPatch) -> None:
    assert config.secret("anthropic_api_key").reveal() == PLATFORM_VALUE
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", "rotated-value-0000")
    assert config.secret("anthropic_api_key").reveal() == PLATFORM_VALUE


def test_bundle_reads_its_own_secret(config: Configuration) -> None:
    assert config.secrets("acme", "sales", "docs")("b:search_api_key").reveal() == DOCS_VALUE


def test_tenant_override_of_a_bundle_secret_comes_first(config: Configuration) -> None:
    assert config.secrets("acme", "support", "docs")("b:search_api_key").reveal() == ACME_DOCS_VALUE


def test_a_bundle_cannot_read_another_bundles_secret(config: Configuration) -> None:
    hello = config.secrets("acme", "support", "hello")
    assert hello("b:token").reveal() == "hello-token-4455"
    with pytest.raises(ConfigError) as caught:
        hello("b:search_api_key")
    assert caught.value.code == "secret_unknown"
    for attempt in ("b:docs/search_api_key", "b:../docs/search_api_key", "b:docs:search_api_key"):
        with pytest.raises(ConfigError):
            hello(attempt)


def test_bundle_scope_reads_platform_secrets_by_plain_name(config: Configuration) -> None:
    assert config.secrets("acme", "support", "docs")("anthropic_api_key").reveal() == PLATFORM_VALUE


def test_b_secrets_need_a_bundle(config: Configuration) -> None:
    with pytest.raises(ConfigError) as caught:
        config.secrets("acme", "support")("b:search_api_key")
    assert caught.value.code == "secret_forbidden"


def test_unknown_provider_is_refused_but_host_port_is_a_literal() -> None:
    assert parse_secret_source("localhost:5432", []).provider is None
    assert parse_secret_source("aws-sm:prod/key", ["aws-sm"]).provider == "aws-sm"
    with pytest.raises(ConfigError, match="unknown secret provider 'vault'"):
        parse_secret_source("vault:kv/data/x", ["aws-sm"])


def test_unknown_provider_in_secrets_yaml_is_a_descriptor_error(descriptors: Path) -> None:
    with (descriptors / "secrets.yaml").open("a") as handle:
        handle.write("vaulted: vault:kv/x\n")
    with pytest.raises(DescriptorError) as caught:
        Configuration.load(descriptors)
    (problem,) = caught.value.problems
    assert (problem.field, problem.line) == ("vaulted", 6)


# -- nothing leaks ------------------------------------------------------------------------------

ALL_VALUES = [PLATFORM_VALUE, DOCS_VALUE, ACME_DOCS_VALUE, LITERAL_DSN, "pg-file-secret-998877", "hunter2-xyz"]


def assert_no_secret_in(text: str) -> None:
    for value in ALL_VALUES:
        assert value not in text


def test_a_secret_never_prints_itself(config: Configuration) -> None:
    secret = config.secret("anthropic_api_key")
    rendered = [repr(secret), str(secret), f"{secret}", f"{secret!r}", str.format("{}", secret), f"{secret:>40}"]
    for text in rendered:
        assert_no_secret_in(text)
    assert "***" in str(secret)
    assert "anthropic_api_key" in repr(secret)
    with pytest.raises(TypeError):
        pickle.dumps(secret)
    with pytest.raises(TypeError):
        json.dumps(secret)


def test_settings_reprs_and_dumps_never_contain_a_literal_secret(config: Configuration) -> None:
    settings = config.settings_for("acme", "support")
    assert_no_secret_in(repr(settings))
    assert_no_secret_in(str(settings))
    assert_no_secret_in(json.dumps(settings.model_dump(mode="json")))
    assert_no_secret_in(repr(settings.model_dump()))
    assert_no_secret_in(repr(config.descriptors))
    assert "secret:anthropic_api_key" in repr(settings)


def test_descriptors_show_masks_everything(descriptors: Path) -> None:
    runner = CliRunner()
    for args in ([], ["--tenant", "acme", "--project", "support"], ["--format", "json"]):
        result = runner.invoke(cli, ["descriptors", "show", str(descriptors), *args])
        assert result.exit_code == 0, result.output
        assert_no_secret_in(result.output)
        assert "hello-token-4455" not in result.output
    shown = yaml.safe_load(runner.invoke(cli, ["descriptors", "show", str(descriptors)]).output)
    assert shown["secrets"]["anthropic_api_key"] == "env:TEST_ANTHROPIC_KEY"
    assert shown["secrets"]["redis_url"] == "***"
    assert shown["platform"]["storage"]["postgres"]["dsn"] == "***"
    assert shown["bundles_secrets"]["hello"]["token"] == "***"


def test_resolution_errors_never_contain_values(config: Configuration, descriptors: Path) -> None:
    config.secret("anthropic_api_key")
    with pytest.raises(ConfigError) as caught:
        config.secret("unset")
    assert_no_secret_in(str(caught.value))


def test_log_lines_that_embed_a_revealed_value_are_masked(config: Configuration) -> None:
    stream = io.StringIO()
    logger = logging.getLogger("berth.test.redaction")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        install_redaction(logger)
        value = config.secret("anthropic_api_key").reveal()
        logger.warning("calling with key %s", value)
        logger.warning(f"f-string with {value} inside")
        try:
            raise RuntimeError(f"library echoed {value}")
        except RuntimeError:
            logger.exception("failed")
        logger.warning("secret object %s", config.secret("anthropic_api_key"))
    finally:
        logger.removeHandler(handler)
    output = stream.getvalue()
    assert_no_secret_in(output)
    assert output.count("***") >= 4
    assert "library echoed ***" in output


def test_redact_masks_longest_value_first(config: Configuration) -> None:
    Secret("short", "abcd-1234")
    Secret("long", "abcd-1234-efgh")
    assert redact("x abcd-1234-efgh y") == "x *** y"
