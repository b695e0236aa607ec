"""The ``postgres`` platform plugin registers the migrations of ``distributed`` storage, found by ``berth migrate``."""

from __future__ import annotations

from berth_postgres.migrations import migrate

from berth.host.plugins import PlatformPlugins


def test_the_plugin_registers_the_distributed_migrations() -> None:
    assert PlatformPlugins.discover().storage_migrators()["distributed"] is migrate
