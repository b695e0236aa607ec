"""Shared test set-up: service markers that skip outside CI and fail under ``CI=true``."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def _port_open(port: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    return check


def _docker_available() -> bool:
    return Path("/var/run/docker.sock").exists() and shutil.which("docker") is not None


def _chromium_available() -> bool:
    return shutil.which("chromium") is not None or shutil.which("chromium-browser") is not None


def _moto_available() -> bool:
    try:
        import moto.server  # noqa: F401
    except ImportError:
        return False
    return True


SERVICE_CHECKS: dict[str, tuple[Callable[[], bool], str]] = {
    "postgres": (_port_open(5432), "PostgreSQL is not reachable on 127.0.0.1:5432"),
    "redis": (_port_open(6379), "Redis is not reachable on 127.0.0.1:6379"),
    "docker": (_docker_available, "no Docker engine (/var/run/docker.sock)"),
    "browser": (_chromium_available, "no chromium on PATH"),
    "aws": (_moto_available, "moto[server] is not installed"),
}


def running_in_ci() -> bool:
    """True under CI, where a missing service is a failure instead of a skip."""
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(autouse=True)
def _require_marked_services(request: pytest.FixtureRequest) -> None:
    for marker in request.node.iter_markers():
        check = SERVICE_CHECKS.get(marker.name)
        if check is None:
            continue
        available, reason = check
        if not available():
            if running_in_ci():
                pytest.fail(f"{reason} (required under CI=true)")
            pytest.skip(reason)


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


@pytest.fixture
def clean_berth_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove every ``BERTH_*`` variable so a test sees only what it sets."""
    for name in list(os.environ):
        if name.upper().startswith("BERTH_"):
            monkeypatch.delenv(name)
