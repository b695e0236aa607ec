"""The model-provider seam: one request in, a stream of typed events out, an explicit lifecycle.

The runtime renders a round into a :class:`~berth.runtime.render.RenderedPrompt`, wraps it in a
:class:`ModelRequest` and iterates :meth:`ModelProvider.stream`: zero or more :class:`TextDelta` events,
then exactly one :class:`ModelCompleted` carrying the stop reason and the round's :class:`Usage`. A
failure is raised as one of the normalized errors in :mod:`berth.models.errors`, never as a provider
SDK's own exception. A provider holds a connection pool, so whoever builds it calls :meth:`aclose`.

Providers are platform plugins: ``berth_model_providers()`` returns ``{name: factory}`` and the host
builds one provider per configured model with ``factory(model_ref, secrets)``. The events and :class:`Usage` live in
:mod:`berth.models.events` (re-exported here), which a provider module can import without the renderer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Protocol, TypeAlias, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from berth.config.environment import sdk_variable
from berth.config.errors import ConfigError
from berth.config.models.assembly import ModelRef
from berth.config.models.common import SecretSetting
from berth.config.secrets import Secret
from berth.models.events import ModelCompleted, ModelEvent, StopReason, TextDelta, Usage
from berth.runtime.render import RenderedPrompt

__all__ = [
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "ModelCompleted",
    "ModelEvent",
    "ModelProvider",
    "ModelProviderFactory",
    "ModelRequest",
    "SecretLookup",
    "StopReason",
    "TextDelta",
    "Usage",
    "resolve_api_key",
]

DEFAULT_MAX_OUTPUT_TOKENS = 4096
"""Output limit when neither the request nor the model's configuration names one."""


class ModelRequest(BaseModel):
    """One call to a model: the rendered prompt and the sampling limits for this round.

    ``max_output_tokens`` None means the model reference's ``max_output_tokens``, else
    :data:`DEFAULT_MAX_OUTPUT_TOKENS`. ``metadata`` is for correlation: the runtime sets ``user_id``,
    ``turn_id`` and ``round`` (the model call's 1-based number within its turn); a provider forwards only what
    its API defines (Anthropic's ``metadata.user_id`` from ``user_id``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: RenderedPrompt
    max_output_tokens: int | None = Field(None, gt=0)
    temperature: float | None = Field(None, ge=0, le=2)
    stop_sequences: tuple[str, ...] = ()
    metadata: Mapping[str, str] = Field(default_factory=dict)

    def output_limit(self, model_ref: ModelRef | None = None) -> int:
        """Return the output-token limit: this request's, else the model's, else the default."""
        if self.max_output_tokens is not None:
            return self.max_output_tokens
        if model_ref is not None and model_ref.max_output_tokens is not None:
            return model_ref.max_output_tokens
        return DEFAULT_MAX_OUTPUT_TOKENS


@runtime_checkable
class ModelProvider(Protocol):
    """A model behind one configured :class:`~berth.config.models.assembly.ModelRef`.

    Lifecycle: build with the plugin's factory, call :meth:`stream` any number of times (concurrently
    if you like), then :meth:`aclose` once.
    """

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Send ``request`` and yield :class:`TextDelta` events, then one :class:`ModelCompleted`.

        Transient failures (rate limits, overload, connection errors) are retried with backoff before
        the first event; once text has been yielded a failure is raised, never papered over.

        :raises berth.models.errors.ModelError: one of its subclasses, with a stable ``code``.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; the provider may not be used afterwards."""
        ...


SecretLookup: TypeAlias = Callable[[SecretSetting | str], Secret]
"""Resolves a ``SecretSetting`` (``secret:NAME`` or a literal) or a platform secret's name."""


class ModelProviderFactory(Protocol):
    """What a plugin's ``berth_model_providers()`` maps each provider name to."""

    def __call__(self, model_ref: ModelRef, secrets: SecretLookup) -> ModelProvider:
        """Build a provider for ``model_ref``; read credentials only through ``secrets``."""
        ...


def resolve_api_key(
    model_ref: ModelRef, secrets: SecretLookup, default_secret: str, sdk_variable_name: str | None = None
) -> Secret:
    """Return the API key for ``model_ref``, first found of: its ``api_key`` setting; the platform secret
    ``default_secret``; when that secret is not declared at all, the SDK's own environment variable
    ``sdk_variable_name`` (as the official SDK would read it).

    Raises :class:`~berth.config.errors.ConfigError` (``secret_unknown``, ``secret_missing``) naming every place
    looked in, never a value.
    """
    if model_ref.api_key is not None:
        return secrets(model_ref.api_key)
    try:
        return secrets(default_secret)
    except ConfigError as exc:
        if exc.code != "secret_unknown" or sdk_variable_name is None:
            raise
        value = sdk_variable(sdk_variable_name)
        if value is None:
            raise ConfigError("secret_unknown", f"{exc}, and {sdk_variable_name} is not set") from None
        return Secret(sdk_variable_name, value)
