"""For tests of the docker backend (and of backends that play their tasks in Docker): the exec image they use."""

from __future__ import annotations

from typing import Final

from berth_docker.engine import client_for
from berth_docker.image import build_exec_image, default_context

TEST_IMAGE: Final = "berth-exec:test"
OFFLINE_BASE: Final = "berth-exec-base:offline"
"""The base ``.ci/start-docker`` imports (a debootstrapped Debian with Python): builds need no registry."""


def build_test_image(tag: str = TEST_IMAGE) -> str:
    """Build this checkout's exec image as ``tag`` on :data:`OFFLINE_BASE` (the engine's cache makes a rebuild
    quick); the tag."""
    build_exec_image(client_for(None), tag=tag, base=OFFLINE_BASE, context=default_context(), progress=lambda _: None)
    return tag
