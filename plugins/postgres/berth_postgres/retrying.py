"""How the PostgreSQL stores retry an operation whose connection is lost: the one policy they share.

A connection drops (``pg_terminate_backend``, a failover, a network cut) or cannot be opened (the server is
down or restarting): the transaction rolled back, so the operation runs again on a fresh connection, after an
exponentially growing pause with *full jitter* (uniform between zero and the cap of that retry, so many waiting
operations do not come back in lockstep), for as long as the time budget lasts (measured on the monotonic
clock; sized for a failover: 60 s by default, ``platform.storage.postgres.retry_budget_s``). An operation waits
through an outage shorter than the budget; after it, it fails with :class:`~berth_postgres.migrations.
PostgresUnavailableError`. Any other error (a constraint violation, a :class:`~berth.storage.conversations.
StorageError`) is raised at once, never retried.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, TypeVar

import asyncpg  # type: ignore[import-untyped, unused-ignore]

from berth_postgres.migrations import PostgresUnavailableError

__all__ = [
    "CONNECTION_LOST",
    "DEFAULT_RETRY_BUDGET_S",
    "RetryPolicy",
    "connection_lost",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

DEFAULT_RETRY_BUDGET_S: Final = 60.0
"""How long an operation keeps retrying by default: long enough for a managed PostgreSQL's failover."""

CONNECTION_LOST: Final[tuple[type[BaseException], ...]] = (
    asyncpg.InterfaceError,  # "the underlying connection is closed", "connection was closed in the middle ..."
    asyncpg.InternalClientError,  # the protocol state a connection the server ended while idle can be left in
    asyncpg.PostgresConnectionError,  # class 08, ConnectionDoesNotExistError among them
    asyncpg.AdminShutdownError,  # pg_terminate_backend, a server shutting down
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,  # the server is starting up, shutting down or in recovery
    asyncpg.TooManyConnectionsError,  # a restarted server flooded by every client reconnecting at once
    OSError,  # ConnectionError, ConnectionRefusedError while the server is down, TimeoutError of a connect
)
"""Errors that mean the connection is gone or cannot be opened, and its transaction (if any) rolled back."""

_NOT_CONNECTION: Final[tuple[type[BaseException], ...]] = (ValueError,)
"""Subclasses of :data:`CONNECTION_LOST` that are not about the connection: asyncpg's client-side ``DataError``
and ``ClientConfigurationError`` (an argument the query cannot take, a bad DSN option)."""


def connection_lost(error: BaseException) -> bool:
    """Whether ``error`` means the connection dropped or could not be opened (worth a retry)."""
    return isinstance(error, CONNECTION_LOST) and not isinstance(error, _NOT_CONNECTION)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter, bounded by a time budget.

    :param budget_s: how long, from an operation's first try, it may go on retrying (seconds, > 0).
    :param first_delay_s: the cap of the pause before the first retry; it doubles at each retry.
    :param max_delay_s: the largest cap of a pause.
    """

    budget_s: float = DEFAULT_RETRY_BUDGET_S
    first_delay_s: float = 0.05
    max_delay_s: float = 2.0
    on_retry: Callable[[], None] | None = field(default=None, compare=False)
    """Called at each retry (the process's ``berth_store_retries_total`` counter)."""

    def __post_init__(self) -> None:
        if not self.budget_s > 0:
            raise ValueError(f"the retry budget must be positive, not {self.budget_s!r}")
        if not 0 < self.first_delay_s <= self.max_delay_s:
            raise ValueError("the retry delays must satisfy 0 < first_delay_s <= max_delay_s")

    def cap(self, retry: int) -> float:
        """The largest pause before retry number ``retry`` (0 for the first): ``first_delay_s * 2**retry``,
        at most ``max_delay_s``."""
        return min(self.max_delay_s, self.first_delay_s * 2.0 ** min(retry, 64))

    def delay(self, retry: int, draw: Callable[[], float] = random.random) -> float:
        """The pause before retry number ``retry``: uniform in ``[0, cap(retry))`` (``draw`` gives ``[0, 1)``)."""
        return draw() * self.cap(retry)

    async def run(
        self,
        attempt: Callable[[int, float], Awaitable[_T]],
        *,
        retryable: Callable[[BaseException], bool] = connection_lost,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        draw: Callable[[], float] = random.random,
    ) -> _T:
        """Return ``await attempt(retry, remaining_s)``, called again after a pause while it raises an error
        ``retryable`` accepts and the budget lasts (``retry`` counts from 0; ``remaining_s`` is what is left of the
        budget, for the attempt to bound its own waits by).

        Logs a WARNING at the first retry and when an operation that was retried succeeds, not at every retry.

        :raises PostgresUnavailableError: when the budget is spent (from the last error).
        """
        started = clock()
        retry = 0
        while True:
            remaining = self.budget_s - (clock() - started)
            try:
                result = await attempt(retry, remaining)
            except Exception as error:
                if not retryable(error):
                    raise
                elapsed = clock() - started
                if elapsed >= self.budget_s:
                    raise PostgresUnavailableError(
                        f"PostgreSQL did not answer for {elapsed:.1f} s ({retry + 1} tries, retry budget"
                        f" {self.budget_s:g} s); last error: {type(error).__name__}: {error}"
                    ) from error
                if retry == 0:
                    log.warning(
                        "the PostgreSQL connection dropped or could not be opened (%s: %s); retrying the operation"
                        " for up to %g s",
                        type(error).__name__,
                        error,
                        self.budget_s,
                    )
                else:
                    log.debug("PostgreSQL retry %d failed (%s: %s)", retry, type(error).__name__, error)
                if self.on_retry is not None:
                    self.on_retry()
                await sleep(min(self.delay(retry, draw), self.budget_s - elapsed))
                retry += 1
            else:
                if retry:
                    log.warning(
                        "the PostgreSQL operation succeeded after %d retries (%.1f s)", retry, clock() - started
                    )
                return result
