"""The options of the ``web`` pack: ``ToolPack(id="web", options={"fetch": {...}, "search": {...}})``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from berth.config.errors import ConfigError


class FetchOptions(BaseModel):
    """Limits of ``web.fetch``.

    ``max_bytes`` bounds the download (the body is streamed and the connection dropped as soon as it
    is passed); ``max_chars`` is the default length of the text shown to the model and
    ``max_chars_limit`` the most a call may ask for. ``allow_private_addresses`` lets the tool reach
    loopback, private and link-local addresses (off by default: a model-chosen URL must not reach the
    host's own network or a cloud metadata endpoint).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_bytes: int = Field(2_000_000, gt=0)
    timeout_s: float = Field(15.0, gt=0)
    max_redirects: int = Field(5, ge=0, le=20)
    max_chars: int = Field(20_000, gt=0)
    max_chars_limit: int = Field(100_000, gt=0)
    allow_private_addresses: bool = False
    user_agent: str = "Berth web.fetch (+https://github.com/berth)"
    proxy: str | None = None


class SearchOptions(BaseModel):
    """Which search backend serves ``web.search``; every other key is that backend's own option."""

    model_config = ConfigDict(frozen=True, extra="allow")

    backend: str = Field(min_length=1)
    max_results: int = Field(10, gt=0, le=50)

    @property
    def backend_options(self) -> dict[str, Any]:
        """The keys meant for the backend (everything but ``backend`` and ``max_results``)."""
        return dict(self.model_extra or {})


class WebPackOptions(BaseModel):
    """All options of the ``web`` pack; ``search`` absent means ``web.search`` is inactive."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fetch: FetchOptions = Field(default_factory=FetchOptions)
    search: SearchOptions | None = None


def parse_web_pack_options(pack_id: str, options: Mapping[str, Any]) -> WebPackOptions:
    """Validate a bundle's options for the pack; a problem raises :class:`ConfigError` ``tool_pack_options``
    naming every offending field."""
    try:
        return WebPackOptions.model_validate(dict(options))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '(options)'}: {error['msg']}" for error in exc.errors()
        )
        raise ConfigError("tool_pack_options", f"tool pack '{pack_id}' options: {problems}") from None
