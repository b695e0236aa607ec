"""The Redis client of a distributed process: one per process, retrying through a Redis restart."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["RETRIES", "connect_redis", "let_finish"]

_T = TypeVar("_T")

RETRIES = 60
"""Attempts per command while Redis is unreachable: with the backoff's 0.5 s cap, about 30 s (a restart)."""

READ_TIMEOUT_S = 30.0
"""How long one reply may take: longer than the longest blocking command Berth sends (``XREAD``/``BLPOP`` block at
most 15 s), so a blocked read is never cut short — redis-py 8 defaults to 5 s, which cut every 5 s ``BLPOP`` and
retried it for ever — yet a server that stops answering is noticed."""


def connect_redis(url: str, *, retries: int = RETRIES) -> aioredis.Redis:
    """A client for ``url`` whose commands retry (with backoff) while the server restarts or a connection drops;
    ``retries=0`` for a probe that must answer at once."""
    return aioredis.from_url(
        url,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.02), retries),
        retry_on_error=[RedisConnectionError, RedisTimeoutError, ConnectionResetError],
        health_check_interval=15,
        socket_connect_timeout=5,
        socket_timeout=READ_TIMEOUT_S,
    )


async def let_finish(command: Awaitable[_T]) -> _T:
    """Await a blocking Redis command (``XREAD … BLOCK``) so that cancelling the caller does not cancel it.

    Cancelling redis-py's client in the middle of a blocked read can leave the cancelled task waiting forever
    (seen with several hundred concurrent turns: a turn whose control listener was cancelled never ended). The
    command runs in a task of its own and finishes by itself within its ``BLOCK`` time; the caller is
    cancelled at once.
    """
    return await asyncio.shield(asyncio.ensure_future(command))
