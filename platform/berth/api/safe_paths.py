"""Files named by a client under a folder the server owns: never outside it, never a 500.

A path from a URL may hold a NUL byte (``%00``), segments longer than a file name may be, or ``..``; resolving it
as it is raises ``ValueError: embedded null byte`` or ``OSError: File name too long`` before any check runs. These
helpers refuse such paths up front and treat every resolution error as "not found".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from fastapi.staticfiles import StaticFiles

MAX_SEGMENT_BYTES: Final = 255
"""The longest file name Linux file systems allow."""
MAX_PATH_BYTES: Final = 1024


def plausible_relative_path(relative: str) -> bool:
    """Whether ``relative`` could name a file under a folder: no NUL, no over-long segment, not over-long."""
    encoded = relative.encode("utf-8", errors="surrogateescape")
    if b"\x00" in encoded or len(encoded) > MAX_PATH_BYTES:
        return False
    return all(len(segment) <= MAX_SEGMENT_BYTES for segment in encoded.split(b"/"))


def file_under(root: Path, relative: str, *, index: str = "index.html") -> Path | None:
    """The regular file ``relative`` names under ``root`` (a folder's ``index``), or None for anything else."""
    if not plausible_relative_path(relative):
        return None
    try:
        base = root.resolve()
        target = (base / (relative or index)).resolve()
        if not target.is_relative_to(base):
            return None
        if target.is_dir():
            target = target / index
        return target if target.is_file() else None
    except (OSError, ValueError):
        return None


class SafeStaticFiles(StaticFiles):
    """Starlette's static files, answering 404 (not 500) for a path that cannot name a file."""

    def lookup_path(self, path: str) -> tuple[str, os.stat_result | None]:
        """Look ``path`` up as Starlette does, after refusing paths no file can have."""
        if not plausible_relative_path(path):
            return "", None
        try:
            return super().lookup_path(path)
        except (OSError, ValueError):
            return "", None
