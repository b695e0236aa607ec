"""What a test reads to prove a deleted conversation left nothing: every route, the files under a folder, the
PostgreSQL tables and the Redis keys of a stack."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped, unused-ignore]
import redis.asyncio as aioredis
from api_stack import ApiStack

from berth.config.models.assembly import DistributedStorage


def needles(markers: Iterable[str]) -> list[bytes]:
    """What to look for in raw bytes: each marker whole and its last nine characters (SQLite's FTS5 index keeps a
    word after the prefix it shares with the word before it, so only a word's tail is sure to be stored whole)."""
    found: list[bytes] = []
    for marker in markers:
        found += [marker.encode(), marker[-9:].encode()]
    return found


def files_holding(root: Path, markers: Iterable[str], *, skip: Iterable[Path] = ()) -> dict[str, list[str]]:
    """Every file under ``root`` (but ``skip``) whose bytes hold a marker (or its tail), with the markers found."""
    wanted = needles(markers)
    skipped = {path.resolve() for path in skip}
    holding: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.resolve() in skipped:
            continue
        data = path.read_bytes()
        hits = [needle.decode() for needle in wanted if needle in data]
        if hits:
            holding[str(path.relative_to(root))] = hits
    return holding


async def conversation_routes(stack: ApiStack, conversation: str, turn: str, who: str = "acme") -> dict[str, int]:
    """The status of every route that reads or writes the conversation (``METHOD path`` → status)."""
    base = f"/v1/acme/support/conversations/{conversation}"
    routes: list[tuple[str, str, Any]] = [
        ("GET", base, None),
        ("PATCH", base, {"title": "again"}),
        ("DELETE", base, None),
        ("POST", f"{base}/turns", {"message": "again"}),
        ("GET", f"{base}/turns/{turn}/events", None),
        ("POST", f"{base}/turns/{turn}/events", {"kind": "followup", "message": "again"}),
        ("POST", f"{base}/turns/{turn}/cancel", None),
        ("POST", f"{base}/turns/{turn}/feedback", {"reaction": "ok"}),
        ("GET", f"{base}/files/fi:{turn}.attachments/notes.txt", None),
        ("GET", f"{base}/files/fi:{turn}.outputs/notes.md", None),
    ]
    statuses = {}
    for method, url, body in routes:
        response = await stack.client.request(method, url, json=body, headers=stack.auth(who))
        statuses[f"{method} {url.removeprefix(base) or '/'}"] = response.status_code
    return statuses


def postgres_dsn(stack: ApiStack) -> str:
    storage = stack.services.config.settings_for().storage
    assert isinstance(storage, DistributedStorage)
    return str(storage.postgres.dsn.literal_value())


async def postgres_rows_holding(stack: ApiStack, markers: Iterable[str]) -> dict[str, int]:
    """Every table of the stack's database with rows whose text (the whole row, as PostgreSQL prints it) holds a
    marker, and how many."""
    patterns = [f"%{marker}%" for marker in markers]
    connection = await asyncpg.connect(postgres_dsn(stack))
    try:
        tables = [
            row["tablename"]
            for row in await connection.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ]
        holding = {}
        for table in tables:
            count = await connection.fetchval(
                f'SELECT count(*) FROM "{table}" t WHERE t::text LIKE ANY($1::text[])',
                patterns,
            )
            if count:
                holding[table] = count
        return holding
    finally:
        await connection.close()


async def redis_keys_naming(stack: ApiStack, names: Iterable[str]) -> list[str]:
    """The keys of the stack's Redis whose name holds one of ``names``."""
    assert stack.services.distributed is not None
    client = aioredis.from_url(stack.services.distributed.connections.redis_url)
    try:
        keys = [key.decode() async for key in client.scan_iter(count=1000)]
    finally:
        await client.aclose()
    return sorted(key for key in keys if any(name in key for name in names))
