"""Fixtures shared by the core's tests (the service markers and ``clean_berth_env`` come from ``berth.testing``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def repo_root() -> Path:
    """The repository's root folder."""
    return REPO_ROOT


@pytest.fixture
def example_descriptors(tmp_path: Path) -> Path:
    """A writable copy of the example descriptor set in ``descriptors/``."""
    target = tmp_path / "descriptors"
    shutil.copytree(REPO_ROOT / "descriptors", target, ignore=shutil.ignore_patterns("schema"))
    return target
