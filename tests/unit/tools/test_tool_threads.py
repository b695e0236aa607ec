"""A bundle's sync tools run in threads of their own per bundle and tenant: a call whose caller gave up while its
thread runs is stuck until it returns; stuck threads up to ``degraded_at`` refuse new calls at once
(``tool_pool_exhausted``); the pool recovers when they return; other pools and the default executor are untouched."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Iterator

import pytest

from berth.tools.spec import build_tool_spec
from berth.tools.threads import ToolPoolExhausted, ToolThreadPool, ToolThreadPools

GIVE_UP_S = 0.05
"""A caller's timeout in these tests: the call ends, its thread does not."""
GUARD_S = 10.0

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")


class Held:
    """A sync function that blocks until released; counts its calls."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            self.calls += 1
        self.release.wait()
        return "released"


@pytest.fixture
def held() -> Iterator[Held]:
    """A held function, released after the test whatever happened (so no thread outlives it)."""
    function = Held()
    yield function
    function.release.set()


async def until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` (a thread's end is seen by the pool just after its function returns)."""
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    pytest.fail("the condition never held")


async def stuck_call(pool: ToolThreadPool, function: Held) -> None:
    """A call whose caller gives up while its thread still runs."""
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(pool.run(function, {}), GIVE_UP_S)


async def test_a_call_runs_in_a_daemon_thread_of_its_pool_with_the_callers_context() -> None:
    pool = ToolThreadPool("hang", "acme", size=2)

    def where(suffix: str) -> tuple[str, bool, str]:
        thread = threading.current_thread()
        return thread.name, thread.daemon, request_id.get() + suffix

    request_id.set("r-7")
    assert await pool.run(where, {"suffix": "!"}) == ("berth tool hang/acme", True, "r-7!")
    await until(lambda: pool.status().busy == 0)


async def test_a_call_whose_caller_gave_up_is_stuck_until_its_thread_returns(held: Held) -> None:
    pool = ToolThreadPool("hang", "acme", size=2)
    await stuck_call(pool, held)
    status = pool.status()
    assert (status.busy, status.stuck, status.stuck_total, status.state) == (1, 1, 1, "ok")

    held.release.set()
    await until(lambda: pool.status().busy == 0)
    status = pool.status()
    assert (status.stuck, status.stuck_total, status.state) == (0, 1, "ok")


async def test_when_every_thread_is_stuck_new_calls_end_at_once_and_the_pool_recovers_when_they_return(
    held: Held,
) -> None:
    pool = ToolThreadPool("hang", "acme", size=2)
    await stuck_call(pool, held)
    await stuck_call(pool, held)
    assert pool.status().degraded

    other = Held()
    other.release.set()
    with pytest.raises(ToolPoolExhausted) as refused:
        await pool.run(other, {}, what="tool 'quick'")
    assert refused.value.code == "tool_pool_exhausted"
    assert "tool 'quick' was not started: 2 of bundle hang's 2 tool threads are stuck" in refused.value.message
    assert other.calls == 0, "a refused call must not take a thread"
    assert (pool.status().refused_total, held.calls) == (1, 2)

    held.release.set()
    await until(lambda: pool.status().busy == 0)
    assert pool.status().state == "ok"
    assert await pool.run(other, {}) == "released"


async def test_degraded_at_below_size_refuses_calls_while_threads_are_left(held: Held) -> None:
    pool = ToolThreadPool("hang", "acme", size=3, degraded_at=1)
    await stuck_call(pool, held)
    status = pool.status()
    assert (status.busy, status.size, status.degraded) == (1, 3, True)
    with pytest.raises(ToolPoolExhausted):
        await pool.run(held, {})


async def test_calls_waiting_for_a_thread_are_refused_when_the_pool_degrades(held: Held) -> None:
    pool = ToolThreadPool("hang", "acme", size=2)
    await stuck_call(pool, held)
    running = asyncio.create_task(pool.run(held, {}))  # takes the second thread
    await until(lambda: held.calls == 2)
    waiting = asyncio.create_task(pool.run(held, {}))
    await until(lambda: pool.status().waiting == 1)

    running.cancel()  # its turn was cancelled: the second thread is stuck too
    with pytest.raises(asyncio.CancelledError):
        await running
    with pytest.raises(ToolPoolExhausted):
        await asyncio.wait_for(waiting, GUARD_S)
    status = pool.status()
    assert (status.stuck, status.waiting, status.refused_total, held.calls) == (2, 0, 1, 2)


async def test_a_waiting_call_that_gives_up_takes_no_thread_and_never_runs(held: Held) -> None:
    pool = ToolThreadPool("hang", "acme", size=1)
    first = asyncio.create_task(pool.run(held, {}))
    await until(lambda: held.calls == 1)

    later = Held()
    later.release.set()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(pool.run(later, {}), GIVE_UP_S)  # gave up waiting for the thread
    status = pool.status()
    assert (status.busy, status.stuck, status.waiting) == (1, 0, 0)

    held.release.set()
    assert await first == "released"
    assert await asyncio.wait_for(pool.run(later, {}), GUARD_S) == "released"
    assert later.calls == 1, "the call that gave up must never have run"


async def test_a_bigger_size_hands_threads_to_the_calls_waiting(held: Held) -> None:
    pools = ToolThreadPools(size=1)
    pool = pools.pool("hang", "acme")
    first = asyncio.create_task(pool.run(held, {}))
    await until(lambda: held.calls == 1)
    second = asyncio.create_task(pool.run(held, {}))
    await until(lambda: pool.status().waiting == 1)

    pools.configure(2)
    await until(lambda: held.calls == 2)
    held.release.set()
    assert await asyncio.gather(first, second) == ["released", "released"]


async def test_other_bundles_and_tenants_keep_their_threads_while_one_pool_is_degraded(held: Held) -> None:
    pools = ToolThreadPools(size=2)
    degraded = pools.pool("hang", "acme")
    await stuck_call(degraded, held)
    await stuck_call(degraded, held)

    def answer() -> str:
        return "answered"

    assert await pools.pool("hang", "globex").run(answer, {}) == "answered"
    assert await pools.pool("hello", "acme").run(answer, {}) == "answered"
    states = {(s.bundle_id, s.tenant): s.state for s in pools.statuses()}
    assert states == {("hang", "acme"): "degraded", ("hang", "globex"): "ok", ("hello", "acme"): "ok"}
    assert pools.status("docs", "acme").busy == 0  # a pool nobody used yet: idle, and not made
    assert len(pools.statuses()) == 3


async def test_sync_tools_run_while_the_default_executor_is_taken(held: Held) -> None:
    """What ``exec.python`` runs do: hold default-executor threads for their whole life."""
    loop = asyncio.get_running_loop()
    taken = [loop.run_in_executor(None, held) for _ in range(40)]  # more than any default executor has
    try:

        def greet(name: str) -> str:
            """Greet someone."""
            return f"Hello, {name}"

        pool = ToolThreadPools().pool("hello", "acme")
        spec = build_tool_spec(greet, timeout_s=GUARD_S).running_on(None, pool.run)
        assert await spec.invoke({"name": "Ada"}) == "Hello, Ada"
    finally:
        held.release.set()
        await asyncio.gather(*taken)


async def test_a_thread_serves_call_after_call_and_ends_when_idle() -> None:
    pool = ToolThreadPool("hang", "acme", size=2, idle_s=0.2)

    def ident() -> int:
        return threading.get_ident()

    first = await pool.run(ident, {})
    await until(lambda: pool.status().busy == 0)
    assert await pool.run(ident, {}) == first, "an idle thread takes the next call"
    assert pool.status().threads == 1
    await until(lambda: pool.status().threads == 0)  # no call for idle_s: the thread ends
    assert await pool.run(ident, {}) != 0
