"""Which processes a reload broadcast reached: requests with an id, and each process's acknowledgement.

``berth bundles reload ID`` in distributed mode publishes a :class:`ReloadRequest` with a fresh ``request_id`` on
the reload channel. Every host process that receives it reloads the bundle and pushes a :class:`ReloadAck` onto
``berth:bundles:reload:acks:<request_id>`` (a list that expires after :data:`ACK_TTL_S`). The sender knows whom to
wait for from two sources: the live processes' reports (``berth:workers:*``, named) and the number of subscribers
the ``PUBLISH`` reached; :func:`broadcast_reload` waits until each of them answered, or its time is up.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass
from typing import Any

import redis.asyncio as aioredis

__all__ = [
    "ACK_KEY_PREFIX",
    "ACK_TTL_S",
    "RELOAD_CHANNEL",
    "ReloadAck",
    "ReloadRequest",
    "ReloadResult",
    "acknowledge",
    "broadcast_reload",
]

RELOAD_CHANNEL = "berth:bundles:reload"
ACK_KEY_PREFIX = "berth:bundles:reload:acks:"
ACK_TTL_S = 300


@dataclass(frozen=True)
class ReloadRequest:
    """One reload request on the channel; ``request_id`` None: nobody waits for acknowledgements."""

    bundle_id: str
    origin: str
    request_id: str | None = None

    def to_json(self) -> str:
        """The message published."""
        return json.dumps({key: value for key, value in asdict(self).items() if value is not None})

    @classmethod
    def parse(cls, data: str | bytes) -> ReloadRequest:
        """Read a published message.

        :raises ValueError: when it is not a reload request.
        """
        try:
            raw: Any = json.loads(data)
            request_id = raw.get("request_id")
            return cls(
                bundle_id=str(raw["bundle_id"]),
                origin=str(raw.get("origin", "?")),
                request_id=str(request_id) if request_id is not None else None,
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a reload request: {exc}") from exc


@dataclass(frozen=True)
class ReloadAck:
    """What one process did with a reload request.

    :ivar ok: the new generation serves (False: the load failed and the previous generation, if any, still serves).
    :ivar generation: the generation serving after the reload.
    :ivar state: the bundle's state in that process after the reload.
    :ivar error: why the reload failed.
    """

    worker_id: str
    bundle_id: str
    ok: bool
    generation: int | None
    state: str
    error: str | None = None

    def to_json(self) -> str:
        """Serialize for Redis."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> ReloadAck:
        """Parse what :meth:`to_json` wrote."""
        return cls(**json.loads(text))

    def line(self) -> str:
        """One line for the CLI: ``w1: generation 2 loaded`` or why the reload failed."""
        if self.ok:
            return f"{self.worker_id}: generation {self.generation} {self.state}"
        serving = f"generation {self.generation} still serving" if self.generation is not None else "nothing serving"
        return f"{self.worker_id}: reload FAILED ({serving}): {self.error}"


async def acknowledge(client: aioredis.Redis, request_id: str, ack: ReloadAck) -> None:
    """Tell the sender of request ``request_id`` what this process did."""
    key = ACK_KEY_PREFIX + request_id
    async with client.pipeline(transaction=False) as pipe:
        pipe.rpush(key, ack.to_json())
        pipe.expire(key, ACK_TTL_S)
        await pipe.execute()


@dataclass(frozen=True)
class ReloadResult:
    """What a broadcast reload reached.

    :ivar acks: the acknowledgements, by worker id.
    :ivar receivers: how many subscribers the ``PUBLISH`` reached.
    :ivar silent: live processes (by their report) that did not acknowledge in time.
    :ivar unnamed: subscribers that received the request but did not acknowledge, beyond those named in ``silent``.
    """

    acks: list[ReloadAck]
    receivers: int
    silent: list[str]
    unnamed: int

    @property
    def reached_none(self) -> bool:
        """No process received the request (or none answered)."""
        return not self.acks

    @property
    def ok(self) -> bool:
        """Every process answered and every reload succeeded."""
        return bool(self.acks) and not self.silent and not self.unnamed and all(ack.ok for ack in self.acks)


async def broadcast_reload(
    client: aioredis.Redis,
    bundle_id: str,
    *,
    origin: str,
    expected: Collection[str],
    timeout_s: float,
) -> ReloadResult:
    """Publish a reload of ``bundle_id`` and wait up to ``timeout_s`` for the acknowledgements of the ``expected``
    processes (the live reports) and of every subscriber the publish reached."""
    request_id = secrets.token_hex(8)
    key = ACK_KEY_PREFIX + request_id
    receivers = int(await client.publish(RELOAD_CHANNEL, ReloadRequest(bundle_id, origin, request_id).to_json()))
    acks: dict[str, ReloadAck] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while receivers > 0 and not (set(expected) <= set(acks) and len(acks) >= receivers):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            item: Any = await client.blpop([key], timeout=min(remaining, 1.0))
            if item is not None:
                ack = ReloadAck.from_json(item[1])
                acks[ack.worker_id] = ack
    finally:
        await client.delete(key)
    silent = sorted(set(expected) - set(acks))
    unnamed = max(receivers - len(acks) - len(silent), 0)
    return ReloadResult(sorted(acks.values(), key=lambda ack: ack.worker_id), receivers, silent, unnamed)
