"""Supervised background tasks: a loop that fails is started again with backoff, logged once per failure streak,
and reported down when it stays failing (what ``/readyz`` shows)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from berth.host.supervised import BackgroundTasks, Backoff, SupervisedTask

FAST = Backoff(initial_s=0.001, cap_s=0.004)


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait until ``condition()`` holds (checked at every turn of the event loop), or fail at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.001)


def failing_then_running(failures: int) -> tuple[Callable[[], Coroutine[Any, Any, None]], list[int]]:
    """A loop factory whose first ``failures`` attempts raise; the next one runs until cancelled."""
    attempts: list[int] = []

    async def loop() -> None:
        attempts.append(len(attempts) + 1)
        if len(attempts) <= failures:
            raise ConnectionError(f"Redis is gone (attempt {len(attempts)})")
        await asyncio.Event().wait()

    return loop, attempts


def test_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    backoff = Backoff(initial_s=0.1, cap_s=5.0)
    for failures, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (6, 3.2), (7, 5.0), (200, 5.0)]:
        delays = [backoff.delay(failures) for _ in range(200)]
        assert all(ceiling / 2 <= delay <= ceiling for delay in delays), (failures, min(delays), max(delays))
        assert len(set(delays)) > 1  # jittered: restarts of many processes do not march in step


async def test_a_failing_loop_is_restarted_logged_once_and_recovers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="berth.host.supervised")
    loop, attempts = failing_then_running(3)
    task = SupervisedTask("reload bus", loop, backoff=FAST, settle_s=0.05, down_after_s=60)
    task.start()
    await until(lambda: task.health().state == "running" and task.health().failures == 0 and len(attempts) == 4)
    health = task.health()
    assert (health.down, health.restarts, health.failing_for_s) == (False, 3, None)
    assert health.last_error == "ConnectionError: Redis is gone (attempt 3)"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2, warnings
    assert warnings[0] == (
        "background task 'reload bus' failed: ConnectionError: Redis is gone (attempt 1); restarting it with backoff"
    )
    assert warnings[1].startswith("background task 'reload bus' recovered after 3 failure(s) in ")
    await task.stop()
    assert task.health().state == "stopped"


async def test_a_loop_failing_longer_than_its_grace_is_down_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    loop, _ = failing_then_running(10**9)
    tasks = BackgroundTasks(backoff=FAST, settle_s=0.05, down_after_s=0.05)
    tasks.spawn("worker report", loop)
    tasks.spawn("bundle watcher", failing_then_running(0)[0])
    await until(lambda: bool(tasks.down()))
    [down] = tasks.down()
    assert (down.name, down.state, down.down) == ("worker report", "retrying", True)
    assert down.failures >= 2 and down.failing_for_s is not None and down.failing_for_s >= 0.05
    assert down.last_error is not None and down.last_error.startswith("ConnectionError: Redis is gone")
    assert down.to_json()["ok"] is False
    assert [h.name for h in tasks.health() if not h.down] == ["bundle watcher"]
    await until(lambda: any("is down" in r.getMessage() for r in caplog.records))
    failed_lines = [r for r in caplog.records if "failed:" in r.getMessage()]
    assert len(failed_lines) == 1  # one streak, one line (later failures go to debug)
    stopping = tasks.health()
    await tasks.stop(timeout_s=1)
    assert tasks.health() == []  # stopped and forgotten: a runtime that starts again spawns them anew
    assert {h.name for h in stopping} == {"worker report", "bundle watcher"}


async def test_a_loop_that_returns_by_itself_is_restarted_and_one_told_to_stop_is_not() -> None:
    runs: list[int] = []
    stop = asyncio.Event()

    async def loop() -> None:
        runs.append(1)
        if len(runs) < 3:
            return  # ended while nobody stopped it: a bug or a closed connection; run it again
        await stop.wait()

    task = SupervisedTask("descriptor watcher", loop, backoff=FAST, down_after_s=60)
    task.start()
    await until(lambda: len(runs) == 3)
    assert task.health().last_error == "the loop returned while nobody had stopped it"
    task.request_stop()
    stop.set()  # the owner tells the loop to end, after telling the supervisor it is final
    assert task.task is not None
    await asyncio.wait_for(task.task, 5)
    assert (len(runs), task.health().state, task.health().down) == (3, "stopped", False)


async def test_a_task_with_max_failures_gives_up_and_is_down() -> None:
    loop, attempts = failing_then_running(10**9)
    task = SupervisedTask("once", loop, backoff=FAST, max_failures=3, down_after_s=60)
    task.start()
    assert task.task is not None
    await asyncio.wait_for(task.task, 5)
    health = task.health()
    assert (len(attempts), health.state, health.down, health.failures) == (3, "given_up", True, 3)


async def test_names_are_unique_per_process() -> None:
    tasks = BackgroundTasks()
    tasks.spawn("reload bus", failing_then_running(0)[0])
    with pytest.raises(ValueError, match="reload bus"):
        tasks.spawn("reload bus", failing_then_running(0)[0])
    await tasks.stop(timeout_s=0)
