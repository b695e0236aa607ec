"""The host's own environment variables — the only place Berth reads ``os.environ``.

Platform settings come from descriptors with ``BERTH_PLATFORM__…`` overrides (see
:mod:`berth.config.settings`); the variables here steer the process itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

PLATFORM_ENV_PREFIX = "BERTH_PLATFORM__"


class HostEnvironment(BaseSettings):
    """Process-level switches read from ``BERTH_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="BERTH_", extra="ignore", frozen=True)

    descriptors: Path | None = None
    """``BERTH_DESCRIPTORS``: the descriptors folder when ``--descriptors`` is not given."""

    plugins: str | None = None
    """``BERTH_PLUGINS``: comma-separated allow-list of platform plugin names (unset = all)."""

    disable_plugins: str | None = None
    """``BERTH_DISABLE_PLUGINS``: comma-separated deny-list of platform plugin names."""

    log_level: str = "INFO"
    """``BERTH_LOG_LEVEL``."""

    api_key: str | None = None
    """``BERTH_API_KEY``: the key ``berth chat`` sends to a running host."""


def host_environment() -> HostEnvironment:
    """Read the host environment now (not cached: tests and reloads may change it)."""
    return HostEnvironment()


def process_environ() -> Mapping[str, str]:
    """The process environment, for the ``env:`` secret provider and override checks."""
    return os.environ


def platform_override_variables() -> dict[str, str]:
    """Every ``BERTH_PLATFORM__…`` variable that is set, by upper-cased name."""
    return {name.upper(): value for name, value in os.environ.items() if name.upper().startswith(PLATFORM_ENV_PREFIX)}


def running_in_ci() -> bool:
    """Whether ``CI`` is set to a true value: test services that are missing then fail instead of skipping."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


SDK_VARIABLES = frozenset({"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"})
"""The model SDKs' own variables Berth honours, after descriptors and ``BERTH_*`` settings (docs/models.md)."""


def sdk_variable(name: str) -> str | None:
    """The value of one of the SDKs' own variables (:data:`SDK_VARIABLES`), or None when unset or blank."""
    if name not in SDK_VARIABLES:
        raise ValueError(f"{name} is not an SDK variable Berth reads")
    value = os.environ.get(name, "").strip()
    return value or None


EXEC_LAUNCH_PREFIXES = ("BERTH_EXEC_PAYLOAD", "BERTH_DESCRIPTOR_")


def exec_launch_variables() -> dict[str, str]:
    """The launch payload and descriptors a remote exec supervisor is started with (``BERTH_EXEC_PAYLOAD``,
    ``BERTH_DESCRIPTOR_*_B64``; see :mod:`berth.execution.payload`)."""
    return {
        name: value
        for name, value in os.environ.items()
        if name.startswith(EXEC_LAUNCH_PREFIXES) and name not in EXEC_TASK_VARIABLES
    }


class ExecTaskEnvironment(BaseSettings):
    """What an exec task (the fargate backend's ``python -m berth_aws.task``) is started with: where its launch
    payload and its run's snapshots are. The payload itself never travels in the environment."""

    model_config = SettingsConfigDict(env_prefix="BERTH_EXEC_", extra="ignore", frozen=True)

    payload_secret_id: str
    """``BERTH_EXEC_PAYLOAD_SECRET_ID``: the Secrets Manager secret holding the launch payload."""

    input_uri: str
    """``BERTH_EXEC_INPUT_URI``: ``s3://bucket/key`` of the run's ``work/`` and program snapshot."""

    output_uri: str
    """``BERTH_EXEC_OUTPUT_URI``: where the task puts ``out/`` and the program's output."""

    region: str | None = None
    """``BERTH_EXEC_REGION``: the AWS region (default: the SDK's own)."""

    endpoint_url: str | None = None
    """``BERTH_EXEC_ENDPOINT_URL``: an AWS-compatible endpoint (tests, other clouds)."""

    deadline_s: float | None = None
    """``BERTH_EXEC_DEADLINE_S``: the task's own wall time for the run (the run's ``timeout_s`` plus the profile's
    ``task_deadline_grace_s``): past it the task ends the run itself and hands back what there is, so a task whose
    host died (and will never call ``stop_task``) does not run on."""


EXEC_TASK_VARIABLES = frozenset(
    f"BERTH_EXEC_{name.upper()}"
    for name in ("payload_secret_id", "input_uri", "output_uri", "region", "endpoint_url", "deadline_s")
)


def exec_task_environment() -> ExecTaskEnvironment:
    """Read the exec task's variables (a missing one raises pydantic's ``ValidationError`` naming it)."""
    return ExecTaskEnvironment()


def aws_sdk_variables() -> dict[str, str]:
    """The AWS SDK's own variables of this process (``AWS_*``: region, credentials endpoint of an ECS task), for
    an exec task to hand to the supervisor it starts, whose bundle tools may call AWS."""
    return {name: value for name, value in os.environ.items() if name.startswith("AWS_")}


def docker_host() -> str | None:
    """``DOCKER_HOST``: the Docker engine the docker exec backend uses when its profile names none (Docker's own
    variable, honoured as the Docker CLI and SDK do)."""
    return os.environ.get("DOCKER_HOST") or None
