"""The exec image for the docker backend's tests: built once per session from ``exec/Dockerfile``."""

from __future__ import annotations

import pytest

TEST_IMAGE = "berth-exec:test"


@pytest.fixture(scope="session")
def exec_image() -> str:
    """``berth-exec:test``, built on ``berth-exec-base:offline`` (``.ci/start-docker`` imports it)."""
    from berth_docker.engine import client_for
    from berth_docker.image import build_exec_image, default_context

    build_exec_image(
        client_for(None),
        tag=TEST_IMAGE,
        base="berth-exec-base:offline",
        context=default_context(),
        progress=lambda _: None,
    )
    return TEST_IMAGE
