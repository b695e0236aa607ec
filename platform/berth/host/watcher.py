"""Reload triggers from the file system (SPEC §3.3): folder bundles with ``watch: true``, bundles installed in
editable mode (``pip install -e``), and the descriptors (props and secrets change without re-import; API keys,
tenants and limits are read from the configuration now serving, so they follow too).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from watchfiles import Change, awatch

from berth.config import Configuration, DescriptorError
from berth.config.descriptors import ASSEMBLY, BUNDLES, BUNDLES_SECRETS, GATEWAY, SECRETS
from berth.host.importer import bundle_entry_points, editable_source_folders
from berth.host.loader import watched_folder
from berth.host.registry import BundleRegistry

log = logging.getLogger(__name__)

WATCHED_DESCRIPTORS = frozenset({ASSEMBLY, BUNDLES, BUNDLES_SECRETS, GATEWAY, SECRETS})
"""The descriptor files whose change re-reads the whole set (any of them: a new tenant touches three)."""

DEBOUNCE_MS = 50
"""Edits arriving within this many milliseconds become one reload (editors write several times)."""

ConfigurationLoader = Callable[[], Configuration]


def _python_or_data_change(change: Change, path: str) -> bool:
    name = Path(path).name
    return not (name.endswith((".pyc", "~", ".swp", ".tmp")) or "__pycache__" in path or name.startswith(".#"))


class BundleWatcher:
    """Watches every folder bundle with ``watch: true`` and every editable-installed bundle, and reloads a
    bundle when its files change. The watched folders follow the descriptors: a bundle that ``bundles.yaml``
    names after the start is watched from then on."""

    def __init__(self, registry: BundleRegistry, reload: Callable[[str], Awaitable[object]] | None = None) -> None:
        self._registry = registry
        self._reload = reload or (lambda bundle_id: registry.reload(bundle_id, reason="watch"))
        self._stop = asyncio.Event()
        # ends the current watch: set by stop(), or when the descriptors changed (and so may the folders)
        self._rewatch = asyncio.Event()
        registry.add_listener(lambda outcome: self._rewatch.set() if outcome.reason == "descriptors" else None)

    def watched(self) -> dict[Path, str]:
        """Folder → bundle id of every watched bundle: folder bundles with ``watch: true``, and every bundle
        installed in editable mode (``pip install -e``: its source folder, as pip recorded it)."""
        config = self._registry.config
        folders = {
            watched_folder(config, entry): bundle_id
            for bundle_id, entry in config.descriptors.bundles.bundles.items()
            if entry.watch and entry.source.path is not None
        }
        points = bundle_entry_points()
        for bundle_id, entry in config.descriptors.bundles.bundles.items():
            point = points.get(entry.source.entry_point or "")
            if point is not None:
                folders.update({folder: bundle_id for folder in editable_source_folders(point)})
        return folders

    async def run(self) -> None:
        """Watch until :meth:`stop`; each batch of changes reloads each affected bundle once."""
        while not self._stop.is_set():
            self._rewatch.clear()
            # reads entry points and distribution metadata from disk: off the event loop
            folders = await asyncio.to_thread(self.watched)
            if not folders:
                await self._rewatch.wait()
                continue
            async for changes in awatch(
                *folders, watch_filter=_python_or_data_change, debounce=DEBOUNCE_MS, step=10, stop_event=self._rewatch
            ):
                named = self._registry.config.descriptors.bundles.bundles
                touched = sorted(
                    {
                        bundle
                        for folder, bundle in folders.items()
                        for _, path in changes
                        if Path(path).is_relative_to(folder) and bundle in named
                    }
                )
                for bundle_id in touched:
                    log.info("files of bundle %s changed; reloading", bundle_id)
                    await self._reload(bundle_id)

    def stop(self) -> None:
        """End :meth:`run`."""
        self._stop.set()
        self._rewatch.set()


class DescriptorWatcher:
    """Re-reads the descriptors when one of :data:`WATCHED_DESCRIPTORS` changes and applies them to the
    registry; an invalid edit is logged and the previous configuration keeps serving.

    What reads the registry's configuration per request follows at once: bundles, props and secrets, tenants and
    projects, ``gateway.yaml``'s API keys, limits and budgets. What a process read once at start does not:
    ``listen``, ``cors``, and ``platform:``'s storage and exec services (restart the process for those)."""

    def __init__(self, registry: BundleRegistry, load: ConfigurationLoader) -> None:
        self._registry = registry
        self._load = load
        self._stop = asyncio.Event()

    async def run(self) -> None:
        """Watch until :meth:`stop`."""
        root = self._registry.config.descriptors.root
        if root is None:
            await self._stop.wait()
            return
        async for _ in awatch(
            root,
            watch_filter=lambda change, path: Path(path).name in WATCHED_DESCRIPTORS,
            debounce=DEBOUNCE_MS,
            step=10,
            stop_event=self._stop,
            recursive=False,
        ):
            try:
                config = self._load()
            except DescriptorError as exc:
                log.error("descriptors changed but are invalid; keeping the previous ones:\n%s", exc.render())
                continue
            await self._registry.apply_configuration(config)

    def stop(self) -> None:
        """End :meth:`run`."""
        self._stop.set()
