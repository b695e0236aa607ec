"""Fixtures for the model-provider unit tests."""

from __future__ import annotations

import pytest
from conversations import Conversation


@pytest.fixture
def conversation() -> Conversation:
    """A fresh conversation on a fixed clock, rendered with the real renderer."""
    return Conversation()
