"""The embedded store and memory index are registered as the ``embedded`` storage backend."""

from __future__ import annotations

from pathlib import Path

import pluggy
import pytest

from berth import hooks
from berth.config.errors import ConfigError
from berth.config.models.assembly import EmbeddedStorage
from berth.default_plugins.storage import embedded
from berth.storage.memory import MemoryFilter
from berth.storage.scope import OwnerScope


def test_embedded_storage_is_registered_through_berth_storage_backends() -> None:
    manager = pluggy.PluginManager(hooks.PROJECT_NAME)
    manager.add_hookspecs(hooks)
    manager.register(embedded)
    try:
        (contributed,) = manager.hook.berth_storage_backends()
    finally:
        manager.unregister(embedded)
    assert contributed == {"embedded": embedded.create_embedded_storage}


async def test_embedded_backend_opens_both_stores_under_its_root(tmp_path: Path, owner: OwnerScope) -> None:
    backend = embedded.create_embedded_storage(EmbeddedStorage(root=str(tmp_path / "var")))
    await backend.open()
    try:
        assert (tmp_path / "var" / "berth.sqlite3").is_file()
        assert await backend.conversations.list_conversations(owner) == ()
        assert await backend.memory.list_entries(MemoryFilter(owner=owner)) == ()
    finally:
        await backend.aclose()


def test_embedded_backend_refuses_settings_of_another_kind() -> None:
    with pytest.raises(ConfigError) as caught:
        embedded.create_embedded_storage(object())
    assert caught.value.code == "storage_kind_mismatch"
