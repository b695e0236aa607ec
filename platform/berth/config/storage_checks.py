"""Checks of a distributed assembly (``platform.storage`` of kind ``distributed``) that need no connection: the
form of the PostgreSQL DSN and the Redis URL when they are given literally (a ``secret:NAME`` reference is
checked to exist by the secret checks, and its value when it is resolved), and the S3 bucket name."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final
from urllib.parse import urlsplit

from berth.config.models.assembly import DistributedStorage, S3Artifacts
from berth.config.models.common import SecretSetting

__all__ = ["bucket_problem", "distributed_storage_problems", "dsn_problem", "redis_url_problem"]

_BUCKET: Final = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_LIBPQ_KEYWORD: Final = re.compile(r"^\s*\w+\s*=")


def dsn_problem(dsn: str) -> str | None:
    """Why ``dsn`` is not a PostgreSQL connection string (a ``postgresql://`` URL or libpq ``key=value`` pairs)."""
    if _LIBPQ_KEYWORD.match(dsn):
        return None
    parts = urlsplit(dsn)
    if parts.scheme not in ("postgresql", "postgres"):
        return "is not a PostgreSQL DSN: use postgresql://user@host:5432/database (or libpq key=value pairs)"
    if not parts.hostname and "host=" not in parts.query:
        return "names no host: postgresql://user@host:5432/database"
    if not parts.path.strip("/"):
        return "names no database: postgresql://user@host:5432/database"
    return None


def redis_url_problem(url: str) -> str | None:
    """Why ``url`` is not a Redis URL (``redis://``, ``rediss://`` or ``unix://``)."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix"):
        return "is not a Redis URL: use redis://host:6379/0 (rediss:// for TLS, unix:///path for a socket)"
    if parts.scheme != "unix" and not parts.hostname:
        return "names no host: redis://host:6379/0"
    if parts.scheme != "unix" and parts.path.strip("/") and not parts.path.strip("/").isdigit():
        return "names a database that is not a number: redis://host:6379/0"
    return None


def bucket_problem(bucket: str) -> str | None:
    """Why ``bucket`` is not a valid S3 bucket name."""
    if not _BUCKET.match(bucket) or ".." in bucket or re.fullmatch(r"\d+\.\d+\.\d+\.\d+", bucket):
        return (
            f"{bucket!r} is not an S3 bucket name: 3 to 63 lowercase letters, digits, dots and hyphens, "
            "beginning and ending with a letter or digit"
        )
    return None


def _literal(setting: SecretSetting) -> str | None:
    return None if setting.ref_name is not None else setting.literal_value()


def distributed_storage_problems(storage: DistributedStorage) -> Iterator[tuple[tuple[str, ...], str]]:
    """``(field path under platform.storage, message)`` of each problem of a distributed storage section."""
    dsn = _literal(storage.postgres.dsn)
    if dsn is not None and (problem := dsn_problem(dsn)):
        yield ("postgres", "dsn"), f"the PostgreSQL DSN {problem}"
    if storage.postgres.pool_min > storage.postgres.pool_max:
        yield (
            ("postgres", "pool_min"),
            (f"pool_min ({storage.postgres.pool_min}) is larger than pool_max ({storage.postgres.pool_max})"),
        )
    url = _literal(storage.redis.url)
    if url is not None and (problem := redis_url_problem(url)):
        yield ("redis", "url"), f"the Redis URL {problem}"
    if isinstance(storage.artifacts, S3Artifacts) and (problem := bucket_problem(storage.artifacts.bucket)):
        yield ("artifacts", "bucket"), problem
