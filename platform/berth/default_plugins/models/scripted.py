"""The ``scripted`` model provider: replays a script of responses, for tests, demos and benchmarks.

A script is YAML or JSON: a list of entries, or ``{chunk_size: N, responses: [...]}``. An entry is a
response text, or a mapping::

    - "<channel:action>{\"action\": \"complete\"}</channel:action>"      # just the text
    - text: "Hello"
      usage: {input_tokens: 1200, output_tokens: 3, cache_read_input_tokens: 1000}
      stop_reason: end_turn                                              # the default
      delay_s: 0.5                                                       # answer after half a second
    - error: {code: rate_limited, message: "try later"}                 # raised instead of answering

Each call consumes the next entry and streams its text in chunks of ``chunk_size`` characters (small by
default, to exercise the streaming path). With ``repeat: true`` the script starts over when it runs out; with
``by_round: true`` every turn replays it from the first entry, the turn's n-th model call getting the n-th
entry (the runtime puts the round in the request's metadata), so concurrent turns get the same answers.
Every request is recorded in :attr:`ScriptedProvider.requests`.
When the script runs out the call fails with ``script_exhausted``: a scripted model never invents an answer.
Usage not given in the script is estimated at four characters a token.

Configured in ``assembly.yaml`` as ``{provider: scripted, model: path/to/script.yaml}``; a relative path
is resolved against the working directory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from berth.config.models.assembly import ModelRef
from berth.hooks import hookimpl
from berth.models.errors import (
    ModelContextOverflow,
    ModelError,
    ModelProviderError,
    ModelRateLimited,
    ModelUnavailable,
    ProviderErrorCode,
)
from berth.models.events import ModelCompleted, ModelEvent, StopReason, TextDelta, Usage

if TYPE_CHECKING:
    from berth.models.protocol import ModelProviderFactory, ModelRequest, SecretLookup

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "PROVIDER_NAME",
    "ScriptEntry",
    "ScriptFile",
    "ScriptedError",
    "ScriptedProvider",
    "create_scripted_provider",
    "estimate_tokens",
    "load_script",
    "read_script",
]

PROVIDER_NAME: Final = "scripted"
DEFAULT_CHUNK_SIZE: Final = 7
"""Characters per streamed chunk; odd and small, so tags and tokens get split across chunks."""

ScriptedErrorCode: TypeAlias = Literal["rate_limited", "context_overflow", "model_unavailable"] | ProviderErrorCode


def estimate_tokens(text: str) -> int:
    """Estimate a token count at four characters a token (at least one for non-empty text)."""
    return (len(text) + 3) // 4


class ScriptedError(BaseModel):
    """A scripted failure: the normalized error with this ``code`` is raised instead of a response."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: ScriptedErrorCode
    message: str = "scripted failure"

    def to_error(self) -> ModelError:
        """Build the normalized error."""
        if self.code == "rate_limited":
            return ModelRateLimited(self.message, attempts=1)
        if self.code == "context_overflow":
            return ModelContextOverflow(self.message)
        if self.code == "model_unavailable":
            return ModelUnavailable(self.message, attempts=1)
        return ModelProviderError(self.code, self.message)


class ScriptEntry(BaseModel):
    """One scripted response: a text (with optional usage and stop reason) or an error."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str | None = None
    usage: Usage | None = None
    stop_reason: StopReason = "end_turn"
    error: ScriptedError | None = None
    delay_s: float = Field(0.0, ge=0, le=60, description="wait this long before answering, like a slow model")
    pause_s: float = Field(
        0.0, ge=0, le=60, description="wait this long before the last chunk, like a long stream still being written"
    )

    @model_validator(mode="after")
    def _text_or_error(self) -> ScriptEntry:
        if (self.text is None) == (self.error is None):
            raise ValueError("a script entry needs exactly one of 'text' and 'error'")
        return self


class ScriptFile(BaseModel):
    """A script file's contents: its responses and how they are served."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    chunk_size: int = Field(DEFAULT_CHUNK_SIZE, ge=1)
    repeat: bool = False
    by_round: bool = Field(
        False,
        description=(
            "every turn replays the responses from the first: a turn's n-th model call gets the n-th response "
            "(from the request's 'round' metadata), so concurrent turns never take each other's responses"
        ),
    )
    responses: list[str | ScriptEntry]


_SCRIPT: Final = TypeAdapter(list[str | ScriptEntry] | ScriptFile)


def _entries(items: Iterable[str | ScriptEntry]) -> list[ScriptEntry]:
    return [ScriptEntry(text=item) if isinstance(item, str) else item for item in items]


def load_script(path: Path) -> tuple[list[ScriptEntry], int, bool]:
    """Read a YAML or JSON script; return its entries, chunk size and whether it repeats.

    :raises ModelProviderError: ``script_invalid``, naming the file and what is wrong.
    """
    script = read_script(path)
    return _entries(script.responses), script.chunk_size, script.repeat


def read_script(path: Path) -> ScriptFile:
    """Read a YAML or JSON script: a list of responses, or a mapping with ``responses`` and options.

    :raises ModelProviderError: ``script_invalid``, naming the file and what is wrong.
    """
    try:
        raw = path.read_text(encoding="utf-8")
        data = json.loads(raw) if path.suffix == ".json" else yaml.safe_load(raw)
        parsed = _SCRIPT.validate_python(data)
    except OSError as exc:
        raise ModelProviderError("script_invalid", f"script {path} cannot be read: {exc.strerror}") from None
    except (ValueError, yaml.YAMLError) as exc:
        detail = (
            "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors()[:5])
            if isinstance(exc, ValidationError)
            else str(exc)
        )
        raise ModelProviderError("script_invalid", f"script {path} is not a valid script: {detail}") from None
    if isinstance(parsed, ScriptFile):
        return parsed
    return ScriptFile(responses=parsed)


REQUESTS_KEPT = 100
"""How many of its latest requests a scripted provider keeps for inspection (it may hold up to twice as many)."""


class ScriptedProvider:
    """A :class:`~berth.models.protocol.ModelProvider` that answers from a script, in order.

    :param responses: texts or :class:`ScriptEntry` values, consumed one per call.
    :param chunk_size: characters per :class:`~berth.models.protocol.TextDelta`.
    :param name: shown in errors and ``repr`` (the script's file name when loaded from one).
    """

    def __init__(
        self,
        responses: Sequence[str | ScriptEntry],
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        name: str = "script",
        repeat: bool = False,
        by_round: bool = False,
    ) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        self._entries = _entries(responses)
        self._chunk_size = chunk_size
        self._name = name
        self._next = 0
        self._repeat = repeat
        self._by_round = by_round
        self._calls = 0
        self.requests: list[ModelRequest] = []
        """The requests received, in order (including those answered with a scripted error): every one of
        the latest :data:`REQUESTS_KEPT` at least. A demo host serving a repeating script for days must not
        keep every prompt it was sent."""

    @classmethod
    def from_file(cls, path: Path) -> ScriptedProvider:
        """Load a YAML or JSON script (see :func:`load_script`)."""
        script = read_script(path)
        return cls(
            _entries(script.responses),
            chunk_size=script.chunk_size,
            name=str(path),
            repeat=script.repeat,
            by_round=script.by_round,
        )

    @property
    def remaining(self) -> int:
        """How many scripted responses are left."""
        return len(self._entries) - self._next

    def extend(self, responses: Iterable[str | ScriptEntry | Mapping[str, Any]]) -> None:
        """Append more responses to the script (mappings are validated as :class:`ScriptEntry`)."""
        self._entries.extend(
            ScriptEntry.model_validate(item) if isinstance(item, Mapping) else _entries([item])[0] for item in responses
        )

    def __repr__(self) -> str:
        return f"ScriptedProvider(name={self._name!r}, remaining={self.remaining})"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Replay the next scripted response (see :meth:`berth.models.protocol.ModelProvider.stream`)."""
        self._calls += 1
        self.requests.append(request)
        if len(self.requests) > 2 * REQUESTS_KEPT:
            del self.requests[:-REQUESTS_KEPT]
        entry = self._next_entry(request)
        if entry.delay_s:
            await asyncio.sleep(entry.delay_s)
        if entry.error is not None:
            raise entry.error.to_error()
        text = entry.text or ""
        for start in range(0, len(text), self._chunk_size):
            if entry.pause_s and start + self._chunk_size >= len(text):
                await asyncio.sleep(entry.pause_s)
            yield TextDelta(text=text[start : start + self._chunk_size])
        usage = entry.usage or Usage(
            input_tokens=sum(estimate_tokens(part.text) for part in request.prompt.parts()),
            output_tokens=estimate_tokens(text),
        )
        yield ModelCompleted(stop_reason=entry.stop_reason, usage=usage)

    def _next_entry(self, request: ModelRequest) -> ScriptEntry:
        if self._by_round:
            round_ = request.metadata.get("round", "")
            index = int(round_) - 1 if round_.isdigit() else -1
            if not 0 <= index < len(self._entries):
                raise ModelProviderError(
                    "script_exhausted",
                    f"{self._name} has no response for round {round_ or '?'} of a turn "
                    f"({len(self._entries)} scripted per turn); add responses to the script",
                )
            return self._entries[index]
        if self._repeat and self._entries and self._next >= len(self._entries):
            self._next = 0  # a demo script starts over
        if self._next >= len(self._entries):
            raise ModelProviderError(
                "script_exhausted",
                f"{self._name} has no response left for call {self._calls} "
                f"({len(self._entries)} scripted); add responses to the script",
            )
        entry = self._entries[self._next]
        self._next += 1
        return entry

    async def aclose(self) -> None:
        """Nothing to release; present for the protocol's lifecycle."""


def create_scripted_provider(model_ref: ModelRef, secrets: SecretLookup) -> ScriptedProvider:
    """Build the provider for ``model_ref``: ``model`` is the path of the script file."""
    return ScriptedProvider.from_file(Path(model_ref.model))


@hookimpl
def berth_model_providers() -> dict[str, ModelProviderFactory]:
    """Contribute the ``scripted`` provider."""
    return {PROVIDER_NAME: create_scripted_provider}
