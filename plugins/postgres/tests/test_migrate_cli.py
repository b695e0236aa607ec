"""``berth migrate`` end to end: it prints each step, a second run has nothing to do, an unreachable server is a
runtime error naming the host (never the password), and embedded storage has nothing to migrate.

The first test runs the installed ``berth`` as a subprocess; the others run the same command line in this process
(the CLI's own guard maps errors to exit codes), since each interpreter start costs seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from berth_postgres.migrations import available_migrations
from pg_fixtures import scratch_database

from berth.cli import cli
from berth.cli.errors import run_guarded

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


def berth_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``berth <args>`` in this process: its exit code, stdout and stderr."""
    code = run_guarded(cli, list(args))
    printed = capsys.readouterr()
    return code, printed.out, printed.err


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


def test_migrate_reads_the_dsn_from_the_descriptors_secret(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    descriptors = distributed_descriptors(tmp_path / "descriptors", "env:BERTH_TEST_PG_DSN")
    monkeypatch.setenv("BERTH_TEST_PG_DSN", database)
    code, out, err = berth_here(capsys, "migrate", "--descriptors", str(descriptors))
    assert code == 0, err
    assert "0003_memory: applied" in out


def test_an_unreachable_server_is_a_runtime_error_naming_the_host_not_the_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = berth_here(capsys, "migrate", "--dsn", "postgresql://berth:hunter2-secret@127.0.0.1:1/berth")
    assert code == 1
    assert "cannot connect to PostgreSQL at berth@127.0.0.1:1/berth" in err
    assert "hunter2-secret" not in err + out


def test_a_missing_secret_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    descriptors = distributed_descriptors(tmp_path / "descriptors", "env:BERTH_TEST_UNSET_DSN")
    monkeypatch.delenv("BERTH_TEST_UNSET_DSN", raising=False)
    code, _, err = berth_here(capsys, "migrate", "--descriptors", str(descriptors))
    assert code == 2, err
    assert "BERTH_TEST_UNSET_DSN" in err


def test_embedded_storage_has_nothing_to_migrate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    descriptors = tmp_path / "descriptors"
    descriptors.mkdir()
    (descriptors / "assembly.yaml").write_text("platform:\n  storage: {kind: embedded, root: ./var}\n")
    code, out, err = berth_here(capsys, "migrate", "--descriptors", str(descriptors))
    assert code == 0, err
    assert "storage is embedded: nothing to migrate" in out
