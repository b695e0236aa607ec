"""The event loop a bundle generation's async code runs on: a thread of its own, never the host's loop.

Bundle code is not trusted to yield. An ``async def`` tool that calls ``time.sleep(8)`` (or a CPU-bound loop,
or a blocking client) would freeze every tenant's requests if it ran on the host's event loop, and no timeout
could fire until it returned. So each generation's coroutines — its async tools and its async lifecycle hooks
(``berth_on_load``, ``berth_before_turn`` …) — run on a :class:`BundleLoop`, and the host awaits them through a
future with its own timeout: the host answers ``/healthz`` and other turns meanwhile, and a tool that ignores
its ``timeout_s`` ends with ``tool_timeout`` at its limit.

One loop per generation (not per call) keeps loop-bound objects a bundle creates in ``berth_on_load`` (an
``httpx.AsyncClient``, an ``asyncio.Lock``) usable from its tools. The price: a tool that blocks its loop delays
the generation's other async calls until it returns; the host logs a WARNING naming it (the stall watchdog).
The thread starts on first use, so a bundle without async code costs nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Coroutine
from typing import Any, Final, TypeVar

logger = logging.getLogger(__name__)

Result = TypeVar("Result")

STALL_GRACE_S: Final = 1.0
"""How long a cancelled coroutine may take to give its loop back before the watchdog names it."""
CLOSE_WAIT_S: Final = 2.0
"""How long closing waits for the loop's thread; a thread stuck in a blocking call is left to finish alone."""


class BundleLoop:
    """An event loop in a daemon thread, running the coroutines of one bundle generation."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def started(self) -> bool:
        """Whether the loop's thread was started (it is, on the first :meth:`run`)."""
        return self._thread is not None

    async def run(self, coroutine: Coroutine[Any, Any, Result], *, what: str = "") -> Result:
        """Run ``coroutine`` on this loop and await its result from the caller's loop.

        Cancelling the caller (a timeout) cancels the coroutine on this loop; if the coroutine does not give the
        loop back within :data:`STALL_GRACE_S` (it blocks), a WARNING names ``what``.
        """
        loop = self._started_loop()
        caller = asyncio.get_running_loop()
        outcome: asyncio.Future[Result] = caller.create_future()
        started: list[asyncio.Task[Result]] = []

        def start() -> None:  # on this loop: two thread hand-offs per call, nothing more
            task = loop.create_task(coroutine)
            started.append(task)
            task.add_done_callback(lambda done: caller.call_soon_threadsafe(_transfer, done, outcome))

        loop.call_soon_threadsafe(start)
        try:
            return await outcome
        except asyncio.CancelledError:
            loop.call_soon_threadsafe(_cancel_started, started, coroutine)
            self._watch_for_stall(what or getattr(coroutine, "__qualname__", "a coroutine"))
            raise

    async def aclose(self) -> None:
        """Cancel what still runs, stop the loop and wait (briefly) for its thread."""
        with self._lock:
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(_cancel_all_and_stop, loop)
        await asyncio.to_thread(thread.join, CLOSE_WAIT_S)
        if thread.is_alive():
            logger.warning(
                "the event loop of %s is still blocked by bundle code; its thread is left to finish", self.name
            )

    def _started_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the event loop of {self.name} is closed (the generation was unloaded)")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=_serve, args=(loop,), name=f"bundle loop {self.name}", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _watch_for_stall(self, what: str) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        probe: concurrent.futures.Future[None] = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop)
        timer = threading.Timer(STALL_GRACE_S, self._report_stall, args=(probe, what))
        timer.daemon = True
        timer.start()

    def _report_stall(self, probe: concurrent.futures.Future[None], what: str) -> None:
        if not probe.done():
            logger.warning(
                "%s blocks the event loop of %s: it was cancelled (timeout) but has not yielded for %g s; the "
                "bundle's other async calls wait for it. Await instead of blocking, or make it a sync tool "
                "(sync tools run in worker threads)",
                what,
                self.name,
                STALL_GRACE_S,
            )


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


def _cancel_all_and_stop(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel()
    loop.call_soon(loop.stop)


def _transfer(done: asyncio.Task[Result], outcome: asyncio.Future[Result]) -> None:
    """Copy a finished task's result (or error) to the caller's future, unless the caller gave up."""
    if outcome.done():
        return
    if done.cancelled():
        outcome.cancel()
    elif (error := done.exception()) is not None:
        outcome.set_exception(error)
    else:
        outcome.set_result(done.result())


def _cancel_started(started: list[asyncio.Task[Any]], coroutine: Coroutine[Any, Any, Any]) -> None:
    """Cancel the call's task; a call cancelled before its task started never runs."""
    if started:
        started[0].cancel()
    else:
        coroutine.close()
