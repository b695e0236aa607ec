"""File-system reload triggers: folder bundles with ``watch: true`` and the bundle descriptors."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from host_helpers import path_entry

from berth.config import Configuration
from berth.host.registry import BundleRegistry, ReloadOutcome
from berth.host.watcher import BundleWatcher, DescriptorWatcher
from berth.turns.callers import authenticate
from berth.turns.errors import ServiceError


async def edit_until(outcomes: asyncio.Queue[ReloadOutcome], edit: Callable[[int], None]) -> ReloadOutcome:
    """Apply ``edit`` until the watcher reacts (its first scan may start after the first edit)."""
    for attempt in range(50):
        edit(attempt)
        try:
            return await asyncio.wait_for(outcomes.get(), timeout=0.5)
        except TimeoutError:
            continue
    raise AssertionError("the watcher never reacted")


async def test_saving_a_watched_bundle_reloads_it(
    folder_bundle: Callable[..., Path], descriptors_for: Callable[..., Configuration]
) -> None:
    folder = folder_bundle("alpha")
    registry = BundleRegistry(descriptors_for({"alpha": path_entry(folder, watch=True)}))
    await registry.start()
    outcomes: asyncio.Queue[ReloadOutcome] = asyncio.Queue()
    registry.add_listener(outcomes.put_nowait)
    watcher = BundleWatcher(registry)
    assert watcher.watched() == {folder: "alpha"}
    task = asyncio.create_task(watcher.run())
    source = (folder / "__init__.py").read_text()
    try:
        outcome = await edit_until(
            outcomes, lambda n: (folder / "__init__.py").write_text(source.replace('"v1"', f'"v{n + 2}"'))
        )
        assert outcome.ok
        assert outcome.reason == "watch"
        async with registry.use("alpha") as generation:
            entry = generation.catalog.get("alpha.answer")
            assert entry is not None
            assert entry.spec is not None
            assert (await entry.spec.invoke({})).startswith("v")
            assert await entry.spec.invoke({}) != "v1"
    finally:
        watcher.stop()
        await asyncio.wait_for(task, 5)
        await registry.close()


async def test_an_unwatched_bundle_is_not_watched(
    folder_bundle: Callable[..., Path], descriptors_for: Callable[..., Configuration]
) -> None:
    registry = BundleRegistry(descriptors_for({"alpha": path_entry(folder_bundle("alpha"))}))
    assert BundleWatcher(registry).watched() == {}


async def test_editing_bundles_yaml_changes_props_without_reimport(
    folder_bundle: Callable[..., Path], descriptors_for: Callable[..., Configuration], tmp_path: Path
) -> None:
    folder = folder_bundle("alpha")
    config = descriptors_for({"alpha": path_entry(folder, props={"greeting": "one"})})
    root = config.descriptors.root
    assert root is not None
    registry = BundleRegistry(config)
    await registry.start()
    outcomes: asyncio.Queue[ReloadOutcome] = asyncio.Queue()
    registry.add_listener(outcomes.put_nowait)
    watcher = DescriptorWatcher(registry, lambda: Configuration.load(root))
    task = asyncio.create_task(watcher.run())

    def write_props(attempt: int) -> None:
        document = {"bundles": {"alpha": path_entry(folder, props={"greeting": f"two-{attempt}"})}}
        (root / "bundles.yaml").write_text(yaml.safe_dump(document))

    try:
        outcome = await edit_until(outcomes, write_props)
        assert (outcome.ok, outcome.reason, outcome.generation) == (True, "descriptors", 1)
        generation = registry.current("alpha")
        assert generation.number == 1
        assert generation.context.props.greeting.startswith("two-")  # type: ignore[attr-defined]
    finally:
        watcher.stop()
        await asyncio.wait_for(task, 5)
        await registry.close()


async def test_a_key_added_to_gateway_yaml_authenticates_without_a_restart(
    folder_bundle: Callable[..., Path], descriptors_for: Callable[..., Configuration]
) -> None:
    """The API authenticates against the configuration the registry serves: the watcher re-reads it when
    ``gateway.yaml`` changes, so a new key works at once and a removed one stops working."""
    config = descriptors_for({"alpha": path_entry(folder_bundle("alpha"))})
    root = config.descriptors.root
    assert root is not None

    def key(key_id: str, secret: str) -> dict[str, object]:
        digest = hashlib.sha256(secret.encode()).hexdigest()
        return {"id": key_id, "sha256": digest, "tenant": "acme", "roles": ["user"]}

    (root / "gateway.yaml").write_text(yaml.safe_dump({"auth": {"mode": "api_keys", "keys": [key("old", "old-key")]}}))
    registry = BundleRegistry(Configuration.load(root))
    await registry.start()
    outcomes: asyncio.Queue[ReloadOutcome] = asyncio.Queue()
    registry.add_listener(outcomes.put_nowait)
    watcher = DescriptorWatcher(registry, lambda: Configuration.load(root))
    task = asyncio.create_task(watcher.run())
    bearer = {"authorization": "Bearer new-key"}
    with pytest.raises(ServiceError):
        authenticate(bearer, registry.config.descriptors)

    def write_keys(attempt: int) -> None:
        keys = [key("new", "new-key"), key(f"other-{attempt}", f"other-{attempt}")]
        (root / "gateway.yaml").write_text(yaml.safe_dump({"auth": {"mode": "api_keys", "keys": keys}}))

    try:
        outcome = await edit_until(outcomes, write_keys)
        assert (outcome.ok, outcome.reason) == (True, "descriptors")
        assert authenticate(bearer, registry.config.descriptors).key_id == "new"
        with pytest.raises(ServiceError):
            authenticate({"authorization": "Bearer old-key"}, registry.config.descriptors)
    finally:
        watcher.stop()
        await asyncio.wait_for(task, 5)
        await registry.close()
