"""The ``aws-sm`` secret provider against moto's Secrets Manager server on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from berth.config import ConfigError, Configuration
from berth.host.plugins import PlatformPlugins

pytestmark = [pytest.mark.aws, pytest.mark.usefixtures("clean_berth_env")]


@pytest.fixture
def stored_secrets(moto_endpoint: str, aws_credentials: None) -> None:
    client = boto3.client("secretsmanager", region_name="eu-west-1", endpoint_url=moto_endpoint)
    for name, value in {
        "prod/docs/key": "sm-docs-key-5566778899",
        "prod/db": json.dumps({"username": "berth", "password": "sm-db-password-1234"}),
    }.items():
        try:
            client.create_secret(Name=name, SecretString=value)
        except client.exceptions.ResourceExistsException:
            client.put_secret_value(SecretId=name, SecretString=value)


@pytest.fixture
def descriptors(tmp_path: Path, moto_endpoint: str) -> Path:
    (tmp_path / "assembly.yaml").write_text(
        "platform:\n"
        f"  secret_providers: {{aws-sm: {{region: eu-west-1, endpoint_url: '{moto_endpoint}'}}}}\n"
        "tenants:\n  acme: {projects: {support: {}}}\n"
    )
    (tmp_path / "secrets.yaml").write_text(
        "db_password: 'aws-sm:prod/db#password'\nmissing: 'aws-sm:prod/nope'\nno_key: 'aws-sm:prod/db#token'\n"
    )
    (tmp_path / "bundles.yaml").write_text("bundles:\n  docs: {source: {entry_point: docs}}\n")
    (tmp_path / "bundles.secrets.yaml").write_text(
        "bundles:\n  docs: {search_api_key: env:UNUSED}\n"
        "tenants:\n  acme/support: {docs: {search_api_key: 'aws-sm:prod/docs/key'}}\n"
    )
    return tmp_path


@pytest.fixture
def config(descriptors: Path, stored_secrets: None) -> Configuration:
    return Configuration.load(descriptors, secret_providers=PlatformPlugins.discover().secret_providers())


def test_tenant_bundle_secret_is_read_from_secrets_manager(config: Configuration) -> None:
    secret = config.secrets("acme", "support", "docs")("b:search_api_key")
    assert secret.reveal() == "sm-docs-key-5566778899"
    assert "sm-docs-key" not in repr(secret)


def test_one_key_of_a_json_secret(config: Configuration) -> None:
    assert config.secret("db_password").reveal() == "sm-db-password-1234"


def test_a_missing_secret_names_the_id_and_aws_error_only(config: Configuration) -> None:
    with pytest.raises(ConfigError) as caught:
        config.secret("missing")
    assert caught.value.code == "secret_missing"
    assert "prod/nope" in str(caught.value)
    assert "ResourceNotFoundException" in str(caught.value)


def test_a_missing_json_key_never_echoes_the_secret(config: Configuration) -> None:
    with pytest.raises(ConfigError) as caught:
        config.secret("no_key")
    assert "token" in str(caught.value)
    assert "sm-db-password" not in str(caught.value)


def test_values_are_cached_after_the_first_read(config: Configuration, moto_endpoint: str) -> None:
    assert config.secret("db_password").reveal() == "sm-db-password-1234"
    client = boto3.client("secretsmanager", region_name="eu-west-1", endpoint_url=moto_endpoint)
    client.put_secret_value(SecretId="prod/db", SecretString=json.dumps({"password": "rotated"}))
    try:
        assert config.secret("db_password").reveal() == "sm-db-password-1234"
    finally:
        client.put_secret_value(
            SecretId="prod/db", SecretString=json.dumps({"username": "berth", "password": "sm-db-password-1234"})
        )


def test_unknown_provider_option_is_a_clear_error(tmp_path: Path, stored_secrets: None) -> None:
    (tmp_path / "assembly.yaml").write_text("platform:\n  secret_providers: {aws-sm: {regoin: x}}\n")
    (tmp_path / "secrets.yaml").write_text("k: 'aws-sm:prod/db'\n")
    config = Configuration.load(tmp_path, secret_providers=PlatformPlugins.discover().secret_providers())
    with pytest.raises(ConfigError, match=r"unknown option.*regoin"):
        config.secret("k")


def test_the_plugin_registers_aws_sm_through_the_entry_point_group() -> None:
    plugins = PlatformPlugins.discover()
    assert {r.name: r.package for r in plugins.records}["aws-sm"] == "berth-aws"
    assert "aws-sm" in plugins.secret_providers()
