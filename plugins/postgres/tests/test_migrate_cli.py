"""``berth migrate`` end to end, as a subprocess: it prints each step, a second run has nothing to do, an unreachable
server is a runtime error naming the host (never the password), and embedded storage has nothing to migrate."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from berth_postgres.migrations import available_migrations
from pg_fixtures import scratch_database

pytestmark = pytest.mark.postgres

BERTH = str(Path(sys.executable).parent / "berth")


@pytest.fixture
def database() -> Iterator[str]:
    with scratch_database() as dsn:
        yield dsn


def berth(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BERTH, *args], capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})}, check=False
    )


def distributed_descriptors(folder: Path, dsn_source: str) -> Path:
    folder.mkdir()
    (folder / "assembly.yaml").write_text(
        "platform:\n"
        "  storage:\n"
        "    kind: distributed\n"
        '    postgres: {dsn: "secret:pg_dsn"}\n'
        '    redis: {url: "redis://127.0.0.1:6379/0"}\n'
    )
    (folder / "secrets.yaml").write_text(f'pg_dsn: "{dsn_source}"\n')
    return folder


def test_migrate_prints_each_step_and_a_second_run_has_nothing_to_do(database: str) -> None:
    first = berth("migrate", "--dsn", database)
    assert first.returncode == 0, first.stderr
    versions = [m.version for m in available_migrations()]
    for version in versions:
        assert f"{version}: applying" in first.stdout
        assert f"{version}: applied" in first.stdout
    assert first.stdout.index(versions[0]) < first.stdout.index(versions[-1])
    assert f"applied {len(versions)} migrations" in first.stdout
    second = berth("migrate", "--dsn", database)
    assert second.returncode == 0, second.stderr
    assert "nothing to migrate" in second.stdout
    assert "applying" not in second.stdout


def test_migrate_reads_the_dsn_from_the_descriptors_secret(database: str, tmp_path: Path) -> None:
    descriptors = distributed_descriptors(tmp_path / "descriptors", "env:BERTH_TEST_PG_DSN")
    done = berth("migrate", "--descriptors", str(descriptors), env={"BERTH_TEST_PG_DSN": database})
    assert done.returncode == 0, done.stderr
    assert "0003_memory: applied" in done.stdout


def test_an_unreachable_server_is_a_runtime_error_naming_the_host_not_the_password() -> None:
    done = berth("migrate", "--dsn", "postgresql://berth:hunter2-secret@127.0.0.1:1/berth")
    assert done.returncode == 1
    assert "cannot connect to PostgreSQL at berth@127.0.0.1:1/berth" in done.stderr
    assert "hunter2-secret" not in done.stderr + done.stdout


def test_a_missing_secret_is_a_config_error(tmp_path: Path) -> None:
    descriptors = distributed_descriptors(tmp_path / "descriptors", "env:BERTH_TEST_UNSET_DSN")
    env = {key: value for key, value in os.environ.items() if key != "BERTH_TEST_UNSET_DSN"}
    done = subprocess.run(
        [BERTH, "migrate", "--descriptors", str(descriptors)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "BERTH_TEST_UNSET_DSN" in done.stderr


def test_embedded_storage_has_nothing_to_migrate(tmp_path: Path) -> None:
    descriptors = tmp_path / "descriptors"
    descriptors.mkdir()
    (descriptors / "assembly.yaml").write_text("platform:\n  storage: {kind: embedded, root: ./var}\n")
    done = berth("migrate", "--descriptors", str(descriptors))
    assert done.returncode == 0, done.stderr
    assert "storage is embedded: nothing to migrate" in done.stdout
