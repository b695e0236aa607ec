"""A reload broadcast over the real Redis reaches two real host processes (``berth worker``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import yaml

from berth.host.broadcast import WorkerReport, read_worker_reports
from berth.testing.redis import test_redis_url

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.usefixtures("clean_berth_env")]

BERTH = str(Path(sys.executable).parent / "berth")

BUNDLE = '''
from berth import BundleInfo, hookimpl, tool

@tool
def version() -> str:
    """Say which version serves."""
    return "{version}"

@hookimpl
def berth_bundle():
    return BundleInfo(id="alpha", version="{version}")

@hookimpl
def berth_tools(ctx):
    return [version]
'''


@pytest.fixture
def database() -> Iterator[str]:
    """A scratch PostgreSQL database with the schema migrated (a distributed worker refuses one that is behind)."""
    from berth_postgres.testing import scratch_database

    with scratch_database(migrated=True) as dsn:
        yield dsn


@pytest.fixture
def descriptors(tmp_path: Path, database: str) -> Path:
    bundle = tmp_path / "alpha"
    bundle.mkdir()
    (bundle / "__init__.py").write_text(BUNDLE.replace("{version}", "1.0"))
    root = tmp_path / "descriptors"
    root.mkdir()
    storage = {
        "kind": "distributed",
        "postgres": {"dsn": database},
        "redis": {"url": "secret:redis_url"},
    }
    (root / "assembly.yaml").write_text(yaml.safe_dump({"platform": {"storage": storage}}))
    (root / "secrets.yaml").write_text(yaml.safe_dump({"redis_url": test_redis_url()}))
    (root / "bundles.yaml").write_text(yaml.safe_dump({"bundles": {"alpha": {"source": {"path": str(bundle)}}}}))
    return root


def start_worker(descriptors: Path, worker_id: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [BERTH, "worker", "--descriptors", str(descriptors), "--worker-id", worker_id, "--no-watch", "--demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:
        if "ready" in line:
            return process
    raise AssertionError(f"worker {worker_id} exited: {process.wait()}")


@pytest.fixture
def workers(descriptors: Path) -> Iterator[list[subprocess.Popen[str]]]:
    started = [start_worker(descriptors, f"test-worker-{n}") for n in (1, 2)]
    try:
        yield started
    finally:
        for process in started:
            process.terminate()
        for process in started:
            process.wait(timeout=30)


async def reports_until(condition: object, timeout_s: float = 20.0) -> list[WorkerReport]:
    client = aioredis.from_url(test_redis_url())
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            reports = [r for r in await read_worker_reports(client) if r.worker_id.startswith("test-worker-")]
            if condition(reports):  # type: ignore[operator]
                return reports
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met; last reports: {reports}")
            await asyncio.sleep(0.05)
    finally:
        await client.aclose()


def generations(reports: list[WorkerReport]) -> dict[str, tuple[int | None, str | None, str | None]]:
    return {
        r.worker_id: (r.bundles["alpha"].generation, r.bundles["alpha"].version, r.bundles["alpha"].error)
        for r in reports
    }


async def test_reload_on_one_is_performed_by_every_worker(
    descriptors: Path, workers: list[subprocess.Popen[str]]
) -> None:
    reports = await reports_until(lambda rs: len(rs) == 2)
    assert generations(reports) == {
        "test-worker-1": (1, "1.0", None),
        "test-worker-2": (1, "1.0", None),
    }
    (descriptors.parent / "alpha" / "__init__.py").write_text(BUNDLE.replace("{version}", "2.0"))
    process = await asyncio.create_subprocess_exec(
        BERTH,
        "bundles",
        "reload",
        "alpha",
        "--descriptors",
        str(descriptors),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    assert "test-worker-1: generation 2 loaded" in stdout.decode()
    assert "test-worker-2: generation 2 loaded" in stdout.decode()
    reports = await reports_until(lambda rs: all(r.bundles["alpha"].generation == 2 for r in rs) and len(rs) == 2)
    assert generations(reports) == {
        "test-worker-1": (2, "2.0", None),
        "test-worker-2": (2, "2.0", None),
    }


async def test_a_failed_reload_keeps_every_worker_serving_and_reports_the_error(
    descriptors: Path, workers: list[subprocess.Popen[str]]
) -> None:
    await reports_until(lambda rs: len(rs) == 2)
    (descriptors.parent / "alpha" / "__init__.py").write_text("def broken(:\n")
    client = aioredis.from_url(test_redis_url())
    try:
        await client.publish("berth:bundles:reload", '{"bundle_id": "alpha", "origin": "test"}')
    finally:
        await client.aclose()
    reports = await reports_until(lambda rs: len(rs) == 2 and all(r.bundles["alpha"].error for r in rs))
    for report in reports:
        row = report.bundles["alpha"]
        assert (row.generation, row.version, row.state) == (1, "1.0", "loaded")
        assert row.error is not None
        assert "bundle_import_failed" in row.error
        assert "__init__.py:1" in row.error


async def test_a_stopped_worker_removes_its_report(descriptors: Path) -> None:
    process = start_worker(descriptors, "test-worker-solo")
    await reports_until(lambda rs: any(r.worker_id == "test-worker-solo" for r in rs))
    process.terminate()
    assert process.wait(timeout=30) == 0
    await reports_until(lambda rs: not any(r.worker_id == "test-worker-solo" for r in rs), timeout_s=5)
