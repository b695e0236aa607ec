"""Service markers for tests that need a real service: ``postgres``, ``redis``, ``docker``, ``browser``, ``aws``,
``sandbox``, ``clamav``.

A test marked with one runs when the service answers. When it does not, the test is skipped with the reason,
or fails under ``CI=true``, where a missing service is a broken CI set-up rather than a reason to skip. Any
project with ``berth-platform`` installed gets the markers (the core's suite, the ``plugins/*`` projects and
third-party plugins alike)::

    @pytest.mark.postgres
    def test_migrations_apply(): ...

Under pytest-xdist with ``--dist loadgroup`` the tests marked ``sandbox`` or ``docker`` run on one worker (see
:data:`MACHINE_WIDE_GROUP`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
from collections.abc import Callable
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
"""Markers of tests that use what one machine has once: the executor uids 61000 and up, their cgroups and
``RLIMIT_NPROC`` count (each host process hands out the same uids), and the Docker engine's containers and image
tags (a test checks that no container of the exec backend is left)."""

MACHINE_WIDE_GROUP = "machine-wide"
"""The ``xdist_group`` of those tests: under ``pytest-xdist --dist loadgroup`` one worker runs them all, one after
the other, while the other workers run the rest."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With pytest-xdist, put every test marked ``sandbox`` or ``docker`` in the :data:`MACHINE_WIDE_GROUP`
    (before xdist reads the groups): two workers never run sandboxed programs or containers at the same time."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if any(item.get_closest_marker(name) for name in MACHINE_WIDE_MARKERS):
            item.add_marker(pytest.mark.xdist_group(MACHINE_WIDE_GROUP))


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
