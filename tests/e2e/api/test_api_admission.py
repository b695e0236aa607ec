"""Admission over HTTP: gateway.yaml's request rates, concurrent turns per tenant and worker backpressure."""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from api_stack import KEYS, ApiStack, api_stack
from gate_bundle import ANSWER, HOLD, close_gate, gate_bundles, open_gate

from berth.storage.scope import OwnerScope

TIGHT_RATE = {
    "limits": {
        "default": {"requests_per_minute": 1, "burst": 2},
        "tenants": {"globex": {"requests_per_minute": 600, "burst": 50}},
    }
}


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the Prometheus exposition ``text`` (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    prefix = f"{name}{{{wanted}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.removeprefix(prefix))
    return 0.0


async def metrics(stack: ApiStack) -> str:
    return (await stack.client.get("/metrics", headers=stack.auth("admin"))).text


@asynccontextmanager
async def gated_stack(tmp_path: Path, gateway: dict[str, Any]) -> AsyncIterator[ApiStack]:
    """A stack serving the gate bundle (every turn holds in ``gate.hold`` until the gate opens, then answers)."""
    close_gate()
    async with api_stack(
        tmp_path, [HOLD, ANSWER], bundles=gate_bundles(tmp_path), repeat=True, gateway=gateway
    ) as stack:
        yield stack


async def holding_turn(stack: ApiStack, conversation: str) -> dict[str, Any]:
    """Start a turn and return once it holds at the gate."""
    started = await stack.start_turn(conversation, "hold")
    await until_event(stack, started, "tool.call")
    return started


async def until_event(stack: ApiStack, started: dict[str, Any], kind: str) -> None:
    """Follow the turn's events until one of ``kind`` has been sent."""
    async with stack.client.stream("GET", started["events_url"], headers=stack.auth()) as response:
        async for line in response.aiter_lines():
            if line == f"event: {kind}":
                return
    raise AssertionError(f"the stream ended before a {kind} event")


async def test_a_tenant_over_its_request_rate_gets_429_with_the_wait_and_nothing_is_stored(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER], gateway=TIGHT_RATE) as stack:
        for _ in range(3):  # one a minute, two more at once
            listed = await stack.client.get("/v1/acme/support/conversations", headers=stack.auth())
            assert listed.status_code == 200
        refused = await stack.client.post("/v1/acme/support/conversations", json={}, headers=stack.auth())

        assert refused.status_code == 429
        error = refused.json()["error"]
        assert error["code"] == "rate_limited"
        assert "1 requests per minute (burst 2)" in error["message"]
        assert error["details"]["requests_per_minute"] == 1
        wait = error["details"]["retry_after_s"]
        assert 50 < wait <= 60, "a minute after the first of the three, less the time they took"
        assert refused.headers["retry-after"] == str(math.ceil(wait))
        assert stack.services.meta is not None
        owner = OwnerScope(tenant="acme", project="support", user_id="acme-user")
        assert await stack.services.meta.list_conversations(owner, limit=10) == [], "the refused create stored nothing"

        for _ in range(5):  # another tenant has limits of its own
            other = await stack.client.get("/v1/globex/research/conversations", headers=stack.auth("globex"))
            assert other.is_success
        exposition = await metrics(stack)
        assert metric(exposition, "berth_admission_rejections_total", reason="rate", tenant="acme") == 1
        assert metric(exposition, "berth_admission_rejections_total", reason="rate", tenant="globex") == 0


async def test_requests_without_a_valid_key_do_not_use_up_the_tenant_rate(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER], gateway=TIGHT_RATE) as stack:
        for _ in range(5):
            bad = await stack.client.get("/v1/acme/support/conversations", headers={"Authorization": "Bearer nope"})
            assert bad.status_code == 401
        for _ in range(3):
            assert (await stack.client.get("/v1/acme/support/conversations", headers=stack.auth())).is_success


async def test_mcp_requests_count_against_the_tenant_rate(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER], gateway=TIGHT_RATE) as stack:
        for _ in range(3):
            assert (await stack.client.get("/v1/acme/support/bundles", headers=stack.auth())).is_success
        refused = await stack.client.post(
            "/mcp/acme/support/hello",
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={**stack.auth(), "Accept": "application/json, text/event-stream"},
        )
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "rate_limited"
        assert int(refused.headers["retry-after"]) >= 1


async def test_a_tenant_running_its_concurrent_turns_gets_429_until_one_finishes(tmp_path: Path) -> None:
    limits = {"limits": {"tenants": {"acme": {"concurrent_turns": 1}}}, "backpressure": {"retry_after_s": 3}}
    async with gated_stack(tmp_path, limits) as stack:
        first, second = await stack.conversation(), await stack.conversation()
        holding = await holding_turn(stack, first)

        refused = await stack.client.post(
            f"/v1/acme/support/conversations/{second}/turns", json={"message": "too many"}, headers=stack.auth()
        )
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "3"
        assert refused.json()["error"]["code"] == "too_many_turns"
        detail = await stack.client.get(f"/v1/acme/support/conversations/{second}", headers=stack.auth())
        assert detail.json()["turns"] == [], "the refused turn left nothing behind"

        other_tenant = await stack.start_turn(
            await stack.conversation("globex", "globex", "research"), "hi", "globex", "globex", "research"
        )
        assert (await stack.events(other_tenant["events_url"], "globex"))[-1][1] == "turn.completed"

        open_gate()
        assert (await stack.events(holding["events_url"]))[-1][1] == "turn.completed"
        again = await stack.start_turn(second, "my turn now")  # the lease was returned with the completion
        assert (await stack.events(again["events_url"]))[-1][1] == "turn.completed"
        exposition = await metrics(stack)
        assert metric(exposition, "berth_admission_rejections_total", reason="concurrent_turns", tenant="acme") == 1


async def test_a_full_worker_queues_turns_then_answers_503(tmp_path: Path) -> None:
    backpressure = {"backpressure": {"max_inflight_turns_per_worker": 1, "queue_max": 1, "retry_after_s": 2}}
    async with gated_stack(tmp_path, backpressure) as stack:
        conversations = [await stack.conversation() for _ in range(3)]
        running = await holding_turn(stack, conversations[0])
        queued = await stack.start_turn(conversations[1], "wait your turn")
        exposition = await metrics(stack)
        assert (metric(exposition, "berth_turns_running"), metric(exposition, "berth_turns_queued")) == (1, 1)

        refused = await stack.client.post(
            f"/v1/acme/support/conversations/{conversations[2]}/turns", json={"message": "full"}, headers=stack.auth()
        )
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "2"
        error = refused.json()["error"]
        assert error["code"] == "overloaded"
        assert error["details"] == {"running": 1, "queued": 1, "retry_after_s": 2}

        open_gate()
        assert (await stack.events(running["events_url"]))[-1][1] == "turn.completed"
        queued_events = await stack.events(queued["events_url"])
        assert queued_events[0][1:] == (
            "notice",
            {"code": "queued", "message": "this worker is busy: the turn waits for a free slot (0 turns ahead of it)"},
        )
        assert (queued_events[1][1], queued_events[-1][1]) == ("turn.started", "turn.completed")
        exposition = await metrics(stack)
        assert (metric(exposition, "berth_turns_running"), metric(exposition, "berth_turns_queued")) == (0, 0)
        assert metric(exposition, "berth_admission_rejections_total", reason="backpressure", tenant="acme") == 1


async def test_a_queued_turn_can_be_cancelled_before_it_runs(tmp_path: Path) -> None:
    async with gated_stack(tmp_path, {"backpressure": {"max_inflight_turns_per_worker": 1, "queue_max": 4}}) as stack:
        first, second = await stack.conversation(), await stack.conversation()
        running = await holding_turn(stack, first)
        queued = await stack.start_turn(second, "never mind")
        url = f"/v1/acme/support/conversations/{second}/turns/{queued['turn_id']}/cancel"
        assert (await stack.client.post(url, headers=stack.auth())).json()["cancelled"] is True

        events = await stack.events(queued["events_url"])
        assert [(kind, data["code"]) for _, kind, data in events] == [
            ("notice", "queued"),
            ("turn.failed", "cancelled"),
        ]
        assert "waited for a free slot" in events[1][2]["message"]
        assert metric(await metrics(stack), "berth_turns_queued") == 0

        open_gate()
        assert (await stack.events(running["events_url"]))[-1][1] == "turn.completed"
        after = await stack.start_turn(second, "now for real")  # the conversation is free again
        assert (await stack.events(after["events_url"]))[-1][1] == "turn.completed"


SMALL_BODIES = {"limits": {"default": {"max_body_bytes": 1000}, "tenants": {"globex": {"max_body_bytes": 100_000}}}}


async def test_bodies_over_the_tenant_limit_get_413_on_every_route_and_store_nothing(tmp_path: Path) -> None:
    async with api_stack(tmp_path, [ANSWER], gateway=SMALL_BODIES) as stack:
        conversation = await stack.conversation()
        title = {"title": "x" * 5000}
        declared = await stack.client.post("/v1/acme/support/conversations", json=title, headers=stack.auth())
        assert declared.status_code == 413
        assert declared.json()["error"]["code"] == "payload_too_large"
        assert "declares" in declared.json()["error"]["message"]

        async def chunks() -> Any:  # no Content-Length: counted as it arrives
            for _ in range(10):
                yield b'{"message": "' + b"y" * 200 + b'"}'

        streamed = await stack.client.post(
            f"/v1/acme/support/conversations/{conversation}/turns",
            content=chunks(),
            headers={**stack.auth(), "content-type": "application/json"},
        )
        assert streamed.status_code == 413
        assert "has more than 1000 bytes" in streamed.json()["error"]["message"]
        feedback = await stack.client.post(
            f"/v1/acme/support/conversations/{conversation}/turns/t/feedback",
            json={"reaction": "ok", "text": "z" * 2000},
            headers=stack.auth(),
        )
        assert feedback.status_code == 413

        listed = await stack.client.get("/v1/acme/support/conversations", headers=stack.auth())
        assert [c["id"] for c in listed.json()["items"]] == [conversation], "nothing new was stored"
        detail = await stack.client.get(f"/v1/acme/support/conversations/{conversation}", headers=stack.auth())
        assert detail.json()["turns"] == []

        research = await stack.conversation("globex", "globex", "research")
        roomier = await stack.start_turn(
            research, "y" * 5000, "globex", "globex", "research"
        )  # globex's limit is larger
        assert (await stack.events(roomier["events_url"], "globex"))[-1][1] == "turn.completed"


async def test_berth_chat_streams_each_turn_in_one_request_and_prints_a_refusal(tmp_path: Path) -> None:
    answer = '<channel:action>{"action": "complete"}</channel:action><channel:answer>Hi there.</channel:answer>'
    rate = {"limits": {"default": {"requests_per_minute": 1, "burst": 2}}}
    async with api_stack(tmp_path, [answer], repeat=True, gateway=rate) as stack:
        chat = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).parent / "berth"),
            "chat",
            "--url",
            str(stack.client.base_url),
            "--tenant",
            "acme",
            "--project",
            "support",
            "--api-key",
            KEYS["acme"],
            *("-m", "one", "-m", "two", "-m", "three"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await chat.communicate()
    assert chat.returncode == 0, err.decode()
    assert out.decode().count("Hi there.") == 2, "a conversation and two turns fit in the burst"
    assert "refused: tenant acme is over its limit of 1 requests per minute" in err.decode()
    assert "(rate_limited)" in err.decode()
