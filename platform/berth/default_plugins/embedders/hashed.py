"""The ``builtin`` embedder: hashed words and character n-grams, no model and no download.

It relates word variants ("migration" / "migrations"), not synonyms; it is the lexical fallback that
keeps memory search working when no semantic embedder is installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from berth.config.errors import ConfigError
from berth.hooks import hookimpl

if TYPE_CHECKING:
    from berth.config.models.assembly import EmbedderConfig
    from berth.runtime.memory import EmbedderFactory, HashedNgramEmbedder

__all__ = ["PROVIDER_NAME", "create_hashed_embedder"]

PROVIDER_NAME: Final = "builtin"


def create_hashed_embedder(config: EmbedderConfig) -> HashedNgramEmbedder:
    """Build the lexical fallback; it has no models to choose from, so ``model`` must be unset."""
    if config.model is not None:
        raise ConfigError(
            "embedder_model_unknown",
            f"the {PROVIDER_NAME!r} embedder has no models; remove platform.embedder.model "
            f"({config.model!r}) or choose another provider",
        )
    from berth.runtime.memory import HashedNgramEmbedder  # when it is used: the host loads every plugin module

    return HashedNgramEmbedder()


@hookimpl
def berth_embedders() -> dict[str, EmbedderFactory]:
    """Register ``builtin``."""
    return {PROVIDER_NAME: create_hashed_embedder}
