"""Awaiting a run's end (:mod:`berth.execution.waits`) takes no thread of the event loop's default executor: a full
one delays nothing, on asyncio's own loop and on uvloop (what uvicorn runs)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
import uvloop

from berth.execution.waits import in_own_thread, process_exit

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


@contextmanager
def full_default_executor() -> Iterator[None]:
    """The running loop's default executor: one thread, busy until the block ends."""
    release = threading.Event()
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="full-default")
    asyncio.get_running_loop().set_default_executor(executor)
    executor.submit(release.wait)
    try:
        yield
    finally:
        release.set()
        executor.shutdown()


@pytest.mark.parametrize("new_loop", LOOPS.values(), ids=list(LOOPS))
def test_a_process_end_is_awaited_beside_a_full_default_executor(
    new_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    reader = subprocess.Popen(["/bin/sh", "-c", "read line; exit 3"], stdin=subprocess.PIPE)
    sleeper = subprocess.Popen(["/bin/sleep", "600"])

    async def ends() -> tuple[int, int]:
        with full_default_executor():
            waiting = asyncio.ensure_future(process_exit(reader))
            killed = asyncio.ensure_future(process_exit(sleeper))
            await asyncio.sleep(0)  # both waits are set up; neither process has ended
            assert not waiting.done() and not killed.done()
            assert reader.stdin is not None
            reader.stdin.write(b"go\n")
            reader.stdin.close()
            sleeper.kill()
            return await waiting, await killed

    with asyncio.Runner(loop_factory=new_loop) as runner:
        assert runner.run(ends()) == (3, -signal.SIGKILL)


@pytest.mark.parametrize("new_loop", LOOPS.values(), ids=list(LOOPS))
def test_a_blocking_wait_runs_in_a_thread_of_its_own(new_loop: Callable[[], asyncio.AbstractEventLoop]) -> None:
    def thread_name() -> str:
        return threading.current_thread().name

    def fails() -> None:
        raise LookupError("gone")

    async def waits() -> str:
        with full_default_executor():
            name = await in_own_thread(thread_name, name="berth exec wait: probe")
            with pytest.raises(LookupError, match="gone"):
                await in_own_thread(fails)
            return name

    with asyncio.Runner(loop_factory=new_loop) as runner:
        assert runner.run(waits()) == "berth exec wait: probe"


def test_without_pidfd_a_process_end_is_awaited_in_a_thread_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr("os.pidfd_open")  # a kernel before Linux 5.3

    process = subprocess.Popen(["/bin/sh", "-c", "exit 4"])

    async def ends() -> int:
        with full_default_executor():  # the wait cannot be queued there: it would never start
            return await process_exit(process)

    assert asyncio.run(ends()) == 4
