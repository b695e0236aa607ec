"""Which of a distributed deployment's services answer: PostgreSQL (and its schema), Redis, the artifact store; and
whether embedded storage answers a round-trip.

``berth run --check-services`` (and ``berth worker --check-services``) print the probes and exit; ``/readyz`` of an
API process in distributed mode reports them too, under the stable keys ``postgres``, ``redis`` and ``artifacts``
(the artifact store's kind, ``s3`` or ``local``, begins its detail). A probe's detail names the server, never a
password.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from berth.config import Configuration
from berth.config.errors import ConfigError
from berth.host.connections import distributed_backend
from berth.host.plugins import PlatformPlugins
from berth.storage.redis_client import connect_redis

__all__ = ["ServiceProbe", "probe_backend", "probe_embedded_storage", "probe_services"]

PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ServiceProbe:
    """One service: whether it answered, and what was found (or why not)."""

    service: str
    ok: bool
    detail: str


async def _probe(service: str, check: Any, timeout_s: float = PROBE_TIMEOUT_S) -> ServiceProbe:
    try:
        detail = await asyncio.wait_for(check, timeout_s)
    except TimeoutError:
        return ServiceProbe(service, False, f"no answer within {timeout_s:g} s")
    except ConfigError as error:
        return ServiceProbe(service, False, str(error))
    except (OSError, RedisError, KeyError, RuntimeError, ValueError) as error:
        return ServiceProbe(service, False, f"{type(error).__name__}: {error}")
    except Exception as error:  # a driver's own error type (asyncpg, botocore): reported, never raised
        return ServiceProbe(service, False, f"{type(error).__name__}: {error}")
    return ServiceProbe(service, True, str(detail))


async def probe_embedded_storage(parts: Sequence[Any], timeout_s: float) -> ServiceProbe:
    """Embedded storage's round-trip: each part's ``ping()`` (a write and a read back in a storage thread: the
    conversation database, the metadata database), all within ``timeout_s``; the key ``storage``."""

    async def ping_all() -> str:
        began = time.perf_counter()
        details = [str(await part.ping()) for part in parts]
        return f"{'; '.join(details)} in {(time.perf_counter() - began) * 1000:.1f} ms"

    return await _probe("storage", ping_all(), timeout_s)


async def probe_backend(backend: Any, redis: Any) -> list[ServiceProbe]:
    """Probe an open backend's PostgreSQL and artifact store, and ``redis`` (what ``/readyz`` reports)."""
    probes = [await _probe("postgres", backend.ping()), await _probe("redis", _ping_redis(redis))]
    store = backend.connections.artifact_store
    if store is not None:
        probes.append(await _probe_artifacts(backend.connections.artifacts.kind, store))
    return probes


async def _probe_artifacts(kind: str, store: Any) -> ServiceProbe:
    """The artifact store's probe, under the key ``artifacts`` with its kind in the detail (``s3: bucket b``)."""
    probe = await _probe("artifacts", store.check())
    return ServiceProbe(probe.service, probe.ok, f"{kind}: {probe.detail}")


async def _ping_redis(client: Any) -> str:
    await client.ping()
    info = await client.info("server")
    return f"redis {info.get('redis_version', '?')}"


async def probe_services(config: Configuration, plugins: PlatformPlugins) -> list[ServiceProbe]:
    """Connect to each service the descriptors name (opening the storage backend checks the schema too)."""
    try:
        backend = distributed_backend(config, plugins)
    except ConfigError as error:
        return [ServiceProbe("storage", False, str(error))]
    opened = await _probe("postgres", _open(backend))
    client = connect_redis(backend.connections.redis_url, retries=0)
    try:
        if not opened.ok:
            probes = [opened, await _probe("redis", _ping_redis(client))]
            store = backend.connections.artifact_store
            if store is not None:
                probes.append(await _probe_artifacts(backend.connections.artifacts.kind, store))
                await store.aclose()
            return probes
        try:
            return await probe_backend(backend, client)
        finally:
            await backend.aclose()
    finally:
        await client.aclose()


async def _open(backend: Any) -> str:
    await backend.open(wait=False)  # a probe answers now: it does not wait out the retry budget
    return str(await backend.ping())
