"""``berth run --check-services``: which of PostgreSQL, Redis and the artifact store answer (without serving)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from berth_postgres.testing import scratch_database

from berth.cli import cli
from berth.cli.errors import run_guarded
from berth.testing.redis import test_redis_url

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.usefixtures("clean_berth_env")]


@pytest.fixture(scope="module")
def migrated() -> Iterator[str]:
    with scratch_database(migrated=True) as dsn:
        yield dsn


def descriptors(root: Path, dsn: str, redis_url: str) -> Path:
    root.mkdir()
    storage = {"kind": "distributed", "postgres": {"dsn": dsn}, "redis": {"url": "secret:redis_url"}}
    (root / "assembly.yaml").write_text(yaml.safe_dump({"platform": {"storage": storage}}))
    (root / "secrets.yaml").write_text(yaml.safe_dump({"redis_url": redis_url}))
    return root


def check_services(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, str]]:
    code = run_guarded(cli, ["run", "--descriptors", str(root), "--check-services"])
    lines = capsys.readouterr().out.splitlines()
    return code, {line.split()[0]: line for line in lines if line.strip()}


def test_every_service_answers(tmp_path: Path, migrated: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = check_services(descriptors(tmp_path / "d", migrated, test_redis_url()), capsys)
    assert code == 0, lines
    assert " ok " in lines["postgres"] and "PostgreSQL" in lines["postgres"]
    assert " ok " in lines["redis"] and "redis 7" in lines["redis"]
    assert " ok " in lines["artifacts"] and "local: folder " in lines["artifacts"]


def test_what_does_not_answer_is_named_and_the_exit_code_says_so(
    tmp_path: Path, migrated: str, capsys: pytest.CaptureFixture[str]
) -> None:
    behind = migrated.rsplit("/", 1)[0] + "/postgres"  # a database without Berth's schema
    code, lines = check_services(descriptors(tmp_path / "d", behind, "redis://:s3cret@127.0.0.1:6399/0"), capsys)
    assert code == 1
    assert "UNREACHABLE" in lines["postgres"] and "berth migrate" in lines["postgres"]
    assert "UNREACHABLE" in lines["redis"] and "6399" in lines["redis"]
    assert all("s3cret" not in line for line in lines.values())  # the password is never printed


def test_an_in_process_chat_on_distributed_storage_is_refused_with_the_way_out(
    tmp_path: Path, migrated: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = descriptors(tmp_path / "d", migrated, test_redis_url())
    assert run_guarded(cli, ["chat", "--in-process", "--descriptors", str(root), "-m", "hello"]) == 2
    assert "chat with a running API instead (--url)" in capsys.readouterr().err
