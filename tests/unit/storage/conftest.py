"""Fixtures for the storage tests: real SQLite stores under ``tmp_path`` and a block builder."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from storage_builders import open_store

from berth.default_plugins.storage.sqlite import SqliteConversationStore
from berth.storage.scope import ConversationScope, OwnerScope


@pytest.fixture
def owner() -> OwnerScope:
    """Ada, a user of acme/support."""
    return OwnerScope(tenant="acme", project="support", user_id="ada")


@pytest.fixture
def scope(owner: OwnerScope) -> ConversationScope:
    """Ada's conversation ``conv-1``."""
    return owner.conversation("conv-1")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteConversationStore]:
    """An open embedded store under ``tmp_path/var``, closed after the test."""
    opened = open_store(tmp_path / "var")
    yield opened
    asyncio.run(opened.aclose())
