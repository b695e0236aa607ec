"""The default embedder plugin: ``builtin``, the lexical fallback that needs nothing installed."""

from __future__ import annotations

from types import ModuleType

import pluggy
import pytest

from berth import hooks
from berth.config.errors import ConfigError
from berth.config.models.assembly import EmbedderConfig
from berth.default_plugins.embedders import hashed
from berth.runtime.memory import HashedNgramEmbedder


@pytest.fixture
def manager() -> pluggy.PluginManager:
    """A plugin manager with Berth's hookspecs, the way the host builds one."""
    manager = pluggy.PluginManager(hooks.PROJECT_NAME)
    manager.add_hookspecs(hooks)
    return manager


def embedders_of(manager: pluggy.PluginManager, *plugins: ModuleType) -> dict[str, object]:
    for plugin in plugins:
        manager.register(plugin)
    try:
        merged: dict[str, object] = {}
        for contributed in manager.hook.berth_embedders():
            merged.update(contributed)
        return merged
    finally:
        for plugin in plugins:
            manager.unregister(plugin)


def test_the_lexical_fallback_is_registered_as_builtin(manager: pluggy.PluginManager) -> None:
    factories = embedders_of(manager, hashed)
    assert factories == {"builtin": hashed.create_hashed_embedder}
    embedder = hashed.create_hashed_embedder(EmbedderConfig())
    assert isinstance(embedder, HashedNgramEmbedder)


def test_the_lexical_fallback_has_no_models_to_choose(manager: pluggy.PluginManager) -> None:
    with pytest.raises(ConfigError) as caught:
        hashed.create_hashed_embedder(EmbedderConfig(provider="builtin", model="e5-small"))
    assert caught.value.code == "embedder_model_unknown"


async def test_the_lexical_fallback_embeds_queries_like_texts() -> None:
    embedder = hashed.create_hashed_embedder(EmbedderConfig())
    (text_vector,) = await embedder.embed(["database migrations"])
    assert await embedder.embed_query("database migrations") == text_vector
