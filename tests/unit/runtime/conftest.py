"""Fixtures for the runtime tests: a deterministic conversation builder on a fixed clock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from runtime_builders import T0, ConversationBuilder

from berth.runtime.announce import AnnounceState


@pytest.fixture
def conversation() -> ConversationBuilder:
    """A fresh conversation builder on a fixed clock."""
    return ConversationBuilder()


@pytest.fixture
def announce_state() -> AnnounceState:
    """A typical ANNOUNCE state for round 3 of 15."""
    return AnnounceState(
        iteration=3,
        max_iterations=15,
        budget_tokens_left=120_000,
        now=T0 + timedelta(hours=2),
        user_timezone="Europe/Berlin",
    )
