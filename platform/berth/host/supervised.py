"""Supervised background tasks: loops that must run as long as their process does, and say when they cannot.

A host process's long-lived loops (the reload bus's subscriber, the worker report's heartbeat, the file watchers)
each run under a :class:`SupervisedTask`. When a loop raises (Redis restarted, a connection dropped, a bug) or
returns while nobody stopped it, the failure is logged once with its reason, and the loop starts again after a
backoff (exponential with jitter, :data:`BACKOFF_INITIAL_S` doubling up to :data:`BACKOFF_CAP_S`), for ever unless
``max_failures`` says otherwise. An attempt that runs :data:`SETTLE_S` without failing ends the failure streak (a
recovery is logged once too).

Each task keeps its health (:class:`TaskHealth`): a task is **down** when it has gone on failing for longer than
:data:`DOWN_AFTER_S` (a Redis restart of a second or two is no outage), or when it gave up. ``/readyz`` of an API
process and of a worker's health port reports every task of the process's :class:`BackgroundTasks` and answers
503 naming the tasks that are down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

__all__ = [
    "BACKOFF_CAP_S",
    "BACKOFF_INITIAL_S",
    "DOWN_AFTER_S",
    "SETTLE_S",
    "BackgroundTasks",
    "Backoff",
    "SupervisedTask",
    "TaskHealth",
    "TaskState",
]

log = logging.getLogger(__name__)

BACKOFF_INITIAL_S = 0.1
"""The wait before the first restart of a failed loop."""
BACKOFF_CAP_S = 5.0
"""The longest wait between two restarts."""
SETTLE_S = 1.0
"""An attempt that runs this long without failing ends the failure streak."""
DOWN_AFTER_S = 5.0
"""A task failing for longer than this (without an attempt that settled) is down."""

TaskState: TypeAlias = Literal["starting", "running", "retrying", "given_up", "stopped"]
TaskFactory: TypeAlias = Callable[[], Coroutine[Any, Any, object]]


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter: the n-th consecutive failure waits a random time between half and all of
    ``min(cap_s, initial_s * 2 ** (n - 1))``."""

    initial_s: float = BACKOFF_INITIAL_S
    cap_s: float = BACKOFF_CAP_S

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` consecutive failures (``failures >= 1``)."""
        ceiling = min(self.cap_s, self.initial_s * 2 ** min(max(failures - 1, 0), 32))
        return random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not a secret


@dataclass(frozen=True)
class TaskHealth:
    """How a supervised task fares.

    :ivar state: ``running`` (its last attempt settled or is young), ``retrying`` (in a failure streak, waiting
        or trying again), ``given_up``, ``stopped`` (stopped by its owner), ``starting``.
    :ivar down: failing for longer than the task's ``down_after_s``, or given up.
    :ivar failures: consecutive failures of the current streak (0: none).
    :ivar last_error: why it last failed (``Type: message``), kept after a recovery.
    :ivar failing_for_s: since when the current streak began, in seconds (None: no streak).
    :ivar restarts: how many times the loop was started again in the process's life.
    """

    name: str
    state: TaskState
    down: bool
    failures: int
    last_error: str | None
    failing_for_s: float | None
    restarts: int

    def to_json(self) -> dict[str, Any]:
        """What ``/readyz`` shows of the task."""
        return {
            "ok": not self.down,
            "state": self.state,
            "failures": self.failures,
            "failing_for_s": round(self.failing_for_s, 1) if self.failing_for_s is not None else None,
            "last_error": self.last_error,
            "restarts": self.restarts,
        }


class SupervisedTask:
    """Runs ``factory()`` (a fresh coroutine each attempt) until :meth:`stop`, restarting it when it fails.

    :param name: how logs and ``/readyz`` name it (``reload bus``).
    :param max_failures: consecutive failures after which it gives up (None: never).
    :param clock: monotonic seconds (tests may give their own).
    """

    def __init__(
        self,
        name: str,
        factory: TaskFactory,
        *,
        backoff: Backoff | None = None,
        down_after_s: float = DOWN_AFTER_S,
        settle_s: float = SETTLE_S,
        max_failures: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._factory = factory
        self._backoff = backoff or Backoff()
        self._down_after_s = down_after_s
        self._settle_s = settle_s
        self._max_failures = max_failures
        self._clock = clock
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._state: TaskState = "starting"
        self._failures = 0
        self._streak_since: float | None = None
        self._last_error: str | None = None
        self._restarts = 0
        self._attempt = 0
        self._logged_down = False
        self._settle_timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Start supervising (in the running event loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._supervise(), name=f"supervised {self.name}")

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The supervising task (None before :meth:`start`)."""
        return self._task

    def request_stop(self) -> None:
        """Let the loop end without a restart: its next return (or failure) is final, and a backoff ends now."""
        self._stopping.set()

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Request a stop, wait up to ``timeout_s`` for the loop to return (its owner told it to), then cancel it."""
        self.request_stop()
        task = self._task
        if task is None or task.done():
            self._state = "stopped"
            return
        await asyncio.wait([task], timeout=timeout_s)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._state = "stopped"

    def health(self) -> TaskHealth:
        """The task's health now."""
        now = self._clock()
        failing_for = now - self._streak_since if self._streak_since is not None else None
        down = self._state == "given_up" or (failing_for is not None and failing_for >= self._down_after_s)
        return TaskHealth(
            name=self.name,
            state=self._state,
            down=down,
            failures=self._failures,
            last_error=self._last_error,
            failing_for_s=failing_for,
            restarts=self._restarts,
        )

    async def _supervise(self) -> None:
        while not self._stopping.is_set():
            self._attempt += 1
            self._begin_attempt()
            try:
                await self._factory()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._stopping.is_set():  # failing while it shuts down (Redis gone, say): nothing to restart
                    log.info("background task %r ended with %s: %s while stopping", self.name, type(exc).__name__, exc)
                    break
                self._record_failure(f"{type(exc).__name__}: {exc}", exc)
            else:
                if self._stopping.is_set():
                    break
                self._record_failure("the loop returned while nobody had stopped it", None)
            if self._state == "given_up":
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._backoff.delay(self._failures))
            if not self._stopping.is_set():
                self._restarts += 1
        self._cancel_settle_timer()
        self._state = "stopped"

    def _begin_attempt(self) -> None:
        """Mark the attempt running; if it lives :attr:`_settle_s`, the failure streak (if any) ends."""
        self._cancel_settle_timer()
        if self._streak_since is None:
            self._state = "running"
            return
        attempt = self._attempt
        self._settle_timer = asyncio.get_running_loop().call_later(self._settle_s, self._settled, attempt)

    def _settled(self, attempt: int) -> None:
        if attempt != self._attempt or self._streak_since is None or self._stopping.is_set():
            return
        log.warning(
            "background task %r recovered after %d failure(s) in %.1f s (last: %s)",
            self.name,
            self._failures,
            self._clock() - self._streak_since,
            self._last_error,
        )
        self._failures = 0
        self._streak_since = None
        self._logged_down = False
        self._state = "running"

    def _record_failure(self, reason: str, error: BaseException | None) -> None:
        self._cancel_settle_timer()
        now = self._clock()
        self._last_error = reason
        self._failures += 1
        if self._streak_since is None:
            self._streak_since = now
            # once per streak, with the traceback: the reason is what an operator needs, the rest is for a bug
            log.warning("background task %r failed: %s; restarting it with backoff", self.name, reason, exc_info=error)
        else:
            log.debug("background task %r failed again (%d in a row): %s", self.name, self._failures, reason)
        if self._max_failures is not None and self._failures >= self._max_failures:
            self._state = "given_up"
            log.error("background task %r gave up after %d failures: %s", self.name, self._failures, reason)
            return
        self._state = "retrying"
        if not self._logged_down and now - self._streak_since >= self._down_after_s:
            self._logged_down = True
            log.error(
                "background task %r is down: failing for %.0f s (%d failures; last: %s)",
                self.name,
                now - self._streak_since,
                self._failures,
                reason,
            )

    def _cancel_settle_timer(self) -> None:
        if self._settle_timer is not None:
            self._settle_timer.cancel()
            self._settle_timer = None


class BackgroundTasks:
    """The supervised tasks of one process (what ``/readyz`` reports as ``checks.background``).

    The options given here are every task's defaults; :meth:`spawn` may override them per task.
    """

    def __init__(self, **defaults: Any) -> None:
        self._defaults = defaults
        self._tasks: dict[str, SupervisedTask] = {}

    def spawn(self, name: str, factory: TaskFactory, **options: Any) -> SupervisedTask:
        """Start supervising ``factory`` under ``name`` (unique in the process).

        :raises ValueError: when a task of that name runs already.
        """
        if name in self._tasks:
            raise ValueError(f"a background task named {name!r} runs already")
        task = SupervisedTask(name, factory, **{**self._defaults, **options})
        self._tasks[name] = task
        task.start()
        return task

    def request_stop(self) -> None:
        """Let every task end without a restart (call before telling the loops themselves to stop)."""
        for task in self._tasks.values():
            task.request_stop()

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Stop every task: wait up to ``timeout_s`` in all for them to return, then cancel those still running.
        The names are free again afterwards (a runtime that starts again spawns its loops anew)."""
        self.request_stop()
        running = [task.task for task in self._tasks.values() if task.task is not None and not task.task.done()]
        if running:
            await asyncio.wait(running, timeout=timeout_s)
        await asyncio.gather(*(task.stop(timeout_s=0) for task in self._tasks.values()))
        self._tasks.clear()

    def health(self) -> list[TaskHealth]:
        """Every task's health, by name."""
        return [self._tasks[name].health() for name in sorted(self._tasks)]

    def down(self) -> list[TaskHealth]:
        """The tasks that are down."""
        return [health for health in self.health() if health.down]
