"""Why a bundle generation or a platform plugin failed to load: a stable code, a message, and where (file:line)."""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType


@dataclass(frozen=True)
class LoadError:
    """A failed load. ``file``/``line`` point into the bundle's code when the failure came from there."""

    code: str
    message: str
    file: str | None = None
    line: int | None = None
    traceback: str = ""

    def __str__(self) -> str:
        where = f" ({self.file}:{self.line})" if self.file else ""
        return f"[{self.code}] {self.message}{where}"

    def public_message(self) -> str:
        """The message without the host's file paths (each absolute path shortened to its file name): what a
        tenant's user may be shown; operators see ``file``, ``line`` and the traceback."""
        return without_paths(self.message)


_ABSOLUTE_PATH = re.compile(
    r"(?<![\w.:/~-])(?:[A-Za-z]:[\\/]|/)(?=[^\s/])"  # a root (POSIX or a drive), then something
    r"(?:[^\s'\"()\[\]<>,;:]*[\\/])*"  # the folders
    r"([^\s'\"()\[\]<>,;:\\/]*)"  # the file name
)


def without_paths(text: str) -> str:
    """``text`` with every absolute path (POSIX or Windows) replaced by its last part: a file name says what broke
    without telling a reader how the host's disk is laid out."""
    return _ABSOLUTE_PATH.sub(lambda match: match.group(1) or "…", text)


class BundleLoadError(Exception):
    """Raised inside the loader; carries the :class:`LoadError` to record."""

    def __init__(self, error: LoadError) -> None:
        self.error = error
        super().__init__(str(error))


def load_error_from_exception(code: str, exc: BaseException, roots: list[Path], context: str = "") -> LoadError:
    """Describe ``exc`` with the deepest traceback frame inside one of ``roots`` (the bundle's code).

    A ``SyntaxError`` names its own file and line.
    """
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    prefix = f"{context}: " if context else ""
    if isinstance(exc, SyntaxError) and exc.filename:
        return LoadError(code, f"{prefix}{type(exc).__name__}: {exc.msg}", exc.filename, exc.lineno, text)
    file, line = _deepest_frame_in(exc.__traceback__, roots)
    return LoadError(code, f"{prefix}{type(exc).__name__}: {exc}", file, line, text)


def _deepest_frame_in(tb: TracebackType | None, roots: list[Path]) -> tuple[str | None, int | None]:
    found: tuple[str | None, int | None] = (None, None)
    resolved = [root.resolve() for root in roots]
    for frame, line in traceback.walk_tb(tb):
        filename = frame.f_code.co_filename
        try:
            path = Path(filename).resolve()
        except OSError:
            continue
        if any(path.is_relative_to(root) for root in resolved):
            found = (filename, line)
    return found
