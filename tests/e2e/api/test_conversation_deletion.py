"""Deleting a conversation (``DELETE /v1/{tenant}/{project}/conversations/{id}``): afterwards every route answers 404
and no store holds anything of it (its usage stays in the totals, anonymous); another user cannot delete it; a
running turn is cancelled first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from api_stack import ApiStack, api_stack, key_hash
from erasure_checks import conversation_routes, files_holding, postgres_rows_holding, redis_keys_naming
from slow_bundle import WAIT, slow_bundle

from berth.storage.memory import MemoryFilter
from berth.storage.scope import OwnerScope
from berth.testing.storage import current_storage_kind

pytestmark = pytest.mark.usefixtures("storage_kind")

# Words that appear nowhere but in what the user (or, for the file and the answer, the model) said in the conversation.
PROMPT = "Remember the codeword xylophonequartz for the heliotropic launch"
ATTACHMENT = b"The vault combination is marmaladeorbit.\n"
FEEDBACK = "tangerinecascade was helpful"
TITLE = "Project saffronlattice"
FILE = "# Notes on pumpernickelvortex\n"
ANSWER_TEXT = "Noted: cobaltmeringue."
MARKERS = (
    "xylophonequartz",
    "heliotropic",
    "marmaladeorbit",
    "tangerinecascade",
    "saffronlattice",
    "pumpernickelvortex",
)
ANSWER_MARKER = "cobaltmeringue"
KEPT = "Keep this one: lighthousewalrus"

WRITE_PARAMS = {"path": "outputs/notes.md", "content": FILE, "kind": "file"}
WRITE = json.dumps({"action": "call_tool", "tool_call": {"tool_id": "react.write", "params": WRITE_PARAMS}})
ANSWER = f'<channel:action>{{"action": "complete"}}</channel:action><channel:answer>{ANSWER_TEXT}</channel:answer>'
PLAIN = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Kept.</channel:answer>'
OTHER_USER = "acme-other"
OTHER_KEY = "acme-other-key-0004"


def other_user() -> list[dict[str, Any]]:
    return [{"id": OTHER_USER, "sha256": key_hash(OTHER_KEY), "tenant": "acme", "projects": ["support"]}]


async def a_conversation_with_everything(stack: ApiStack) -> tuple[str, str]:
    """A conversation with a title, a turn with an attachment, a file the turn wrote, an answer and feedback."""
    conversation = await stack.conversation(title=TITLE)
    response = await stack.client.post(
        f"/v1/acme/support/conversations/{conversation}/turns",
        data={"message": PROMPT},
        files={"notes": ("notes.txt", ATTACHMENT, "text/plain")},
        headers=stack.auth(),
    )
    assert response.status_code == 202, response.text
    turn = response.json()["turn_id"]
    events = await stack.events(response.json()["events_url"])
    assert events[-1][1] == "turn.completed", events[-1]
    feedback = await stack.client.post(
        f"/v1/acme/support/conversations/{conversation}/turns/{turn}/feedback",
        json={"reaction": "ok", "text": FEEDBACK},
        headers=stack.auth(),
    )
    assert feedback.status_code == 200
    return conversation, turn


async def usage_total(stack: ApiStack) -> dict[str, Any]:
    report = await stack.client.get("/v1/acme/support/usage", headers=stack.auth("admin"))
    assert report.status_code == 200, report.text
    return dict(report.json()["total"])


def stored_files(tmp_path: Path) -> Path:
    """The folder the stack stores files under: the embedded root, or the local artifact store's of the
    distributed stack (``./var`` of the descriptors)."""
    return tmp_path / "var" if current_storage_kind() == "embedded" else tmp_path / "descriptors" / "var"


async def test_a_deleted_conversation_is_gone_from_every_route_and_every_store(tmp_path: Path) -> None:
    markers = (*MARKERS, ANSWER_MARKER)
    script = [f"<channel:action>{WRITE}</channel:action>", ANSWER, PLAIN]
    async with api_stack(tmp_path, script) as stack:
        conversation, turn = await a_conversation_with_everything(stack)
        kept = await stack.conversation()
        kept_turn = await stack.start_turn(kept, KEPT)
        await stack.events(kept_turn["events_url"])
        spent = await usage_total(stack)
        assert spent["calls"] == 3
        owner = OwnerScope(tenant="acme", project="support", user_id="acme-user")
        memory = stack.services.memory_index
        assert memory is not None
        indexed = await memory.list_entries(MemoryFilter(owner=owner, conversation_id=conversation))
        assert indexed, "the conversation's texts were indexed for memory search"
        # what the test looks for is there before the deletion: the checks below can fail
        if current_storage_kind() == "embedded":
            assert set(files_holding(stored_files(tmp_path), MARKERS)), "the stored files hold the conversation"
        else:
            assert await postgres_rows_holding(stack, [*markers, conversation])
            assert await redis_keys_naming(stack, [turn])

        deleted = await stack.client.delete(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())
        assert deleted.status_code == 204, deleted.text
        assert deleted.content == b""

        statuses = await conversation_routes(stack, conversation, turn)
        assert set(statuses.values()) == {404}, statuses
        listed = (await stack.client.get("/v1/acme/support/conversations", headers=stack.auth())).json()
        assert [item["id"] for item in listed["items"]] == [kept]
        report = await stack.client.get(
            "/v1/acme/support/feedback",
            params={"from": "2000-01-01T00:00:00Z", "to": "2100-01-01T00:00:00Z"},
            headers=stack.auth("admin"),
        )
        assert report.json()["turns"] == []
        assert await memory.list_entries(MemoryFilter(owner=owner, conversation_id=conversation)) == ()
        # the usage stays in the totals, without the conversation
        assert await usage_total(stack) == spent
        # the other conversation is untouched
        detail = await stack.client.get(f"/v1/acme/support/conversations/{kept}", headers=stack.auth())
        assert [t["prompt"] for t in detail.json()["turns"]] == [KEPT]
        assert await memory.list_entries(MemoryFilter(owner=owner, conversation_id=kept))

        script_file = tmp_path / "script.yaml"  # the model's script holds the file and the answer it wrote
        assert files_holding(tmp_path, markers, skip=[script_file]) == {}
        if current_storage_kind() == "distributed":
            assert await postgres_rows_holding(stack, [*markers, conversation]) == {}
            assert await redis_keys_naming(stack, [turn, conversation]) == []
        else:
            assert set(files_holding(stored_files(tmp_path), [KEPT.split()[-1]])), "what is kept is still stored"


async def test_only_the_owner_can_delete_a_conversation(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [PLAIN], repeat=True, extra_keys=other_user()) as stack:
        conversation = await stack.conversation()
        turn = (await stack.start_turn(conversation, "mine"))["turn_id"]
        await stack.events(f"/v1/acme/support/conversations/{conversation}/turns/{turn}/events")
        url = f"/v1/acme/support/conversations/{conversation}"
        other = {"Authorization": f"Bearer {OTHER_KEY}"}
        for headers in (other, stack.auth("admin")):  # another user of the tenant; an admin of every tenant
            refused = await stack.client.delete(url, headers=headers)
            assert refused.status_code == 404, refused.text
            error = refused.json()["error"]
            assert (error["code"], error["message"]) == ("not_found", f"conversation {conversation} not found")
        foreign = await stack.client.delete(
            f"/v1/globex/research/conversations/{conversation}", headers=stack.auth("globex")
        )
        assert foreign.status_code == 404
        elsewhere = await stack.client.delete(url, headers=stack.auth("globex"))  # a key of another tenant
        assert elsewhere.status_code == 404
        detail = await stack.client.get(url, headers=stack.auth())
        assert detail.status_code == 200
        assert [t["prompt"] for t in detail.json()["turns"]] == ["mine"]
        assert (await stack.client.delete(url, headers=stack.auth())).status_code == 204
        again = await stack.client.delete(url, headers=stack.auth())
        assert again.status_code == 404  # deleted already: as if it never was
        unknown = await stack.client.delete("/v1/acme/support/conversations/c_nothing", headers=stack.auth())
        assert unknown.status_code == 404


async def test_deleting_a_conversation_cancels_its_running_turn_first(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [WAIT], bundles={"slow": slow_bundle(tmp_path)}) as stack:
        conversation = await stack.conversation()
        started = await stack.start_turn(conversation, "wait for the heliotropic launch")
        until_call = await stack.events(started["events_url"], limit=2)
        assert until_call[-1][1] == "tool.call"
        deleted = await stack.client.delete(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())
        assert deleted.status_code == 204, deleted.text
        statuses = await conversation_routes(stack, conversation, started["turn_id"])
        assert set(statuses.values()) == {404}, statuses
        runs_turns = stack.worker or stack.services
        assert runs_turns.turns == {} or all(t.scope.conversation_id != conversation for t in runs_turns.turns.values())
        assert stack.services.running_turn(deleted_scope(conversation)) is None
        assert files_holding(tmp_path, ["heliotropic"]) == {}
        if current_storage_kind() == "distributed":
            assert await postgres_rows_holding(stack, ["heliotropic", conversation]) == {}
            assert await redis_keys_naming(stack, [started["turn_id"]]) == []


def deleted_scope(conversation: str) -> Any:
    return OwnerScope(tenant="acme", project="support", user_id="acme-user").conversation(conversation)
