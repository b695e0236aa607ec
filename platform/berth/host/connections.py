"""The connection settings of distributed storage, with their secrets resolved."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from berth.config import Configuration
from berth.config.errors import ConfigError
from berth.config.models.assembly import DistributedStorage, LocalArtifacts, S3Artifacts
from berth.host.plugins import PlatformPlugins
from berth.storage.artifacts import ArtifactStore

__all__ = ["DistributedConnections", "distributed_backend"]


@dataclass(frozen=True)
class DistributedConnections:
    """Where a distributed deployment's state lives: what a ``distributed`` storage backend is built from.

    Its ``repr`` masks the DSN and the URL (they may carry passwords).
    """

    postgres_dsn: str
    redis_url: str
    artifacts: S3Artifacts | LocalArtifacts
    pool_min: int = 1
    pool_max: int = 10
    retry_budget_s: float = 60.0
    """How long a PostgreSQL operation whose connection drops, or cannot be opened, goes on retrying."""
    artifact_store: ArtifactStore | None = None
    """The store built for ``artifacts`` (by :func:`distributed_backend`); the backend closes it."""

    def __repr__(self) -> str:
        return f"DistributedConnections(postgres=***, redis=***, artifacts={self.artifacts.kind})"

    @classmethod
    def resolve(cls, config: Configuration) -> DistributedConnections:
        """The platform's distributed storage settings with ``secret:NAME`` references resolved.

        :raises ConfigError: ``secret_missing`` when a reference names no secret.
        """
        storage = config.settings_for().storage
        if not isinstance(storage, DistributedStorage):
            raise TypeError(f"platform.storage.kind is {storage.kind!r}, not 'distributed'")
        resolver = config.secret_resolver
        dsn = resolver.resolve_setting(storage.postgres.dsn, "platform.storage.postgres.dsn").reveal()
        url = resolver.resolve_setting(storage.redis.url, "platform.storage.redis.url").reveal()
        return cls(
            postgres_dsn=dsn,
            redis_url=url,
            artifacts=storage.artifacts,
            pool_min=storage.postgres.pool_min,
            pool_max=storage.postgres.pool_max,
            retry_budget_s=storage.postgres.retry_budget_s,
        )


def distributed_backend(config: Configuration, plugins: PlatformPlugins) -> Any:
    """The (unopened) ``distributed`` storage backend of ``config``, built by the plugin that registers the kind.

    :raises ConfigError: ``storage_plugin_missing`` when no installed plugin provides it.
    """
    factory = plugins.storage_backends().get("distributed")
    if factory is None:
        raise ConfigError(
            "storage_plugin_missing",
            "platform.storage.kind 'distributed' needs the berth-postgres plugin; install it "
            "(pip install ./plugins/postgres) or use kind: embedded",
        )
    connections = DistributedConnections.resolve(config)
    settings = connections.artifacts
    if isinstance(settings, LocalArtifacts):  # relative to the descriptors, as the embedded root is
        settings = settings.model_copy(update={"root": str((config.descriptors.base_dir / settings.root).resolve())})
    make_store = plugins.artifact_stores().get(settings.kind)
    if make_store is None:
        raise ConfigError(
            "artifacts_plugin_missing",
            f"platform.storage.artifacts.kind {settings.kind!r} needs a plugin that provides it "
            f"(s3: pip install ./plugins/aws); installed: {', '.join(sorted(plugins.artifact_stores())) or 'none'}",
        )
    return factory(replace(connections, artifact_store=make_store(settings)))
