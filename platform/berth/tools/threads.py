"""Where bundles' sync tools run: a bounded set of threads per bundle and tenant, never Python's default executor.

A sync ``@tool`` runs in a thread, and Python cannot stop a thread: when its ``timeout_s`` fires, the call ends but
the thread goes on until the function returns, which may be never. On the default executor (6 threads on 2 cores,
shared with storage) five such calls took the whole host down. So each (bundle, tenant) gets a
:class:`ToolThreadPool` of its own:

* at most ``size`` threads run the bundle's calls for that tenant at once; a call beyond them waits for one (its
  timeout counts the wait);
* a call whose caller gave up (its timeout fired, or its turn was cancelled) while its thread still runs is
  **stuck** until the thread returns;
* when ``degraded_at`` threads are stuck the pool is **degraded**: its waiting and new calls end at once with
  :class:`ToolPoolExhausted` (the notice ``tool_pool_exhausted``), so a turn goes on and the model reads why;
* a stuck thread that returns gives its thread back, and the pool recovers by itself.

Other bundles, other tenants of the same bundle, storage and the default executor are untouched: their threads
are elsewhere. A pool is per tenant, not per bundle, so that one tenant's stuck calls (its data, its inputs) do not
take a bundle away from the others. Pools outlive bundle generations (a reload does not free a stuck thread).

The threads are daemon threads, made when a call finds none idle and ended after :data:`IDLE_S` without work, not a
``ThreadPoolExecutor``: its workers are joined at the interpreter's exit, so one thread stuck for ever would hold up
the process's stop; and an executor keeps its idle threads for ever, which adds up over many tenants. A call costs
what ``asyncio.to_thread`` costs (both 55-85 µs a call on the 2-core test machine; a new thread per call measured
0.6 ms, the new thread holding the GIL while the caller waited for it to start).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from berth.tools.notices import ToolNotice

__all__ = ["DEFAULT_SIZE", "ToolPoolExhausted", "ToolThreadPool", "ToolThreadPools", "ToolThreadsStatus"]

log = logging.getLogger(__name__)

DEFAULT_SIZE: Final = 4
"""Threads of one bundle for one tenant, unless ``platform.tool_threads.size`` says otherwise."""
IDLE_S: Final = 30.0
"""A thread with no call for this long ends (the next call starts one again)."""

POOL_EXHAUSTED: Final = "tool_pool_exhausted"


class ToolPoolExhausted(ToolNotice):
    """A sync tool call refused because its bundle's threads for the tenant are stuck (``tool_pool_exhausted``)."""

    def __init__(self, message: str) -> None:
        super().__init__(POOL_EXHAUSTED, message)


PoolState = Literal["ok", "degraded"]


@dataclass(frozen=True)
class ToolThreadsStatus:
    """One pool as ``GET …/bundles``, ``/readyz`` and ``/metrics`` show it."""

    bundle_id: str
    tenant: str
    size: int
    degraded_at: int
    busy: int
    """Threads held: calls running, stuck ones included."""
    stuck: int
    """Threads whose caller gave up (timeout, cancel) and that have not returned."""
    waiting: int
    """Calls waiting for a thread."""
    stuck_total: int
    """Calls that got stuck since the process started (a counter)."""
    refused_total: int
    """Calls refused with ``tool_pool_exhausted`` since the process started (a counter)."""
    threads: int = 0
    """Threads alive: busy ones and idle ones not ended yet."""

    @property
    def degraded(self) -> bool:
        """Whether new calls are refused."""
        return self.stuck >= self.degraded_at

    @property
    def state(self) -> PoolState:
        """``degraded`` or ``ok``."""
        return "degraded" if self.degraded else "ok"

    def to_json(self) -> dict[str, Any]:
        """The state and the counts (the tenant is left to the caller: ``/readyz`` must not name it)."""
        return {
            "state": self.state,
            "size": self.size,
            "degraded_at": self.degraded_at,
            "busy": self.busy,
            "stuck": self.stuck,
            "waiting": self.waiting,
        }


class _Call:
    """One call: what to run, its outcome, whether it ended, and whether its caller gave up on it first."""

    __slots__ = ("abandoned", "arguments", "context", "done", "ended", "function")

    def __init__(self, function: Callable[..., Any], arguments: Mapping[str, Any]) -> None:
        self.function = function
        self.arguments = dict(arguments)
        self.context = contextvars.copy_context()
        self.done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.ended = False
        self.abandoned = False


class ToolThreadPool:
    """The threads of one bundle's sync tools for one tenant (see the module docstring)."""

    def __init__(
        self,
        bundle_id: str,
        tenant: str,
        *,
        size: int = DEFAULT_SIZE,
        degraded_at: int | None = None,
        idle_s: float = IDLE_S,
    ) -> None:
        self.bundle_id = bundle_id
        self.tenant = tenant
        self._idle_s = idle_s
        self._lock = threading.Lock()
        self._work_ready = threading.Condition(self._lock)
        self._calls: deque[_Call] = deque()
        """Calls given a thread's slot, waiting for a thread to take them."""
        self._threads = 0
        self._idle = 0
        self._size = size
        self._degraded_at = size
        self._busy = 0
        self._stuck = 0
        self._stuck_total = 0
        self._refused_total = 0
        self._waiters: deque[concurrent.futures.Future[None]] = deque()
        self.resize(size, degraded_at)

    def resize(self, size: int, degraded_at: int | None = None) -> None:
        """Adopt new limits (the descriptors changed); calls running keep their threads."""
        limit = size if degraded_at is None else degraded_at
        if size < 1 or not 1 <= limit <= size:
            raise ValueError(f"a tool thread pool needs size >= 1 and 1 <= degraded_at <= size (got {size}, {limit})")
        with self._lock:
            self._size, self._degraded_at = size, limit
            if self._stuck >= self._degraded_at:
                self._refuse_waiters_locked()
            else:
                self._grant_locked()

    def status(self) -> ToolThreadsStatus:
        """The pool's counts now."""
        with self._lock:
            return ToolThreadsStatus(
                bundle_id=self.bundle_id,
                tenant=self.tenant,
                size=self._size,
                degraded_at=self._degraded_at,
                busy=self._busy,
                stuck=self._stuck,
                waiting=len(self._waiters),
                stuck_total=self._stuck_total,
                refused_total=self._refused_total,
                threads=self._threads,
            )

    async def run(self, function: Callable[..., Any], arguments: Mapping[str, Any], *, what: str = "") -> Any:
        """Call ``function(**arguments)`` in one of the pool's threads and await its result.

        The caller's context variables are copied into the thread (as :func:`asyncio.to_thread` does). Raises
        :class:`ToolPoolExhausted` at once when the pool is degraded, or when it becomes so while the call waits
        for a thread. Cancelling the caller (a timeout) while the thread runs leaves the thread stuck until the
        function returns; a call cancelled before its thread started never runs.
        """
        await self._acquire(what)
        call = _Call(function, arguments)
        self._hand_over(call)
        try:
            return await asyncio.wrap_future(call.done)
        except asyncio.CancelledError:
            self._abandon(call, what)
            raise

    def _hand_over(self, call: _Call) -> None:
        """Give ``call`` (which holds a slot) to an idle thread, or to a new one."""
        with self._lock:
            self._calls.append(call)
            if self._idle >= len(self._calls):  # an idle thread for each call queued, this one included
                self._work_ready.notify()
                return
            self._threads += 1
        thread = threading.Thread(target=self._serve, name=f"berth tool {self.bundle_id}/{self.tenant}", daemon=True)
        try:
            thread.start()
        except BaseException:
            with self._lock:
                self._threads -= 1
                if call not in self._calls:
                    return  # a thread that was busy took it meanwhile
                self._calls.remove(call)
                call.ended = True
                self._busy -= 1
                self._grant_locked()
            raise

    def _serve(self) -> None:
        """A thread's life: take the calls handed over, one at a time; end after :data:`IDLE_S` without one."""
        while True:
            with self._lock:
                while not self._calls:
                    self._idle += 1
                    woken = self._work_ready.wait(self._idle_s)
                    self._idle -= 1
                    if not woken and not self._calls:
                        self._threads -= 1
                        return
                call = self._calls.popleft()
            self._run(call)

    def _run(self, call: _Call) -> None:
        """Run one call unless its caller gave up before it started; then give its slot back."""
        try:
            if not call.done.set_running_or_notify_cancel():
                return
            try:
                result = call.context.run(call.function, **call.arguments)
            except BaseException as error:
                call.done.set_exception(error)
            else:
                call.done.set_result(result)
        finally:
            self._ended(call)

    async def _acquire(self, what: str) -> None:
        """Take a thread, waiting for one if all are held; refused at once while the pool is degraded."""
        with self._lock:
            if self._stuck >= self._degraded_at:
                self._refused_total += 1
                raise ToolPoolExhausted(self._refusal(what))
            if self._busy < self._size and not self._waiters:
                self._busy += 1
                return
            waiter: concurrent.futures.Future[None] = concurrent.futures.Future()
            self._waiters.append(waiter)
        try:
            await asyncio.wrap_future(waiter)
        except ToolPoolExhausted as refused:  # the pool became degraded while the call waited
            raise ToolPoolExhausted(self._refusal(what)) from refused
        except asyncio.CancelledError:
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    self._busy -= 1  # a thread was handed over as the caller gave up: hand it on
                    self._grant_locked()
            raise

    def _abandon(self, call: _Call, what: str) -> None:
        """The caller gave up on a call: if its thread still runs, it is stuck until it returns."""
        with self._lock:
            if call.ended:
                return
            call.abandoned = True
            self._stuck += 1
            self._stuck_total += 1
            stuck, size = self._stuck, self._size
            degraded_now = self._stuck == self._degraded_at
            if degraded_now:
                self._refuse_waiters_locked()
        if degraded_now:
            log.warning(
                "bundle %s: %d of the %d tool threads of tenant %s are stuck (the last: %s, whose caller gave up "
                "while its thread still runs); the bundle is degraded for that tenant and its new sync tool calls "
                "end with %s until they return",
                self.bundle_id,
                stuck,
                size,
                self.tenant,
                what or "a call",
                POOL_EXHAUSTED,
            )

    def _ended(self, call: _Call) -> None:
        """A call's thread ended: give the thread back (to a waiting call first)."""
        with self._lock:
            call.ended = True
            recovered = False
            if call.abandoned:
                recovered = self._stuck == self._degraded_at
                self._stuck -= 1
            self._busy -= 1
            self._grant_locked()
            stuck = self._stuck
        if recovered:
            log.warning(
                "bundle %s: a stuck tool thread of tenant %s returned (%d still stuck); its sync tools are served "
                "again",
                self.bundle_id,
                self.tenant,
                stuck,
            )

    def _grant_locked(self) -> None:
        """Hand free threads to waiting calls, oldest first (the lock is held)."""
        while self._waiters and self._busy < self._size and self._stuck < self._degraded_at:
            waiter = self._waiters.popleft()
            if waiter.set_running_or_notify_cancel():  # False: its caller gave up meanwhile
                self._busy += 1
                waiter.set_result(None)

    def _refuse_waiters_locked(self) -> None:
        """End every waiting call with :class:`ToolPoolExhausted` (the lock is held)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if waiter.set_running_or_notify_cancel():
                self._refused_total += 1
                waiter.set_exception(ToolPoolExhausted(self._refusal("")))

    def _refusal(self, what: str) -> str:
        return (
            f"{what or 'the call'} was not started: {self._stuck} of bundle {self.bundle_id}'s {self._size} tool "
            "threads are stuck in calls that timed out and have not returned, so its sync tools are refused until "
            "they do; try another way, or tell the user the tool is unavailable for now"
        )


class ToolThreadPools:
    """Every :class:`ToolThreadPool` of a host, by (bundle, tenant), made on first use with the current limits."""

    def __init__(self, size: int = DEFAULT_SIZE, degraded_at: int | None = None) -> None:
        self._lock = threading.Lock()
        self._size, self._degraded_at = size, degraded_at
        self._pools: dict[tuple[str, str], ToolThreadPool] = {}

    def configure(self, size: int, degraded_at: int | None = None) -> None:
        """New limits for every pool, made and to be made (``platform.tool_threads`` changed)."""
        with self._lock:
            self._size, self._degraded_at = size, degraded_at
            pools = list(self._pools.values())
        for pool in pools:
            pool.resize(size, degraded_at)

    def pool(self, bundle_id: str, tenant: str) -> ToolThreadPool:
        """The pool of ``bundle_id``'s sync tools for ``tenant``."""
        key = (bundle_id, tenant)
        with self._lock:
            found = self._pools.get(key)
            if found is None:
                found = self._pools[key] = ToolThreadPool(
                    bundle_id, tenant, size=self._size, degraded_at=self._degraded_at
                )
            return found

    def status(self, bundle_id: str, tenant: str) -> ToolThreadsStatus:
        """The pool of ``bundle_id`` for ``tenant`` now (an idle one when no call made it yet)."""
        with self._lock:
            found = self._pools.get((bundle_id, tenant))
            if found is None:
                size = self._size
                limit = self._degraded_at if self._degraded_at is not None else size
                return ToolThreadsStatus(bundle_id, tenant, size, limit, 0, 0, 0, 0, 0)
        return found.status()

    def statuses(self, bundle_id: str | None = None, tenant: str | None = None) -> list[ToolThreadsStatus]:
        """The pools made so far (of one bundle, one tenant, or all), sorted by bundle and tenant."""
        with self._lock:
            pools = [
                pool
                for (bundle, owner), pool in sorted(self._pools.items())
                if bundle_id in (None, bundle) and tenant in (None, owner)
            ]
        return [pool.status() for pool in pools]
