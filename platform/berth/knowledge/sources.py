"""The files of a knowledge space: what an indexer lists before anything is read.

Listing is cheap (a directory walk and a ``stat`` per file); the index compares each file's ``stat`` key
with what it stored and reads, hashes and re-chunks only files whose key changed (and whose content
then really differs). :class:`FileTree` is the walk every folder-based indexer shares.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = ["DEFAULT_EXCLUDED_DIRS", "DEFAULT_MAX_FILE_BYTES", "FileTree", "SourceFile"]

DEFAULT_MAX_FILE_BYTES: Final = 2 * 1024 * 1024
"""Files larger than this are listed but skipped (recorded as ``too large``), never read."""

DEFAULT_EXCLUDED_DIRS: Final = frozenset(
    {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache",
     ".ruff_cache", ".tox", "dist", "build", ".idea", ".vscode"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file of a space, as listed.

    :ivar path: '/'-separated path inside the space (what ``ks:<space>/<path>`` names).
    :ivar stat: a cheap change key (size and modification time); the empty string means "unknown":
        the file is read and hashed on every refresh.
    :ivar size: its size in bytes.
    :ivar location: where it is on disk, or None for a file whose bytes are carried in ``data``.
    :ivar data: the file's bytes, for indexers that produce content rather than list files.
    """

    path: str
    stat: str
    size: int
    location: Path | None = None
    data: bytes | None = field(default=None, repr=False)

    def read(self) -> bytes:
        """The file's bytes."""
        if self.data is not None:
            return self.data
        assert self.location is not None, f"{self.path}: neither data nor a location"
        return self.location.read_bytes()


@dataclass(frozen=True)
class FileTree:
    """The files under ``root`` that match ``include`` (glob patterns on the relative path, or on the
    file name when a pattern has no '/'), minus ``exclude`` patterns and excluded folders.

    Hidden files and folders (a name starting with '.') are left out unless a pattern names them.
    Symbolic links are not followed out of ``root``.
    """

    root: Path
    include: Sequence[str] = ("*",)
    exclude: Sequence[str] = ()
    excluded_dirs: frozenset[str] = DEFAULT_EXCLUDED_DIRS

    def files(self) -> Iterator[SourceFile]:
        """Every matching file, sorted by path (raises ``FileNotFoundError`` when ``root`` is missing)."""
        if not self.root.is_dir():
            raise FileNotFoundError(f"knowledge folder {self.root} does not exist")
        root = self.root.resolve()
        for rel in sorted(self._walk(root)):
            location = root / rel
            try:
                info = location.stat()
            except OSError:
                continue
            yield SourceFile(rel, f"{info.st_size}:{info.st_mtime_ns}", info.st_size, location)

    def _walk(self, root: Path) -> Iterable[str]:
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if d not in self.excluded_dirs and not d.startswith(".")]
            base = Path(folder)
            for name in names:
                location = base / name
                if location.is_symlink() and not location.resolve().is_relative_to(root):
                    continue
                rel = location.relative_to(root).as_posix()
                if self._wanted(rel, name):
                    yield rel

    def _wanted(self, rel: str, name: str) -> bool:
        def matches(pattern: str) -> bool:
            return fnmatch.fnmatch(rel, pattern) if "/" in pattern else fnmatch.fnmatch(name, pattern)

        if name.startswith(".") and not any(p.lstrip("*/").startswith(".") for p in self.include):
            return False
        return any(matches(p) for p in self.include) and not any(matches(p) for p in self.exclude)
