"""The ``aws-sm`` secret provider: AWS Secrets Manager through boto3.

A source ``aws-sm:<secret id>`` reads the secret's string; ``aws-sm:<secret id>#<key>`` reads one key
of a JSON secret. Options (``platform.secret_providers.aws-sm`` in ``assembly.yaml``): ``region``,
``endpoint_url`` (for a local or compatible endpoint). Credentials come from boto3's usual chain. boto3 is imported
when a descriptor names an ``aws-sm:`` secret, not with this plugin module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from berth.config.errors import ConfigError
from berth.config.secrets import SecretProvider, SecretProviderFactory
from berth.hooks import hookimpl

PROVIDER_NAME = "aws-sm"


class AwsSecretsManagerProvider:
    """Reads secrets from AWS Secrets Manager; errors name the secret id and AWS error code only."""

    def __init__(self, client: Any) -> None:
        self._client = client

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SecretProvider:
        """Build a provider with a Secrets Manager client for ``options`` (``region``, ``endpoint_url``)."""
        unknown = set(options) - {"region", "endpoint_url"}
        if unknown:
            raise ConfigError(
                "secret_provider_options",
                f"unknown option(s) for {PROVIDER_NAME}: {', '.join(sorted(unknown))} (known: endpoint_url, region)",
            )
        import boto3

        client = boto3.client(
            "secretsmanager",
            region_name=options.get("region") or "us-east-1",
            endpoint_url=options.get("endpoint_url"),
        )
        return cls(client)

    def resolve(self, ref: str) -> str:
        """Read ``<secret id>`` or ``<secret id>#<json key>``."""
        from botocore.exceptions import BotoCoreError, ClientError

        secret_id, _, key = ref.partition("#")
        try:
            response = self._client.get_secret_value(SecretId=secret_id)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "error")
            raise ConfigError("secret_missing", f"AWS Secrets Manager: '{secret_id}' {code}") from None
        except BotoCoreError as exc:
            raise ConfigError(
                "secret_provider_failed", f"AWS Secrets Manager unreachable for '{secret_id}': {type(exc).__name__}"
            ) from None
        value = response.get("SecretString")
        if value is None:
            value = bytes(response["SecretBinary"]).decode("utf-8")
        if not key:
            return str(value)
        try:
            document = json.loads(value)
            return str(document[key])
        except (ValueError, TypeError, KeyError):
            raise ConfigError("secret_missing", f"AWS Secrets Manager: '{secret_id}' has no JSON key '{key}'") from None


@hookimpl
def berth_secret_providers() -> dict[str, SecretProviderFactory]:
    """Register ``aws-sm``."""
    return {PROVIDER_NAME: AwsSecretsManagerProvider.from_options}
