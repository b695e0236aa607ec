"""The ``postgres`` platform plugin registers the migrations of ``distributed`` storage, found by ``berth migrate``."""

from __future__ import annotations

import inspect

from berth_postgres import plugin
from berth_postgres.migrations import migrate

from berth.host.plugins import PlatformPlugins


def test_the_plugin_registers_the_distributed_migrations() -> None:
    # the plugin module's own function, which imports the migrations (asyncpg) when it runs, not at start-up
    assert PlatformPlugins.discover().storage_migrators()["distributed"] is plugin.migrate
    assert inspect.signature(plugin.migrate) == inspect.signature(migrate)
