"""The exec image for the docker backend's tests: built once per session from ``exec/Dockerfile``."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TEST_IMAGE = "berth-exec:test"


@pytest.fixture(scope="session")
def exec_image() -> str:
    """``berth-exec:test``, built on ``berth-exec-base:offline`` (``.ci/start-docker`` imports it)."""
    from berth_docker.testing import build_test_image

    return build_test_image(TEST_IMAGE)


@pytest.fixture(scope="session")
def combined_supervisor() -> dict[str, Any]:
    """The combined strategy's supervisor for tests: this checkout's venv (editable installs of Berth and the
    bundles) and its base interpreter, mounted read-only at the same paths (a deployment's image has them)."""
    base = Path(sys.base_prefix).resolve()
    repo_root_path = Path(__file__).resolve().parents[3]
    return {
        "supervisor_python": sys.executable,
        "mounts": [f"{repo_root_path}:{repo_root_path}:ro", f"{base}:{base}:ro"],
    }


@pytest.fixture
def runs_root() -> Iterator[Path]:
    """A runs root the executors can traverse (pytest's tmp_path is private to root), removed afterwards."""
    root = Path("/tmp") / f"berth-exec-runs-{os.getpid()}"
    yield root
    shutil.rmtree(root, ignore_errors=True)
