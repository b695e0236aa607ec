"""The default embedder plugin: ``builtin``, the lexical fallback that needs nothing installed."""

from __future__ import annotations

import pytest

from berth.config.errors import ConfigError
from berth.config.models.assembly import EmbedderConfig
from berth.default_plugins.embedders import hashed
from berth.runtime.memory import HashedNgramEmbedder
from berth.testing.plugins import embedders_contributed_by


def test_the_lexical_fallback_is_registered_as_builtin() -> None:
    factories = embedders_contributed_by(hashed)
    assert factories == {"builtin": hashed.create_hashed_embedder}
    embedder = hashed.create_hashed_embedder(EmbedderConfig())
    assert isinstance(embedder, HashedNgramEmbedder)


def test_the_lexical_fallback_has_no_models_to_choose() -> None:
    with pytest.raises(ConfigError) as caught:
        hashed.create_hashed_embedder(EmbedderConfig(provider="builtin", model="e5-small"))
    assert caught.value.code == "embedder_model_unknown"


async def test_the_lexical_fallback_embeds_queries_like_texts() -> None:
    embedder = hashed.create_hashed_embedder(EmbedderConfig())
    (text_vector,) = await embedder.embed(["database migrations"])
    assert await embedder.embed_query("database migrations") == text_vector
