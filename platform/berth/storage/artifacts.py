"""The artifact store seam: where a distributed deployment keeps the bytes of a conversation's files.

The conversation store commits which file is at which path (with its SHA-256 and size) in its transaction;
the bytes go to an :class:`ArtifactStore` first, under a content-addressed key (:func:`artifact_key`), so an
object is never overwritten, an upload a failed commit leaves behind is harmless, and a retried commit uploads
the same object again. Platform plugins contribute stores with ``berth_artifact_stores()`` (``{kind: factory}``,
the ``kind`` of ``platform.storage.artifacts``): ``local`` (files under a folder, for one-node installs) is
built in; ``s3`` comes with ``berth-aws``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from berth.storage.scope import ConversationScope

__all__ = ["ArtifactStore", "ArtifactStoreFactory", "artifact_key", "artifact_prefix"]


def artifact_key(scope: ConversationScope, sha256: str) -> str:
    """The object key of a file with digest ``sha256`` in a conversation: per tenant, project, user and
    conversation, so a tenant's objects can be listed, expired or deleted by prefix."""
    return f"{scope.tenant}/{scope.project}/{scope.user_id}/{scope.conversation_id}/{sha256}"


def artifact_prefix(scope: ConversationScope) -> str:
    """The key prefix of every object of one conversation (``…/<conversation>/``)."""
    return artifact_key(scope, "")


class ArtifactStore(Protocol):
    """Immutable objects by key."""

    async def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` (large objects in parts)."""
        ...

    async def get(self, key: str) -> bytes:
        """The object's bytes.

        :raises KeyError: when there is no such object.
        """
        ...

    def chunks(self, key: str) -> AsyncIterator[bytes]:
        """The object's bytes in pieces, for streaming it to a client."""
        ...

    async def download_url(self, key: str, *, filename: str, mime: str) -> str | None:
        """A URL a client may download the object from directly (a presigned URL), or None to stream it."""
        ...

    async def delete_prefix(self, prefix: str) -> int:
        """Delete every object whose key starts with ``prefix`` (a conversation's: :func:`artifact_prefix`); return
        how many there were."""
        ...

    async def check(self) -> str:
        """Reach the store (the bucket exists and answers; the folder is writable); say what was found.

        :raises Exception: the store's own error when it cannot be reached.
        """
        ...

    async def aclose(self) -> None:
        """Release clients and threads."""
        ...


class ArtifactStoreFactory(Protocol):
    """What ``berth_artifact_stores()`` maps a kind to: builds the store from ``platform.storage.artifacts``."""

    def __call__(self, settings: object, /) -> ArtifactStore:
        """Build the store (``settings`` is the artifacts model of its kind)."""
        ...
