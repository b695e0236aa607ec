"""Service markers for tests that need a real service: ``postgres``, ``redis``, ``docker``, ``browser``, ``aws``,
``sandbox``, ``clamav``.

A test marked with one runs when the service answers. When it does not, the test is skipped with the reason,
or fails under ``CI=true``, where a missing service is a broken CI set-up rather than a reason to skip. Any
project with ``berth-platform`` installed gets the markers (the core's suite, the ``plugins/*`` projects and
third-party plugins alike)::

    @pytest.mark.postgres
    def test_migrations_apply(): ...

Tests marked ``sandbox`` or ``docker`` run one at a time on a machine (:func:`machine_wide_lock`), whatever the
pytest-xdist workers or other runs next to them do.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from berth.config.environment import docker_host, process_environ, running_in_ci


@dataclass(frozen=True, slots=True)
class ServiceMarker:
    """A marker name, what it needs, and how to tell whether that is here now."""

    name: str
    needs: str
    available: Callable[[], bool]


def port_open(port: int, host: str = "127.0.0.1") -> Callable[[], bool]:
    """A check that a TCP connection to ``host:port`` succeeds within a second."""

    def check() -> bool:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            return False

    return check


def docker_available() -> bool:
    """Whether a Docker engine answers on ``DOCKER_HOST`` (a ``unix://`` socket) or the default socket."""
    url = docker_host() or "unix:///var/run/docker.sock"
    if not url.startswith("unix://"):
        return port_open(int(url.rsplit(":", 1)[-1]), url.split("://")[-1].rsplit(":", 1)[0])()
    path = url.removeprefix("unix://")
    try:
        with socket.socket(socket.AF_UNIX) as probe:
            probe.settimeout(2)
            probe.connect(path)
            probe.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
            return b" 200 " in probe.recv(64)
    except OSError:
        return False


def chromium_available() -> bool:
    """Whether a Chromium binary is on ``PATH``."""
    return shutil.which("chromium") is not None or shutil.which("chromium-browser") is not None


def moto_available() -> bool:
    """Whether moto's server (the local stand-in for S3, ECS and Secrets Manager) can be imported."""
    return importlib.util.find_spec("moto") is not None


def sandbox_available() -> bool:
    """Whether bubblewrap can build a sandbox here and the host runs as root (to give the executor its own uid)."""
    from berth.default_plugins.exec.local import bwrap_works

    return os.geteuid() == 0 and bwrap_works() and Path("/usr/bin/python3").is_file()


def clamd_available() -> bool:
    """Whether ClamAV's daemon is installed (the ``clamd`` fixture starts one of its own)."""
    return shutil.which("clamd") is not None or Path("/usr/sbin/clamd").is_file()


SERVICE_MARKERS: tuple[ServiceMarker, ...] = (
    ServiceMarker("postgres", "PostgreSQL on 127.0.0.1:5432", port_open(5432)),
    ServiceMarker("redis", "Redis on 127.0.0.1:6379", port_open(6379)),
    ServiceMarker("docker", "a Docker engine on DOCKER_HOST (bash .ci/start-docker starts one)", docker_available),
    ServiceMarker("browser", "headless Chromium on PATH", chromium_available),
    ServiceMarker("aws", "moto's server (S3/ECS/Secrets Manager) on 127.0.0.1", moto_available),
    ServiceMarker("sandbox", "bubblewrap, root and /usr/bin/python3 (the local exec sandbox)", sandbox_available),
    ServiceMarker("clamav", "ClamAV's clamd (apt-get install clamav-daemon)", clamd_available),
)


def pytest_configure(config: pytest.Config) -> None:
    """Register the service markers, so ``--strict-markers`` accepts them in any project."""
    for marker in SERVICE_MARKERS:
        config.addinivalue_line("markers", f"{marker.name}: needs {marker.needs}")


MACHINE_WIDE_MARKERS: frozenset[str] = frozenset({"sandbox", "docker"})
"""Markers of tests that use what a machine has once: the executor uids 61000 and up with their cgroups and
``RLIMIT_NPROC`` count (every host process hands out the same uids: a fork bomb's processes count against another
process's run), and the Docker engine's containers and image tags (a test checks that no exec container is left)."""

MACHINE_WIDE_LOCK: Path = Path(tempfile.gettempdir()) / "berth-testing-machine-wide.lock"
"""The file whose ``flock`` a test marked with one of :data:`MACHINE_WIDE_MARKERS` holds while it runs."""


@contextmanager
def machine_wide_lock(path: Path = MACHINE_WIDE_LOCK) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (waiting for it): one test at a time on this machine, whichever
    process runs it — a pytest-xdist worker or another checkout's run."""
    descriptor = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)  # a read-only descriptor may flock
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Run a test marked ``sandbox`` or ``docker`` (set-up, call and tear-down) under :func:`machine_wide_lock`, so
    parallel test processes take turns for the sandbox's uids and the Docker engine."""
    if not any(item.get_closest_marker(name) for name in MACHINE_WIDE_MARKERS):
        return (yield)
    with machine_wide_lock():
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip (or, under ``CI=true``, fail) a test whose marked service does not answer — before any of its fixtures
    is set up, module-scoped ones included (a fixture that builds a Docker image never runs without an engine)."""
    by_name = {marker.name: marker for marker in SERVICE_MARKERS}
    for mark in item.iter_markers():
        marker = by_name.get(mark.name)
        if marker is None or marker.available():
            continue
        reason = f"needs {marker.needs}, which is not available"
        if running_in_ci():
            pytest.fail(f"{reason} (required under CI=true)")
        pytest.skip(reason)


@pytest.fixture
def clean_berth_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove every ``BERTH_*`` variable so a test sees only what it sets."""
    for name in list(process_environ()):
        if name.upper().startswith("BERTH_"):
            monkeypatch.delenv(name)
