"""Fixtures shared by the core's tests (the service markers and ``clean_berth_env`` come from ``berth.testing``)."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO_ROOT = Path(__file__).resolve().parent.parent

# Property tests find wrong answers, not slow ones: on two shared cores running the suite in parallel an example can
# take seconds, which Hypothesis's default deadline (200 ms) and its too_slow health check would report as failures.
settings.register_profile("berth", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("berth")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (in ``addopts``): two pytest-xdist workers per core. The tests mostly wait (for the processes,
    servers and sockets they start), so one worker per core leaves half the machine idle: on 2 cores, 4 workers take
    the default run from about 7 to about 5 minutes on a busy machine. ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still wins."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own implementation reads it
    return 2 * len(os.sched_getaffinity(0))


@pytest.fixture(scope="session", autouse=True)
def shared_knowledge_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One knowledge folder for the whole run (``BERTH_PLATFORM__KNOWLEDGE__ROOT``): the example ``docs``
    bundle indexes Berth's docs and source once, and every later host that loads it finds the index
    up to date instead of indexing again. Tests of indexing itself use folders of their own."""
    root = tmp_path_factory.mktemp("knowledge")
    previous = os.environ.get("BERTH_PLATFORM__KNOWLEDGE__ROOT")
    os.environ["BERTH_PLATFORM__KNOWLEDGE__ROOT"] = str(root)
    yield root
    if previous is None:
        os.environ.pop("BERTH_PLATFORM__KNOWLEDGE__ROOT", None)
    else:
        os.environ["BERTH_PLATFORM__KNOWLEDGE__ROOT"] = previous


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
def listener() -> Iterator[int]:
    """A TCP port listening on the host's 127.0.0.1 (standing for the API and any local service), for the tests
    that show a sandboxed program cannot connect to it."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield int(server.getsockname()[1])
