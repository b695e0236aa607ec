"""The ``local`` artifact store: objects as files under one folder (a distributed install on one node, or
several nodes sharing a mounted file system)."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

from berth.config.errors import ConfigError
from berth.config.models.assembly import LocalArtifacts
from berth.default_plugins.storage.threads import in_storage_thread
from berth.hooks import hookimpl
from berth.storage.artifacts import ArtifactStoreFactory

__all__ = ["LocalArtifactStore", "create_local_artifacts"]

CHUNK: Final = 256 * 1024


class LocalArtifactStore:
    """Objects under ``root``; each written to a temporary file and renamed into place (never half-written)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise ValueError(f"artifact key {key!r} leaves the store's folder")
        return path

    async def put(self, key: str, data: bytes) -> None:
        """Write the object (atomically, fsync-ed)."""
        path = self._path(key)

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
            with open(temporary, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            temporary.replace(path)

        await in_storage_thread(write)

    async def get(self, key: str) -> bytes:
        """The object's bytes (``KeyError`` when missing)."""
        try:
            return await in_storage_thread(self._path(key).read_bytes)
        except FileNotFoundError:
            raise KeyError(key) from None

    async def chunks(self, key: str) -> AsyncIterator[bytes]:
        """The object in pieces of 256 KiB."""
        path = self._path(key)
        try:
            file = await in_storage_thread(open, path, "rb")
        except FileNotFoundError:
            raise KeyError(key) from None
        try:
            while piece := await in_storage_thread(file.read, CHUNK):
                yield piece
        finally:
            file.close()

    async def download_url(self, key: str, *, filename: str, mime: str) -> str | None:
        """None: local objects are streamed by the API."""
        return None

    async def delete_prefix(self, prefix: str) -> int:
        """Delete the objects under ``prefix`` (a folder's, ending in ``/``, or any start of a key); return how many."""
        folder, _, start = prefix.rpartition("/")
        base = self._path(folder) if folder else self.root.resolve()

        def delete() -> int:
            if not base.is_dir():
                return 0
            deleted = 0
            for entry in list(base.iterdir()):
                if not entry.name.startswith(start):
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    deleted += sum(1 for found in entry.rglob("*") if found.is_file())
                    shutil.rmtree(entry)
                else:
                    entry.unlink(missing_ok=True)
                    deleted += 1
            if not start and base != self.root.resolve():
                base.rmdir()  # the prefix's own folder (emptied above)
            return deleted

        return await in_storage_thread(delete)

    async def check(self) -> str:
        """The folder exists (it is created) and is writable."""

        def probe() -> str:
            self.root.mkdir(parents=True, exist_ok=True)
            if not os.access(self.root, os.W_OK):
                raise PermissionError(f"{self.root} is not writable")
            return f"folder {self.root}"

        return await in_storage_thread(probe)

    async def aclose(self) -> None:
        """Nothing to release."""


def create_local_artifacts(settings: object, /) -> LocalArtifactStore:
    """Build the store for ``platform.storage.artifacts`` of kind ``local`` (its ``root``)."""
    if not isinstance(settings, LocalArtifacts):
        raise ConfigError("artifacts_kind_mismatch", f"the local artifact store cannot use {settings!r}")
    return LocalArtifactStore(Path(settings.root))


@hookimpl
def berth_artifact_stores() -> dict[str, ArtifactStoreFactory]:
    """Register ``local``."""
    return {"local": create_local_artifacts}
