"""Usage accounting and budgets over HTTP with the scripted model: what the providers reported is what the usage
route, ``turn.completed`` and ``berth usage`` say; a used-up budget refuses a turn (429) or stops a running one."""

from __future__ import annotations

import asyncio
import json
import math
import textwrap
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from api_stack import ApiStack, api_stack, key_hash
from click.testing import CliRunner

from berth.cli import cli
from berth.testing.storage import current_storage_kind
from berth.usage.periods import window_of

pytestmark = pytest.mark.usefixtures("storage_kind")

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>done</channel:answer>'
GREET = (
    '<channel:action>{"action": "call_tool", "tool_call": {"tool_id": "hello.greet", "params": {"name": "Ada"}}}'
    "</channel:action>"
)
PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}
USERS = ("ada", "bob", "cy", "dee", "eve")
ACME_SUPPORT = ("--tenant", "acme", "--project", "support")
BY_BUNDLE = (*ACME_SUPPORT, "--group-by", "bundle")
COLUMNS = ("CALLS", "TURNS", "INPUT", "OUTPUT", "CACHE_READ", "CACHE_WRITE", "TOTAL", "COST_USD", "UNPRICED")
TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")

ECHO_BUNDLE = """
from berth import AgentSpec, BundleInfo, hookimpl

@hookimpl
def berth_bundle():
    return BundleInfo(id="echo", version="1")

@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="answer at once")
"""


def priced(tmp_path: Path) -> dict[str, Any]:
    """``platform`` of assembly.yaml: the stack's scripted model, with a price."""
    script = tmp_path / "script.yaml"  # what api_stack writes
    return {"models": {"default": {"provider": "scripted", "model": str(script)}, "prices": {script.name: PRICE}}}


def user_key(user: str) -> str:
    return f"{user}-key-0000"


def auth(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {user_key(user)}"}


def extra_keys() -> list[dict[str, Any]]:
    """One key per user of acme/support (each key is one user)."""
    return [
        {"id": user, "sha256": key_hash(user_key(user)), "tenant": "acme", "projects": ["support"]} for user in USERS
    ]


def two_bundles(tmp_path: Path) -> dict[str, Any]:
    folder = tmp_path / "echo"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(ECHO_BUNDLE))
    return {"hello": {"source": {"entry_point": "hello"}}, "echo": {"source": {"path": str(folder)}}}


def cost_of(usage: dict[str, int]) -> float:
    return (
        usage.get("input_tokens", 0) * PRICE["input"]
        + usage.get("output_tokens", 0) * PRICE["output"]
        + usage.get("cache_read_input_tokens", 0) * PRICE["cache_read"]
        + usage.get("cache_creation_input_tokens", 0) * PRICE["cache_write"]
    ) / 1e6


def answered(usage: dict[str, int], text: str = ANSWER) -> dict[str, Any]:
    return {"text": text, "usage": usage}


async def conversation(stack: ApiStack, user: str) -> str:
    # a conversation titled by its user is never titled by the summarizer: no model call besides the turns'
    response = await stack.client.post(
        "/v1/acme/support/conversations", json={"title": f"{user}'s"}, headers=auth(user)
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def run_turn(stack: ApiStack, user: str, conversation_id: str, **body: Any) -> list[tuple[str, dict[str, Any]]]:
    """Start a turn and follow its events to the end: ``(event, data)`` pairs."""
    response = await stack.client.post(
        f"/v1/acme/support/conversations/{conversation_id}/turns",
        json={"message": "hi", **body},
        headers={**auth(user), "Accept": "text/event-stream"},
    )
    assert response.status_code == 200, response.text
    events: list[tuple[str, dict[str, Any]]] = []
    kind = ""
    for line in response.text.splitlines():
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            events.append((kind, json.loads(line[6:])))
    return events


def ending(events: list[tuple[str, dict[str, Any]]]) -> tuple[str, dict[str, Any]]:
    return next((kind, data) for kind, data in events if kind in ("turn.completed", "turn.failed"))


async def usage_report(stack: ApiStack, group_by: str, who: str = "admin", **params: str) -> dict[str, Any]:
    response = await stack.client.get(
        "/v1/acme/support/usage", params={"group_by": group_by, **params}, headers=stack.auth(who)
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def summed(usages: list[dict[str, Any]]) -> dict[str, int]:
    return {field: sum(u[field] for u in usages) for field in TOKEN_FIELDS}


async def test_fifty_turns_of_five_users_and_two_bundles_add_up_in_every_grouping(tmp_path: Path) -> None:
    script = [
        {
            "input_tokens": 1000 + 7 * n,
            "output_tokens": 20 + n,
            "cache_read_input_tokens": 500 * (n % 3),
            "cache_creation_input_tokens": 100 * (n % 4),
        }
        for n in range(50)
    ]
    async with api_stack(
        tmp_path,
        [answered(u) for u in script],
        bundles=two_bundles(tmp_path),
        platform=priced(tmp_path),
        extra_keys=extra_keys(),
    ) as stack:
        conversations = {user: await conversation(stack, user) for user in USERS}
        turns: list[tuple[str, str, dict[str, Any]]] = []  # (user, bundle, turn.completed usage)

        async def user_turn(user: str, n: int) -> None:
            bundle = "hello" if (n + USERS.index(user)) % 3 else "echo"
            kind, data = ending(await run_turn(stack, user, conversations[user], bundle=bundle))
            assert kind == "turn.completed", data
            turns.append((user, bundle, data["usage"]))

        for wave in range(10):  # five users at once, each in their own conversation
            await asyncio.gather(*(user_turn(user, wave) for user in USERS))

        def key(usage: dict[str, Any]) -> tuple[int, ...]:
            return tuple(usage[field] for field in TOKEN_FIELDS)

        assert Counter(key(usage) for _, _, usage in turns) == Counter(key(usage) for usage in script)
        for _, _, usage in turns:
            assert usage["cost_usd"] == pytest.approx(cost_of(usage))

        by_user = await usage_report(stack, "user")
        expected_users = {user: [u for who, _, u in turns if who == user] for user in USERS}
        assert [group["key"] for group in by_user["groups"]] == sorted(USERS)
        for group in by_user["groups"]:
            usages = expected_users[group["key"]]
            assert {f: group[f] for f in TOKEN_FIELDS} == summed(usages)
            assert (group["calls"], group["turns"], group["unpriced_calls"]) == (10, 10, 0)
            assert group["cost_usd"] == pytest.approx(sum(cost_of(u) for u in usages))
            assert group["total_tokens"] == sum(summed(usages).values())

        by_bundle = await usage_report(stack, "bundle")
        for group in by_bundle["groups"]:
            usages = [u for _, bundle, u in turns if bundle == group["key"]]
            assert {f: group[f] for f in TOKEN_FIELDS} == summed(usages)
            assert group["turns"] == len(usages) and group["cost_usd"] == pytest.approx(sum(map(cost_of, usages)))
        assert sorted(group["key"] for group in by_bundle["groups"]) == ["echo", "hello"]

        by_day = await usage_report(stack, "day")
        today = datetime.now(UTC).date()
        assert {group["key"] for group in by_day["groups"]} <= {str(today - timedelta(days=1)), str(today)}
        assert summed(by_day["groups"]) == summed(script)

        for report in (by_user, by_bundle, by_day):
            total = report["total"]
            assert {f: total[f] for f in TOKEN_FIELDS} == summed(script)
            assert (total["calls"], total["turns"], total["unpriced_calls"]) == (50, 50, 0)
            assert total["cost_usd"] == pytest.approx(sum(map(cost_of, script)))

        remote = await asyncio.to_thread(
            CliRunner().invoke,
            cli,
            [
                "usage",
                "--url",
                str(stack.client.base_url),
                "--api-key",
                "admin-key-0003",
                *ACME_SUPPORT,
                "--format",
                "json",
            ],
        )
        assert remote.exit_code == 0, remote.output
        assert json.loads(remote.output) == by_user

        local = await asyncio.to_thread(  # the command runs its own event loop
            CliRunner().invoke,
            cli,
            ["usage", "--descriptors", str(tmp_path / "descriptors"), *var_option(tmp_path), *BY_BUNDLE],
        )
        assert local.exit_code == 0, local.output
        header, columns, *rows, total_row = local.output.splitlines()
        assert header.startswith("usage of acme/support from ") and header.endswith(", by bundle")
        assert columns.split() == ["BUNDLE", *COLUMNS]
        assert [row.split()[0] for row in rows] == ["echo", "hello"]
        cells = total_row.split()
        assert cells[:3] == ["TOTAL", "50", "50"]
        assert cells[7] == f"{sum(summed(script).values()):,}"
        assert float(cells[8]) == pytest.approx(sum(map(cost_of, script)), abs=1e-6)


@pytest.mark.parametrize(
    ("budget", "usage", "limit", "used"),
    [
        (
            {"scope": "acme/support", "per_user": True, "period": "day", "tokens": 1000},
            {"input_tokens": 500, "output_tokens": 100},
            1000,
            1200,
        ),
        (
            {"scope": "acme", "period": "month", "cost_usd": 0.01},
            {"input_tokens": 2000, "output_tokens": 100},  # $0.0075 a turn
            0.01,
            0.015,
        ),
    ],
)
async def test_a_turn_that_would_start_over_a_budget_is_refused_until_it_resets(
    tmp_path: Path, budget: dict[str, Any], usage: dict[str, int], limit: float, used: float
) -> None:
    async with api_stack(
        tmp_path,
        [answered(usage), answered(usage), answered(usage)],
        platform=priced(tmp_path),
        gateway={"budgets": [budget]},
        extra_keys=extra_keys(),
    ) as stack:
        ada = await conversation(stack, "ada")
        for _ in range(2):  # under the budget when each starts; over it after the second
            kind, data = ending(await run_turn(stack, "ada", ada))
            assert kind == "turn.completed", data
        assert data["usage"]["cost_usd"] == pytest.approx(cost_of(usage))

        before = datetime.now(UTC)
        refused = await stack.client.post(
            f"/v1/acme/support/conversations/{ada}/turns", json={"message": "one more"}, headers=auth("ada")
        )
        after = datetime.now(UTC)

        assert refused.status_code == 429
        error = refused.json()["error"]
        assert error["code"] == "budget_exceeded"
        details = error["details"]
        assert {k: details[k] for k in ("scope", "per_user", "period", "limit")} == {
            k: budget.get(k, False) for k in ("scope", "per_user", "period")
        } | {"limit": limit}
        assert details["metric"] == ("tokens" if "tokens" in budget else "cost_usd")
        assert details["used"] == pytest.approx(used)
        resets_at = datetime.fromisoformat(details["resets_at"])
        assert details["resets_at"].endswith("Z")
        assert resets_at in {window_of(budget["period"], before).end, window_of(budget["period"], after).end}
        wait = int(refused.headers["retry-after"])
        assert wait == details["retry_after_s"]
        assert math.ceil((resets_at - after).total_seconds()) <= wait <= math.ceil((resets_at - before).total_seconds())
        assert details["resets_at"] in error["message"] and "budget exceeded" in error["message"]

        detail = await stack.client.get(f"/v1/acme/support/conversations/{ada}", headers=auth("ada"))
        assert len(detail.json()["turns"]) == 2, "the refused turn stored nothing"
        if budget.get("per_user"):
            bob = await conversation(stack, "bob")
            kind, _ = ending(await run_turn(stack, "bob", bob))
            assert kind == "turn.completed", "another user's own budget is untouched"
        metrics = (await stack.client.get("/metrics", headers=stack.auth("admin"))).text
        assert 'berth_admission_rejections_total{reason="budget",tenant="acme"} 1.0' in metrics


async def test_a_running_turn_that_uses_up_its_budget_finishes_the_round_and_fails(tmp_path: Path) -> None:
    budget = {"scope": "acme/support", "per_user": True, "period": "day", "tokens": 1000}
    greet = answered({"input_tokens": 900, "output_tokens": 150}, GREET)
    async with api_stack(
        tmp_path, [greet, answered({"input_tokens": 1})], gateway={"budgets": [budget]}, extra_keys=extra_keys()
    ) as stack:
        ada = await conversation(stack, "ada")
        events = await run_turn(stack, "ada", ada)

        kinds = [kind for kind, _ in events]
        assert kinds.index("tool.call") < kinds.index("tool.result") < kinds.index("turn.failed")
        assert "turn.completed" not in kinds
        _, failed = ending(events)
        assert failed["code"] == "budget_exceeded"
        assert "the turn stopped after the round that reached it" in failed["message"]
        detail = await stack.client.get(f"/v1/acme/support/conversations/{ada}", headers=auth("ada"))
        assert detail.json()["turns"][0]["state"] == "failed"
        report = await usage_report(stack, "user")
        assert [(g["key"], g["calls"], g["total_tokens"], g["cost_usd"]) for g in report["groups"]] == [
            ("ada", 1, 1050, None)
        ], "the round's call is recorded; the next round never ran (no price: cost unknown)"
        assert report["total"]["unpriced_calls"] == 1


async def test_the_usage_route_is_for_admin_keys_and_refuses_a_bad_query(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER]) as stack:
        user = await stack.client.get("/v1/acme/support/usage", headers=stack.auth("acme"))
        assert user.status_code == 403
        assert user.json()["error"]["code"] == "forbidden"
        other_tenant = await stack.client.get("/v1/acme/support/usage", headers=stack.auth("globex"))
        assert other_tenant.status_code == 404
        anonymous = await stack.client.get("/v1/acme/support/usage")
        assert anonymous.status_code == 401

        empty = await usage_report(stack, "day")
        month = window_of("month", datetime.now(UTC))
        assert (datetime.fromisoformat(empty["from"]), datetime.fromisoformat(empty["to"])) == (month.start, month.end)
        assert empty["groups"] == []
        assert (empty["total"]["calls"], empty["total"]["cost_usd"], empty["total"]["total_tokens"]) == (0, None, 0)

        for params, field in (
            ({"from": "2025-02-01T00:00:00Z", "to": "2025-01-01T00:00:00Z"}, "to"),
            ({"from": "2025-01-01T00:00:00Z", "to": "2025-01-01T00:00:00Z"}, "to"),
            ({"group_by": "week"}, "group_by"),
            ({"from": "yesterday"}, "from"),
        ):
            bad = await stack.client.get("/v1/acme/support/usage", params=params, headers=stack.auth("admin"))
            assert bad.status_code == 422, params
            error = bad.json()["error"]
            assert error["code"] == "invalid_request"
            assert [problem["field"] for problem in error["details"]["problems"]] == [f"query.{field}"], error


@pytest.mark.parametrize("storage_kind", ["embedded"], indirect=True)  # each distributed stack has a new database
async def test_a_restarted_host_counts_what_was_spent_before_it_started(tmp_path: Path) -> None:
    spend = answered({"input_tokens": 700, "output_tokens": 300, "cache_read_input_tokens": 250})
    async with api_stack(tmp_path, [spend], extra_keys=extra_keys()) as stack:
        ada = await conversation(stack, "ada")
        kind, _ = ending(await run_turn(stack, "ada", ada))
        assert kind == "turn.completed"

    budget = {"scope": "acme/support", "per_user": True, "period": "month", "tokens": 1250}
    async with api_stack(tmp_path, [spend], gateway={"budgets": [budget]}, extra_keys=extra_keys()) as restarted:
        refused = await restarted.client.post(
            f"/v1/acme/support/conversations/{ada}/turns", json={"message": "again"}, headers=auth("ada")
        )
        assert refused.status_code == 429
        assert refused.json()["error"]["details"]["used"] == 1250


def var_option(tmp_path: Path) -> list[str]:
    """Where the stack stored usage: ``--var`` for embedded storage; distributed storage is read from the
    PostgreSQL database the descriptors name."""
    return ["--var", str(tmp_path / "var")] if current_storage_kind() == "embedded" else []
