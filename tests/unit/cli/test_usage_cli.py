"""``berth usage`` over the embedded store: the storage root from the descriptors, a table of the period's usage,
and clear errors (exit 2 for a bad scope or period, exit 1 when there is no store)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from berth.cli import cli
from berth.cli.errors import run_guarded
from berth.default_plugins.storage.sqlite_meta import SqliteMetaStore
from berth.storage.scope import ConversationScope
from berth.storage.usage import UsageRecord

pytestmark = pytest.mark.usefixtures("clean_berth_env")

AT = datetime(2025, 5, 20, 9, 30, tzinfo=UTC)
MAY = ["--from", "2025-05-01", "--to", "2025-06-01T00:00:00Z"]


def descriptors_with_usage(tmp_path: Path) -> Path:
    """Descriptors whose storage root (``./state``, relative to them) holds three calls of two users."""
    folder = tmp_path / "descriptors"
    folder.mkdir()
    assembly = {
        "platform": {"storage": {"kind": "embedded", "root": "./state"}},
        "tenants": {"acme": {"projects": {"support": {}}}},
    }
    (folder / "assembly.yaml").write_text(yaml.safe_dump(assembly))

    def record(user: str, turn: str, cost: float | None) -> UsageRecord:
        scope = ConversationScope(tenant="acme", project="support", user_id=user, conversation_id="c1")
        return UsageRecord(scope, turn, "hello", "anthropic:claude-sonnet-5-5", "round", 1000, 200, 3000, 0, cost, AT)

    async def store() -> None:
        meta = SqliteMetaStore(folder / "state")
        await meta.open()
        await meta.record_usage([record("ada", "turn_1", 0.0105), record("ada", "turn_1", None), record("bob", "t", 1)])
        await meta.aclose()

    asyncio.run(store())
    return folder


def test_the_table_reads_the_store_under_the_descriptors_storage_root(tmp_path: Path) -> None:
    folder = descriptors_with_usage(tmp_path)
    result = CliRunner().invoke(
        cli, ["usage", "--descriptors", str(folder), "--tenant", "acme", "--project", "support", *MAY]
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "usage of acme/support from 2025-05-01T00:00:00Z to 2025-06-01T00:00:00Z, by user",
        "USER   CALLS  TURNS  INPUT  OUTPUT  CACHE_READ  CACHE_WRITE  TOTAL   COST_USD  UNPRICED",
        "ada    2      1      2,000  400     6,000       0            8,400   0.010500  1",
        "bob    1      1      1,000  200     3,000       0            4,200   1.000000  0",
        "TOTAL  3      2      3,000  600     9,000       0            12,600  1.010500  1",
        "1 call(s) used a model without a price in platform.models.prices: their cost is unknown and not in COST_USD",
    ]


def test_an_empty_period_prints_a_total_of_nothing(tmp_path: Path) -> None:
    folder = descriptors_with_usage(tmp_path)
    args = ["usage", "--descriptors", str(folder), "--tenant", "acme", "--project", "support", "--group-by", "day"]
    result = CliRunner().invoke(cli, [*args, "--from", "2024-01-01", "--to", "2024-02-01"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1].split() == ["TOTAL", "0", "0", "0", "0", "0", "0", "0", "-", "0"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--tenant", "initech"], "error [unknown_scope]: tenant 'initech' is not declared"),
        (["--tenant", "acme", "--project", "support", "--from", "May"], "'May' is not an ISO 8601 date or time"),
        (
            ["--tenant", "acme", "--project", "support", "--from", "2025-06-01", "--to", "2025-05-01"],
            "'to' (2025-05-01T00:00:00+00:00) must be after 'from' (2025-06-01T00:00:00+00:00)",
        ),
    ],
)
def test_a_bad_scope_or_period_is_a_usage_error(
    tmp_path: Path, args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = descriptors_with_usage(tmp_path)
    assert run_guarded(cli, ["usage", "--descriptors", str(folder), *args]) == 2
    assert expected in capsys.readouterr().err


def test_without_a_store_it_says_where_it_looked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = descriptors_with_usage(tmp_path)
    empty = tmp_path / "elsewhere"
    args = ["usage", "--descriptors", str(folder), "--var", str(empty), "--tenant", "acme", "--project", "support"]
    assert run_guarded(cli, args) == 1
    assert f"no usage is stored under {empty}" in capsys.readouterr().err
    assert not empty.exists(), "looking creates nothing"
