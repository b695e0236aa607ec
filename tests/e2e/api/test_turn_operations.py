"""An operator's hold on the turns of a distributed deployment (``/v1/admin/turns``): an ended turn ends once,
stored as its clients are told, and its conversation goes on; a tenant's admin key reaches only its tenant."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from api_stack import KEYS, ApiStack, api_stack, key_hash
from gate_bundle import ANSWER, HOLD, close_gate, gate_bundles, open_gate

from berth.storage.scope import ConversationScope

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.parametrize("storage_kind", ["distributed"], indirect=True),
    pytest.mark.usefixtures("storage_kind"),
]

ACME_ADMIN = {"id": "acme-ops", "sha256": key_hash("acme-admin-key"), "tenant": "acme", "roles": ["admin", "user"]}
SUPPORT_ADMIN = {
    "id": "support-ops",
    "sha256": key_hash("support-admin-key"),
    "tenant": "acme",
    "projects": ["support"],
    "roles": ["admin"],
}


@asynccontextmanager
async def gated(tmp_path: Path, responses: list[Any]) -> AsyncIterator[ApiStack]:
    """A distributed stack serving the gate bundle: a turn in ``gate.hold`` runs until the test opens the gate."""
    close_gate()
    async with api_stack(
        tmp_path, responses, bundles=gate_bundles(tmp_path), extra_keys=[ACME_ADMIN, SUPPORT_ADMIN]
    ) as stack:
        try:
            yield stack
        finally:
            open_gate()


async def stored_turn(stack: ApiStack, conversation: str, turn_id: str) -> Any:
    assert stack.services.store is not None
    scope = ConversationScope(tenant="acme", project="support", user_id="acme-user", conversation_id=conversation)
    return (await stack.services.store.conversation(scope).read_turn_log(turn_id)).turn


async def test_an_operator_lists_and_ends_a_running_turn_and_its_client_is_told_what_is_stored(tmp_path: Path) -> None:
    async with gated(tmp_path, [HOLD, ANSWER, ANSWER]) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "hold on")
        turn_id = started["turn_id"]
        await stack.wait_for(started["events_url"], "tool.call")  # the worker runs it, inside gate.hold
        admin = {"Authorization": f"Bearer {KEYS['admin']}"}
        listed = (await stack.client.get("/v1/admin/turns", headers=admin)).json()["turns"]
        # (its state is "accepted" until its first round is logged: the begin is written behind the first model call)
        assert [(t["turn_id"], t["attempts"], t["owner_alive"]) for t in listed] == [(turn_id, 1, True)]
        stuck = await stack.client.get("/v1/admin/turns", params={"stuck_after_s": 0}, headers=admin)
        assert stuck.json()["turns"] == []  # a live worker runs it: not stuck
        retried = await stack.client.post(f"/v1/admin/turns/{turn_id}/retry", headers=admin)
        assert retried.status_code == 409 and retried.json()["error"]["code"] == "turn_running"

        ended = await stack.client.post(
            f"/v1/admin/turns/{turn_id}/end", json={"reason": "stuck on a gate"}, headers=admin
        )
        assert ended.status_code == 200, ended.text
        events = await stack.events(started["events_url"])
        assert events[-1][1:] == (
            "turn.failed",
            {"code": "ended_by_operator", "message": "stuck on a gate", "turn_id": turn_id},
        )
        assert [kind for _, kind, _ in events].count("turn.failed") == 1
        open_gate()  # the worker's call returns: its next write is refused, and it tells nobody anything else

        again = await stack.client.post(f"/v1/admin/turns/{turn_id}/end", headers=admin)
        assert again.status_code == 404  # ended once
        following = await stack.start_turn(conversation, "and now?")  # the conversation takes turns again
        assert (await stack.wait_for(following["events_url"], "turn.completed"))["answer"] == "done"
        stored = await stored_turn(stack, conversation, turn_id)
        assert (stored.state, stored.exit_reason, stored.error) == ("failed", "ended_by_operator", "stuck on a gate")
        assert (await stack.events(started["events_url"]))[-1][1] == "turn.failed"  # a reconnect hears the same end


async def test_a_tenant_admin_key_sees_and_ends_only_its_tenants_turns(tmp_path: Path) -> None:
    async with gated(tmp_path, [HOLD, ANSWER]) as stack:
        conversation = await stack.conversation(who="globex", tenant="globex", project="research")
        started = await stack.start_turn(conversation, "hold on", who="globex", tenant="globex", project="research")
        await stack.wait_for(started["events_url"], "tool.call", who="globex")
        acme_admin = {"Authorization": "Bearer acme-admin-key"}
        assert (await stack.client.get("/v1/admin/turns", headers=acme_admin)).json()["turns"] == []
        refused = await stack.client.post(f"/v1/admin/turns/{started['turn_id']}/end", headers=acme_admin)
        assert refused.status_code == 404
        everyone = {"Authorization": f"Bearer {KEYS['admin']}"}
        assert len((await stack.client.get("/v1/admin/turns", headers=everyone)).json()["turns"]) == 1


async def test_a_project_admin_key_reaches_only_its_projects_turns(tmp_path: Path) -> None:
    async with gated(tmp_path, [HOLD, ANSWER]) as stack:
        acme_admin = {"Authorization": "Bearer acme-admin-key"}
        created = await stack.client.post("/v1/acme/sales/conversations", json={}, headers=acme_admin)
        turns_url = f"/v1/acme/sales/conversations/{created.json()['id']}/turns"
        started = (await stack.client.post(turns_url, json={"message": "hold on"}, headers=acme_admin)).json()
        async with stack.client.stream("GET", started["events_url"], headers=acme_admin) as events:
            async for line in events.aiter_lines():
                if line == "event: tool.call":
                    break
        support_admin = {"Authorization": "Bearer support-admin-key"}
        assert (await stack.client.get("/v1/admin/turns", headers=support_admin)).json()["turns"] == []
        for action in ("end", "retry"):
            refused = await stack.client.post(f"/v1/admin/turns/{started['turn_id']}/{action}", headers=support_admin)
            assert refused.status_code == 404, refused.text
        listed = (await stack.client.get("/v1/admin/turns", headers=acme_admin)).json()["turns"]
        assert [turn["turn_id"] for turn in listed] == [started["turn_id"]]
