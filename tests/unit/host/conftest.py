"""Fixtures for host tests: folder bundles written on the fly and a descriptor set that names them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from host_helpers import BASIC_INIT, write_tree

from berth.config import Configuration


@pytest.fixture
def folder_bundle(tmp_path: Path) -> Callable[..., Path]:
    """``folder_bundle(bundle_id, files=None)`` writes a folder bundle (default: a basic valid one)."""

    def make(bundle_id: str, files: Mapping[str, str] | None = None) -> Path:
        root = tmp_path / "bundles" / bundle_id
        return write_tree(root, files or {"__init__.py": BASIC_INIT.replace("{bundle_id}", bundle_id)})

    return make


@pytest.fixture
def descriptors_for(tmp_path: Path) -> Callable[..., Configuration]:
    """``descriptors_for({id: entry, ...}, tenants=None)`` writes descriptors and loads them."""

    def make(
        bundles: Mapping[str, Mapping[str, Any]], tenants: Mapping[str, Any] | None = None, folder: str = "descriptors"
    ) -> Configuration:
        root = tmp_path / folder
        root.mkdir(exist_ok=True)
        (root / "assembly.yaml").write_text(
            yaml.safe_dump({"tenants": {"acme": {"projects": {"support": {}, "sales": {}}}}})
        )
        document: dict[str, Any] = {"bundles": {k: dict(v) for k, v in bundles.items()}}
        if tenants:
            document["tenants"] = dict(tenants)
        (root / "bundles.yaml").write_text(yaml.safe_dump(document))
        return Configuration.load(root)

    return make
