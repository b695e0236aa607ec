"""``gateway.yaml``: who may call the API (auth) and how much (limits, backpressure, attachments, budgets)."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias

from pydantic import Field, field_validator, model_validator

from berth.config.models.common import DescriptorModel, ScopeKey, ScopeName, SecretSetting, partial_model

Role = Literal["user", "admin"]
Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$", description="hex SHA-256 of the API key")]


def is_loopback_host(host: str) -> bool:
    """True when ``host`` names only this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ListenConfig(DescriptorModel):
    """Where ``berth run`` listens (``--host``/``--port`` override it)."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)


class ApiKey(DescriptorModel):
    """One API key, stored as the SHA-256 of the key (the key itself is never in a descriptor)."""

    id: str = Field(min_length=1, max_length=64)
    sha256: Sha256Hex
    tenant: ScopeName | Literal["*"]
    projects: list[ScopeName] | None = Field(None, description="default: every project of the tenant")
    roles: list[Role] = Field(default_factory=lambda: list[Role](["user"]), min_length=1)

    @field_validator("sha256")
    @classmethod
    def _lowercase(cls, value: str) -> str:
        return value.lower()


class AuthConfig(DescriptorModel):
    """How callers authenticate: ``none`` (embedded development, loopback only) or ``api_keys``."""

    mode: Literal["none", "api_keys"] = "none"
    keys: list[ApiKey] = Field(default_factory=list)

    @model_validator(mode="after")
    def _keys_consistent(self) -> AuthConfig:
        if self.mode == "api_keys" and not self.keys:
            raise ValueError("mode 'api_keys' needs at least one entry in 'keys'")
        seen_ids: set[str] = set()
        seen_hashes: set[str] = set()
        for key in self.keys:
            if key.id in seen_ids:
                raise ValueError(f"key id '{key.id}' is given twice")
            if key.sha256 in seen_hashes:
                raise ValueError(f"key '{key.id}' has the same sha256 as another key")
            seen_ids.add(key.id)
            seen_hashes.add(key.sha256)
        return self


class Limits(DescriptorModel):
    """Admission limits of one tenant; a limit left out (or ``null``) does not limit."""

    requests_per_minute: int | None = Field(
        None, gt=0, description="requests a tenant's keys may make per minute, on average; none: no limit"
    )
    burst: int = Field(
        20, ge=0, description="requests beyond the rate that may arrive at once (burst + 1 at once, then the rate)"
    )
    concurrent_turns: int | None = Field(None, gt=0, description="turns a tenant may run at once; none: no limit")
    max_body_bytes: int = Field(26_214_400, gt=0)


if TYPE_CHECKING:  # built at run time; to the type checker a plain model
    LimitsOverride: TypeAlias = DescriptorModel
else:
    LimitsOverride = partial_model(Limits, "LimitsOverride")


class LimitsConfig(DescriptorModel):
    """Default limits and per-tenant overrides."""

    default: Limits = Field(default_factory=Limits)
    tenants: dict[ScopeName, LimitsOverride] = Field(default_factory=dict)

    def for_tenant(self, tenant: str) -> Limits:
        """The effective limits of ``tenant`` (default merged with its override)."""
        if tenant not in self.tenants:
            return self.default
        override = self.tenants[tenant]
        return self.default.model_copy(update=override.model_dump(exclude_none=True))


class Backpressure(DescriptorModel):
    """When a worker is full: answer 503 with ``Retry-After``."""

    max_inflight_turns_per_worker: int = Field(64, gt=0)
    queue_max: int = Field(1000, ge=0)
    retry_after_s: float = Field(2, gt=0)


class ZipLimits(DescriptorModel):
    """Limits on zip-based attachments (zip bombs)."""

    max_entries: int = Field(2000, gt=0)
    max_ratio: float = Field(200, gt=0)
    max_total_bytes: int = Field(125_829_120, gt=0)


DEFAULT_ALLOWED_MIME = [
    "application/pdf",
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "text/*",
    "application/vnd.openxmlformats-officedocument.*",
]


class AntivirusConfig(DescriptorModel):
    """A ClamAV daemon that scans every attachment (``INSTREAM``) before anything of it is stored."""

    clamd: str = Field(
        description="where clamd listens: unix:///run/clamav/clamd.ctl or tcp://host:3310",
        examples=["unix:///run/clamav/clamd.ctl", "tcp://clamav:3310"],
    )
    on_error: Literal["refuse", "accept"] = Field(
        "refuse",
        description="clamd unreachable or failing: refuse the upload (503 antivirus_unavailable), or accept it "
        "unscanned with a WARNING in the log",
    )
    timeout_s: float = Field(30.0, gt=0, description="the longest one scan may take, connecting included")

    @field_validator("clamd")
    @classmethod
    def _clamd_address(cls, value: str) -> str:
        if value.startswith("unix://") and len(value) > len("unix://"):
            return value
        if value.startswith("tcp://"):
            host, _, port = value.removeprefix("tcp://").rpartition(":")
            if host and port.isdigit() and 0 < int(port) < 65536:
                return value
        raise ValueError(f"'{value}' is not unix:///path/to/socket or tcp://host:port")


class AttachmentsConfig(DescriptorModel):
    """What users may attach to a message."""

    max_file_bytes: int = Field(10_485_760, gt=0)
    max_message_bytes: int = Field(26_214_400, gt=0)
    allowed_mime: list[str] = Field(default_factory=lambda: list(DEFAULT_ALLOWED_MIME))
    reject_macros: bool = True
    zip: ZipLimits = Field(default_factory=ZipLimits)
    antivirus: AntivirusConfig | None = Field(None, description="scan every attachment with ClamAV (clamd)")


class WidgetAccess(DescriptorModel):
    """How a bundle's widget is loaded without the API key (an iframe cannot send it): the bundle listing hands out
    URLs with a ticket signed for the key, scope, bundle and widget (``berth.turns.widget_tickets``)."""

    ticket_ttl_s: int = Field(
        3600,
        ge=60,
        le=7 * 24 * 3600,
        description="a widget URL from the bundle listing works for one to two of these periods",
    )
    signing_key: SecretSetting | None = Field(
        None,
        description="the key tickets are signed with (secret:NAME); default: a random key per process, so a ticket "
        "works only on the API process that issued it: set it when several API processes serve the UI",
    )


class CorsConfig(DescriptorModel):
    """Cross-origin callers allowed by the API."""

    allow_origins: list[str] = Field(default_factory=lambda: ["http://localhost:8000"])


BudgetPeriod = Literal["day", "month"]
"""A UTC calendar period: a day starts at 00:00 UTC, a month at 00:00 UTC on its first day."""


class Budget(DescriptorModel):
    """What a tenant, a project, or each user of one, may spend on models in a UTC day or month.

    Tokens are every token a model call reports: input + output + cache read + cache write. A limit reached
    refuses new turns of the scope (429 ``budget_exceeded``) until the period resets, and ends a running turn
    after the round that reached it (``turn.failed {code: budget_exceeded}``).
    """

    scope: ScopeKey = Field(description="'tenant' or 'tenant/project', declared in assembly.yaml")
    per_user: bool = Field(
        False, description="true: each user (API key) of the scope has this budget; false: the scope shares it"
    )
    period: BudgetPeriod
    tokens: int | None = Field(None, ge=0, description="tokens per period (input + output + cache read + write)")
    cost_usd: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="USD per period, by platform.models.prices of assembly.yaml"
    )

    @field_validator("tokens", "cost_usd", mode="before")
    @classmethod
    def _number_not_boolean(cls, value: object) -> object:
        if isinstance(value, bool):
            raise ValueError("a limit is a number, not true/false")
        return value

    @model_validator(mode="after")
    def _has_a_limit(self) -> Budget:
        if self.tokens is None and self.cost_usd is None:
            raise ValueError("a budget needs a limit: 'tokens', 'cost_usd' or both")
        return self

    @property
    def tenant(self) -> str:
        """The tenant the budget is for."""
        return self.scope.partition("/")[0]

    @property
    def project(self) -> str | None:
        """The project the budget is for (None: every project of the tenant)."""
        return self.scope.partition("/")[2] or None

    def applies_to(self, tenant: str, project: str) -> bool:
        """True when turns of ``tenant``/``project`` count against this budget."""
        return self.tenant == tenant and self.project in (None, project)

    def describe(self) -> str:
        """The budget in words: ``each user of acme/support may spend 200,000 tokens a day``."""
        who = f"each user of {self.scope}" if self.per_user else self.scope
        limits = []
        if self.tokens is not None:
            limits.append(f"{self.tokens:,} tokens")
        if self.cost_usd is not None:
            limits.append(f"${self.cost_usd:,.2f}")
        return f"{who} may spend {' and '.join(limits)} a {self.period}"


class GatewayDescriptor(DescriptorModel):
    """``gateway.yaml``."""

    listen: ListenConfig = Field(default_factory=ListenConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    backpressure: Backpressure = Field(default_factory=Backpressure)
    attachments: AttachmentsConfig = Field(default_factory=AttachmentsConfig)
    cors: CorsConfig = Field(default_factory=CorsConfig)
    widgets: WidgetAccess = Field(default_factory=WidgetAccess)
    budgets: list[Budget] = Field(
        default_factory=list, description="token and cost limits per tenant, project or user, per UTC day or month"
    )

    @model_validator(mode="after")
    def _no_open_auth_off_loopback(self) -> GatewayDescriptor:
        if self.auth.mode == "none" and not is_loopback_host(self.listen.host):
            raise ValueError(
                f"auth mode 'none' may only listen on loopback, not '{self.listen.host}'; "
                "configure auth.mode: api_keys or listen on 127.0.0.1"
            )
        return self
