"""Fault tests of distributed mode with real processes: workers killed mid-turn, Redis restarted during turns,
PostgreSQL connections terminated during commits. Each ends with a consistency check of every conversation."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import pytest
from distributed_cluster import (
    CRASH_ANSWER,
    STEPS,
    check_consistency,
    cluster,
    process_cluster,
    recorded_steps,
    turn_state,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

KILLS = 50


@pytest.mark.fault
async def test_turns_survive_fifty_workers_killed_mid_turn(tmp_path: Path) -> None:
    rng = random.Random(18)
    async with cluster(tmp_path, workers=3) as running:
        conversations = [await running.conversation() for _ in range(4)]
        acknowledged: dict[str, str] = {}
        done_at_kill: dict[str, set[int]] = {}
        kills = 0
        for n in range(KILLS * 3):
            if kills == KILLS:
                break
            conversation = conversations[n % len(conversations)]
            started = await running.start_turn(conversation)
            turn_id = started["turn_id"]
            acknowledged[turn_id] = conversation
            await asyncio.sleep(rng.uniform(0.05, 1.0))  # a random moment of the turn
            victim = await running.runner_of(turn_id)
            if victim is not None:
                running.kill(victim)
                kills += 1
                done_at_kill[turn_id] = done_at_kill.get(turn_id, set()) | await recorded_steps(running.dsn, turn_id)
                running.start_worker()  # ready a few seconds later; the other workers take the turn over meanwhile
            kind, data = await running.ending(started["events_url"])
            assert kind == "turn.completed", data
            assert data["answer"] == "All steps done."
        assert kills == KILLS
        running.stop_all()
        await check_consistency(running.dsn, acknowledged)
        ran = running.ledger_counts()
        for turn_id in acknowledged:
            for step in range(1, STEPS + 1):
                assert ran[f"{turn_id}:{step}"] >= 1, f"step {step} of {turn_id} never ran"
        for turn_id, steps in done_at_kill.items():
            for step in steps:  # a tool call recorded as done before the kill is never run again
                assert ran[f"{turn_id}:{step}"] == 1, f"step {step} of {turn_id} ran {ran[f'{turn_id}:{step}']} times"


async def test_acknowledged_turns_survive_redis_restarts(tmp_path: Path) -> None:
    async with cluster(tmp_path, workers=2) as running:
        conversations = [await running.conversation() for _ in range(4)]
        acknowledged: dict[str, str] = {}
        for wave in range(3):
            started = [await running.start_turn(conversation) for conversation in conversations]
            acknowledged.update({s["turn_id"]: c for s, c in zip(started, conversations, strict=True)})
            await asyncio.sleep(0.2 + 0.3 * wave)  # queued, running and finishing turns when Redis goes
            await running.redis.restart()  # it keeps nothing: the queue, the event logs and the counters are gone
            for turn in started:
                kind, data = await running.ending(turn["events_url"])
                assert kind == "turn.completed", data
        running.stop_all()
        await check_consistency(running.dsn, acknowledged)


async def test_turns_commit_through_terminated_postgres_connections(tmp_path: Path) -> None:
    rng = random.Random(8)
    async with cluster(tmp_path, workers=2) as running:
        conversations = [await running.conversation() for _ in range(4)]
        acknowledged: dict[str, str] = {}
        terminated = 0
        stop = asyncio.Event()

        async def terminate_connections() -> None:
            nonlocal terminated
            admin = await asyncpg.connect(running.dsn)
            try:
                while not stop.is_set():
                    await asyncio.sleep(rng.uniform(0.1, 0.4))
                    rows = await admin.fetch(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                    terminated += len(rows)
            finally:
                await admin.close()

        chaos = asyncio.create_task(terminate_connections())
        try:
            for _ in range(4):
                started = [await running.start_turn(conversation) for conversation in conversations]
                acknowledged.update({s["turn_id"]: c for s, c in zip(started, conversations, strict=True)})
                for turn in started:
                    kind, data = await running.ending(turn["events_url"])
                    assert kind == "turn.completed", data
        finally:
            stop.set()
            await chaos
        assert terminated > 20
        running.stop_all()
        await check_consistency(running.dsn, acknowledged)


@pytest.mark.fault
@pytest.mark.aws
async def test_a_turn_whose_worker_died_is_cancelled_at_once_and_its_conversation_goes_on(tmp_path: Path) -> None:
    async with process_cluster(tmp_path, apis=1, workers=1, lease_s=1.5) as running:
        switch = tmp_path / "poison-switch"
        switch.touch()  # fault.crash kills its worker
        conversation = await running.conversation("acme", "poison")
        turns = f"/v1/acme/poison/conversations/{conversation}/turns"
        started = (await running.client.post(turns, json={"message": "crash"})).json()
        turn_id = started["turn_id"]
        deadline = asyncio.get_running_loop().time() + 60
        while not running.reap():  # the worker runs the turn and dies; no worker is left to answer for it
            assert asyncio.get_running_loop().time() < deadline, "the poison turn did not kill its worker"
            await asyncio.sleep(0.05)
        cancel = await running.client.post(f"{turns}/{turn_id}/cancel")
        assert cancel.status_code == 202 and cancel.json()["cancelled"] is True
        kind, data = await running.ending(started["events_url"])
        assert (kind, data["code"]) == ("turn.failed", "cancelled")
        assert await turn_state(running.dsn, turn_id) == "cancelled"
        switch.unlink()
        running.start_worker()  # a worker that comes later finds nothing of it to run
        following = (await running.client.post(turns, json={"message": "and now?"})).json()
        kind, data = await running.ending(following["events_url"])
        assert (kind, data["answer"]) == ("turn.completed", CRASH_ANSWER)
        assert await turn_state(running.dsn, turn_id) == "cancelled"
