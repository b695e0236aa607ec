"""A sync bundle tool that returns only once every run has called it, for tests of many exec runs at once.

Runs that call it end only if all of them are alive at the same time, so a backend that held a scarce thread for a
run's life (the event loop's default executor, see :mod:`berth.execution.waits`) deadlocks instead of passing.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from berth.execution.dispatch import ScopedToolDispatch
from berth.tools.spec import build_tool_spec
from berth.tools.threads import ToolThreadPools

MEETING_PROGRAM = """
from berth_exec import tools
print(tools.call("t.meet", run=int(open("run.txt").read())))
"""
"""The program each run executes: it calls ``t.meet`` with its number (from ``run.txt`` in its inputs) and prints
the barrier index it got back."""


class MeetingPoint:
    """``t.meet``, a sync tool served as a host serves a bundle's (in its tool threads): it returns once every run
    has called it, and tells the test's loop of each arrival (``arrived[run]``)."""

    def __init__(self, runs: int, timeout_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._everyone = threading.Barrier(runs, timeout=timeout_s)
        self.arrived = [asyncio.Event() for _ in range(runs)]
        threads = ToolThreadPools(size=runs).pool("probe", "acme")
        self.dispatch = ScopedToolDispatch({"t.meet": build_tool_spec(self.meet).running_on(None, threads.run)})

    def meet(self, run: int) -> int:
        """Wait for every run to arrive.

        Args:
            run: the calling run's number.
        """
        self._loop.call_soon_threadsafe(self.arrived[run].set)
        return self._everyone.wait()


@contextlib.asynccontextmanager
async def scarce_default_executor(threads: int) -> AsyncIterator[None]:
    """The running loop's default executor cut to ``threads`` threads for the block."""
    executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="scarce-default")
    asyncio.get_running_loop().set_default_executor(executor)
    try:
        yield
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
