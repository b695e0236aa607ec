"""``berth descriptors check`` on a distributed assembly: the DSN, the Redis URL and the bucket, without connecting."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from berth.cli import cli
from berth.cli.errors import run_guarded
from berth.config.storage_checks import bucket_problem, dsn_problem, redis_url_problem

pytestmark = pytest.mark.usefixtures("clean_berth_env")


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://berth@db.internal:5432/berth",
        "postgres://u:p@127.0.0.1/berth?sslmode=require",
        "host=db port=5432 dbname=berth user=berth",
    ],
)
def test_postgresql_urls_and_libpq_strings_are_dsns(dsn: str) -> None:
    assert dsn_problem(dsn) is None


@pytest.mark.parametrize(
    ("dsn", "says"),
    [
        ("mysql://db/berth", "not a PostgreSQL DSN"),
        ("postgresql:///berth", "no host"),
        ("postgresql://db:5432", "no database"),
        ("db:5432/berth", "not a PostgreSQL DSN"),
    ],
)
def test_what_is_not_a_dsn_is_named(dsn: str, says: str) -> None:
    assert says in (dsn_problem(dsn) or "")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://cache:6379/0", None),
        ("rediss://cache:6380", None),
        ("unix:///run/redis.sock", None),
        ("http://cache:6379", "not a Redis URL"),
        ("redis://cache:6379/zero", "not a number"),
        ("redis:///0", "no host"),
    ],
)
def test_redis_urls(url: str, says: str | None) -> None:
    problem = redis_url_problem(url)
    assert (problem is None) if says is None else (says in (problem or ""))


@given(st.from_regex(r"\A[a-z0-9][a-z0-9-]{1,61}[a-z0-9]\Z"))
def test_every_name_of_lowercase_letters_digits_and_inner_hyphens_is_a_bucket(name: str) -> None:
    assert bucket_problem(name) is None


@given(st.text(min_size=1, max_size=80).filter(lambda s: any(c.isupper() or c in " _/" for c in s)))
def test_a_name_with_capitals_spaces_underscores_or_slashes_is_not_a_bucket(name: str) -> None:
    assert bucket_problem(name) is not None


def check(directory: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``berth descriptors check DIRECTORY``: its exit code and what it printed."""
    code = run_guarded(cli, ["descriptors", "check", str(directory)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_check_names_each_bad_field_of_a_distributed_assembly_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = {
        "kind": "distributed",
        "postgres": {"dsn": "mysql://db/berth", "pool_min": 20, "pool_max": 5},
        "redis": {"url": "http://cache:6379"},
        "artifacts": {"kind": "s3", "bucket": "My_Bucket"},
    }
    (tmp_path / "assembly.yaml").write_text(yaml.safe_dump({"platform": {"storage": storage}}, sort_keys=False))
    code, output = check(tmp_path, capsys)
    assert code == 2, output
    for field, says in (
        ("platform.storage.postgres.dsn", "not a PostgreSQL DSN"),
        ("platform.storage.postgres.pool_min", "larger than pool_max"),
        ("platform.storage.redis.url", "not a Redis URL"),
        ("platform.storage.artifacts.bucket", "not an S3 bucket name"),
    ):
        line = next((line for line in output.splitlines() if field in line), "")
        assert "assembly.yaml:" in line and says in line, output
    assert "mysql://db/berth" not in output  # a literal DSN may hold a password: never echoed


def test_a_distributed_assembly_whose_values_are_secrets_checks_their_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = {"kind": "distributed", "postgres": {"dsn": "secret:pg"}, "redis": {"url": "secret:redis"}}
    (tmp_path / "assembly.yaml").write_text(yaml.safe_dump({"platform": {"storage": storage}}))
    (tmp_path / "secrets.yaml").write_text(yaml.safe_dump({"pg": "env:PG_DSN"}))
    code, output = check(tmp_path, capsys)
    assert code == 2
    assert "secret 'redis' is not declared" in output
