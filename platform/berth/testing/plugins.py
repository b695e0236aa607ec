"""Plugins' hook contributions read as the host reads them, for the tests of plugins outside the core."""

from __future__ import annotations

from types import ModuleType

import pluggy

from berth import hooks


def embedders_contributed_by(*plugins: ModuleType) -> dict[str, object]:
    """The embedder factories ``plugins`` contribute through ``berth_embedders``, merged by name, from a plugin
    manager with Berth's hookspecs built the way the host builds one."""
    manager = pluggy.PluginManager(hooks.PROJECT_NAME)
    manager.add_hookspecs(hooks)
    for plugin in plugins:
        manager.register(plugin)
    merged: dict[str, object] = {}
    for contributed in manager.hook.berth_embedders():
        merged.update(contributed)
    return merged
