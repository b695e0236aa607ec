"""Retention (``retention.conversations_days``, per tenant or project): the host's sweep deletes the conversations
last active longer ago than their scope keeps them, as their owner's ``DELETE`` would, and leaves the rest (other
scopes, conversations with a turn under way). The sweep is driven with an injected time; the background loop with a
tiny interval and retention, awaited round by round."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from api_stack import ApiStack, api_stack
from erasure_checks import postgres_rows_holding
from slow_bundle import WAIT, slow_bundle

from berth.default_plugins.storage.sqlite_meta import SqliteMetaStore
from berth.storage.scope import ConversationScope
from berth.testing.storage import current_storage_kind
from berth.turns.retention import RetentionSweep

pytestmark = pytest.mark.usefixtures("storage_kind")

ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Done.</channel:answer>'


def sweep_of(stack: ApiStack) -> RetentionSweep:
    assert stack.services.retention is not None, "an API process runs the retention sweep"
    return stack.services.retention


async def conversation_with_a_turn(stack: ApiStack, message: str, who: str, tenant: str, project: str) -> str:
    conversation = await stack.conversation(who=who, tenant=tenant, project=project)
    started = await stack.start_turn(conversation, message, who=who, tenant=tenant, project=project)
    events = await stack.events(started["events_url"], who=who)
    assert events[-1][1] == "turn.completed"
    return conversation


async def status(stack: ApiStack, conversation: str, who: str = "acme", scope: str = "acme/support") -> int:
    response = await stack.client.get(f"/v1/{scope}/conversations/{conversation}", headers=stack.auth(who))
    return response.status_code


async def test_the_sweep_deletes_the_conversations_past_their_tenants_retention(tmp_path: Path) -> None:
    bundles = {"hello": {"source": {"entry_point": "hello"}}, "slow": slow_bundle(tmp_path)}
    tenants = {"acme": {"retention": {"conversations_days": 30}}}  # globex keeps its conversations
    async with api_stack(tmp_path, [ANSWER, ANSWER, WAIT], bundles=bundles, tenants=tenants) as stack:
        old = await conversation_with_a_turn(stack, "the orchidtelescope plan", "acme", "acme", "support")
        kept = await conversation_with_a_turn(stack, "the globex plan", "globex", "globex", "research")
        busy = await stack.conversation()
        waiting = await stack.start_turn(busy, "wait", bundle="slow")
        assert (await stack.events(waiting["events_url"], limit=2))[-1][1] == "tool.call"
        sweep = sweep_of(stack)
        now = datetime.now(UTC)

        assert await sweep.sweep_once(now + timedelta(days=29)) == 0
        assert await status(stack, old) == 200

        assert await sweep.sweep_once(now + timedelta(days=31)) == 1  # the busy one waits for its turn to end
        assert await status(stack, old) == 404
        assert await status(stack, busy) == 200
        assert await status(stack, kept, "globex", "globex/research") == 200
        if current_storage_kind() == "distributed":
            assert await postgres_rows_holding(stack, ["orchidtelescope", old]) == {}

        cancel = f"/v1/acme/support/conversations/{busy}/turns/{waiting['turn_id']}/cancel"
        assert (await stack.client.post(cancel, headers=stack.auth())).status_code == 202
        await stack.events(waiting["events_url"])  # to its end
        assert await sweep.sweep_once(now + timedelta(days=31)) == 1
        assert await status(stack, busy) == 404
        assert await status(stack, kept, "globex", "globex/research") == 200
        assert sweep.deleted == 2


async def test_the_sweep_runs_in_the_background_at_its_interval(tmp_path: Path) -> None:
    retention = {"retention": {"conversations_days": 1e-9, "sweep_interval_s": 0.05}}  # 86 microseconds
    async with api_stack(tmp_path, [ANSWER], platform=retention) as stack:
        ready = (await stack.client.get("/readyz")).json()
        assert "retention sweep" in ready["checks"]["background"], ready
        conversation = await stack.conversation()
        sweep = sweep_of(stack)
        for _ in range(100):  # rounds, not seconds: in a distributed stack the worker may take a round's lease
            if await status(stack, conversation) == 404:
                break
            await sweep.wait_for_rounds(sweep.rounds + 1)
        assert await status(stack, conversation) == 404


@pytest.mark.parametrize("storage_kind", ["embedded"], indirect=True)  # the sweep alone, over a metadata store
async def test_a_stopped_sweep_returns_at_once_instead_of_sleeping_out_its_interval(tmp_path: Path) -> None:
    meta = SqliteMetaStore(tmp_path)
    await meta.open()

    async def never(scope: ConversationScope) -> bool:
        raise AssertionError(f"nothing is past its retention, yet {scope} was asked about")

    sweep = RetentionSweep(
        meta=meta,
        delete=never,
        busy=never,
        scopes=lambda: [("acme", "support")],
        retention_days=lambda tenant, project: 30,
        interval_s=lambda: 3600,
    )
    try:
        running = asyncio.create_task(sweep.run())
        await sweep.wait_for_rounds(1)
        sweep.stop()
        await asyncio.wait_for(running, 5)  # the host's shutdown does not wait for the next round
        assert sweep.rounds == 1
    finally:
        await meta.aclose()
