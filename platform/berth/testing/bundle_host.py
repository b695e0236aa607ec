"""Pytest fixtures for bundle authors (a pytest plugin, active wherever berth-platform is installed).

``bundle_host`` starts a real :class:`~berth.host.registry.BundleRegistry` over a temporary descriptor
set with the bundles you name, synchronously, so plain (non-async) tests can use it::

    def test_greet(bundle_host):
        host = bundle_host(["hello"])                      # installed entry point 'hello'
        assert host.call_tool("hello", "hello.greet", {"name": "Ada"}) == "Hello, Ada!"

Name a folder bundle with a mapping: ``bundle_host({"mine": {"source": {"path": "/abs/folder"}}})``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.bundle.context import BundleContext
from berth.config import Configuration
from berth.host.generation import BundleGeneration
from berth.host.registry import BundleRegistry, ReloadOutcome

BundleSpec = Sequence[str] | Mapping[str, Mapping[str, Any]]

DEFAULT_TENANT = "test"
DEFAULT_PROJECT = "main"


class BundleHost:
    """A started registry with synchronous helpers (it owns a private event loop)."""

    def __init__(self, folder: Path, runner: asyncio.Runner) -> None:
        self.descriptors = folder
        self._runner = runner
        self.registry = BundleRegistry(Configuration.load(folder))
        self.outcomes = self._runner.run(self.registry.start())

    def run(self, awaitable: Any) -> Any:
        """Run a coroutine on the host's event loop."""
        return self._runner.run(awaitable)

    def generation(self, bundle_id: str) -> BundleGeneration:
        """The serving generation of ``bundle_id`` (raises if it failed to load)."""
        return self.registry.current(bundle_id)

    def context(self, bundle_id: str, tenant: str = DEFAULT_TENANT, project: str = DEFAULT_PROJECT) -> BundleContext:
        """The bundle's context in a scope."""
        return self.registry.context_for(self.generation(bundle_id), tenant, project)

    def call_tool(
        self,
        bundle_id: str,
        tool_id: str,
        params: Mapping[str, Any] | None = None,
        *,
        tenant: str = DEFAULT_TENANT,
        project: str = DEFAULT_PROJECT,
    ) -> Any:
        """Call one of the bundle's function tools as the runtime would (params validated)."""
        generation = self.generation(bundle_id)
        context = self.context(bundle_id, tenant, project)
        scoped = generation.tools_in(context, {})
        spec = scoped.specs.get(tool_id)
        if spec is None:
            raise KeyError(f"bundle '{bundle_id}' has no function tool '{tool_id}'")
        return self.run(spec.invoke(params or {}))

    def reload(self, bundle_id: str) -> ReloadOutcome:
        """Reload ``bundle_id`` now (import and validate a new generation)."""
        outcome: ReloadOutcome = self.run(self.registry.reload(bundle_id, reason="test"))
        return outcome

    def close(self) -> None:
        """Unload every generation."""
        self.run(self.registry.close())


def write_descriptors(
    folder: Path,
    bundles: BundleSpec,
    *,
    secrets: Mapping[str, str] | None = None,
    bundle_secrets: Mapping[str, Mapping[str, str]] | None = None,
) -> Path:
    """Write a minimal descriptor set enabling ``bundles`` for tenant ``test`` / project ``main``.

    ``secrets`` becomes ``secrets.yaml``; ``bundle_secrets`` (bundle id → name → source) becomes
    ``bundles.secrets.yaml``.
    """
    entries: dict[str, Any] = (
        {name: {"source": {"entry_point": name}} for name in bundles}
        if not isinstance(bundles, Mapping)
        else {name: dict(spec) for name, spec in bundles.items()}
    )
    folder.mkdir(parents=True, exist_ok=True)
    assembly: dict[str, Any] = {"tenants": {DEFAULT_TENANT: {"projects": {DEFAULT_PROJECT: {}}}}}
    (folder / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    (folder / "bundles.yaml").write_text(yaml.safe_dump({"bundles": entries}))
    if secrets:
        (folder / "secrets.yaml").write_text(yaml.safe_dump(dict(secrets)))
    if bundle_secrets:
        document = {"bundles": {bundle: dict(values) for bundle, values in bundle_secrets.items()}}
        (folder / "bundles.secrets.yaml").write_text(yaml.safe_dump(document))
    return folder


@pytest.fixture
def bundle_host(tmp_path: Path) -> Iterator[Callable[..., BundleHost]]:
    """A factory: ``bundle_host(bundles, secrets=..., bundle_secrets=...)`` starts a :class:`BundleHost`;
    every host it started is closed after the test."""
    hosts: list[BundleHost] = []
    runner = asyncio.Runner()

    def start(
        bundles: BundleSpec,
        *,
        secrets: Mapping[str, str] | None = None,
        bundle_secrets: Mapping[str, Mapping[str, str]] | None = None,
    ) -> BundleHost:
        folder = write_descriptors(
            tmp_path / f"descriptors-{len(hosts)}", bundles, secrets=secrets, bundle_secrets=bundle_secrets
        )
        host = BundleHost(folder, runner)
        hosts.append(host)
        return host

    try:
        yield start
    finally:
        for host in hosts:
            host.close()
        runner.close()
