"""Versioned schema migrations: plain SQL files shipped in ``berth_postgres/migrations/``, applied by ``berth migrate``.

A migration is one ``NNNN_name.sql`` file; its version is the file name without ``.sql``. Migrations are applied
in name order, each once and each in its own transaction together with its row in ``berth_schema_migrations``, so a
migration that fails leaves nothing behind and is not recorded. Concurrent runners (two ``berth migrate`` started at
once, or several API processes) are serialized by a session-level advisory lock, so each migration runs once.

The API does not migrate by itself: it calls :func:`require_current` at start-up and refuses a schema that is behind,
naming the command that fixes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Final, Literal, TypeAlias
from urllib.parse import urlsplit

import asyncpg  # type: ignore[import-untyped, unused-ignore]

from berth.config.errors import ConfigError

__all__ = [
    "MIGRATIONS_TABLE",
    "Migration",
    "MigrationProgress",
    "MigrationStatus",
    "PostgresUnavailableError",
    "apply_migrations",
    "available_migrations",
    "connect",
    "describe_server",
    "migrate",
    "pending",
    "pending_on",
    "require_current",
]

MIGRATIONS_TABLE: Final = "berth_schema_migrations"
_CREATE_TABLE: Final = (
    f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} "
    "(version TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
)
_LOCK_KEY: Final = 0x6265727468_01  # "berth" + 1: the advisory lock every migration runner takes
_CONNECT_TIMEOUT: Final = 10.0

MigrationStatus: TypeAlias = Literal["applying", "applied", "failed"]
MigrationProgress: TypeAlias = Callable[[str, MigrationStatus], None]
"""Called with a migration's version and what is happening to it (``berth migrate`` prints each call)."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration: its version (the file name without ``.sql``) and its SQL."""

    version: str
    sql: str


class PostgresUnavailableError(ConnectionError):
    """The PostgreSQL server could not be reached or refused the connection; the message names the server (host,
    port, database, user), never the password."""


def available_migrations() -> tuple[Migration, ...]:
    """Every migration shipped in the package, in version (file name) order."""
    folder = resources.files("berth_postgres") / "migrations"
    files = sorted(
        (entry for entry in folder.iterdir() if entry.name.endswith(".sql") and entry.is_file()),
        key=lambda entry: entry.name,
    )
    return tuple(Migration(entry.name.removesuffix(".sql"), entry.read_text(encoding="utf-8")) for entry in files)


def describe_server(dsn: str) -> str:
    """Where ``dsn`` points, safe to print: ``user@host:port/database`` (never the password)."""
    try:
        parts = urlsplit(dsn)
        host, port, user = parts.hostname, parts.port, parts.username
    except ValueError:
        return "the PostgreSQL server of the DSN"
    if not parts.scheme.startswith("postgres") or host is None:
        return "the PostgreSQL server of the DSN"
    database = parts.path.lstrip("/") or user or "postgres"
    who = f"{user}@" if user else ""
    return f"{who}{host}:{port or 5432}/{database}"


def _scrub(text: str, dsn: str) -> str:
    try:
        password = urlsplit(dsn).password
    except ValueError:
        password = None
    return text.replace(password, "***") if password else text


async def connect(dsn: str) -> asyncpg.Connection:
    """Open one connection to ``dsn``; an unreachable or refusing server raises :class:`PostgresUnavailableError`."""
    try:
        return await asyncpg.connect(dsn, timeout=_CONNECT_TIMEOUT)
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        reason = _scrub(str(exc) or type(exc).__name__, dsn)
        raise PostgresUnavailableError(f"cannot connect to PostgreSQL at {describe_server(dsn)}: {reason}") from None


async def _applied_versions(connection: asyncpg.Connection) -> set[str]:
    exists = await connection.fetchval("SELECT to_regclass($1) IS NOT NULL", MIGRATIONS_TABLE)
    if not exists:
        return set()
    rows = await connection.fetch(f"SELECT version FROM {MIGRATIONS_TABLE}")  # noqa: S608 - a constant name
    return {row["version"] for row in rows}


async def pending_on(
    connection: asyncpg.Connection, migrations: Sequence[Migration] | None = None
) -> tuple[Migration, ...]:
    """The migrations not yet applied to the database of ``connection``, in order."""
    applied = await _applied_versions(connection)
    return tuple(m for m in (available_migrations() if migrations is None else migrations) if m.version not in applied)


async def pending(dsn: str) -> tuple[str, ...]:
    """The versions not yet applied to the database at ``dsn``, in order."""
    connection = await connect(dsn)
    try:
        return tuple(migration.version for migration in await pending_on(connection))
    finally:
        await connection.close()


async def require_current(connection: asyncpg.Connection, migrations: Sequence[Migration] | None = None) -> None:
    """Raise ``ConfigError('schema_behind')`` when a migration is not applied (what the API checks at start-up)."""
    behind = await pending_on(connection, migrations)
    if behind:
        versions = ", ".join(migration.version for migration in behind)
        noun = "migration" if len(behind) == 1 else "migrations"
        raise ConfigError(
            "schema_behind",
            f"the PostgreSQL schema is behind: {len(behind)} {noun} pending ({versions}); run `berth migrate`",
        )


async def apply_migrations(
    connection: asyncpg.Connection,
    migrations: Sequence[Migration] | None = None,
    progress: MigrationProgress | None = None,
) -> tuple[str, ...]:
    """Apply every pending migration on ``connection``, each in its own transaction; return the versions applied.

    Holds the migration advisory lock throughout, so a concurrent runner waits and then finds nothing to do. A
    failing migration is rolled back (it is not recorded), reported as ``failed`` and its error re-raised; the ones
    before it stay applied.
    """
    report = progress or (lambda version, status: None)
    chosen = available_migrations() if migrations is None else tuple(migrations)
    applied: list[str] = []
    await connection.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
    try:
        await connection.execute(_CREATE_TABLE)
        for migration in await pending_on(connection, chosen):
            report(migration.version, "applying")
            try:
                async with connection.transaction():
                    await connection.execute(migration.sql)
                    await connection.execute(
                        f"INSERT INTO {MIGRATIONS_TABLE} (version) VALUES ($1)",  # noqa: S608 - a constant name
                        migration.version,
                    )
            except BaseException:
                report(migration.version, "failed")
                raise
            report(migration.version, "applied")
            applied.append(migration.version)
    finally:
        if not connection.is_closed():
            await connection.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    return tuple(applied)


async def migrate(dsn: str, progress: MigrationProgress | None = None) -> tuple[str, ...]:
    """Connect to ``dsn`` and apply every pending migration (what ``berth migrate`` runs for ``distributed``).

    :return: the versions applied, in order (empty: the schema was already current).
    """
    connection = await connect(dsn)
    try:
        return await apply_migrations(connection, progress=progress)
    finally:
        await connection.close()
