"""Applying a unified diff to a text, with diagnostics that show expected against actual lines."""

from __future__ import annotations

import re
from dataclasses import dataclass

_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(Exception):
    """A patch that does not apply: ``code`` is ``patch_malformed`` or ``hunk_mismatch``."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


@dataclass(frozen=True)
class Hunk:
    """One ``@@`` hunk: where it starts in the old text, and its old and new lines."""

    old_start: int
    old_lines: tuple[str, ...]
    new_lines: tuple[str, ...]


def parse_unified_diff(diff: str) -> list[Hunk]:
    """Parse the hunks of a unified diff (``---``/``+++`` headers are optional)."""
    hunks: list[Hunk] = []
    old: list[str] = []
    new: list[str] = []
    start: int | None = None
    for line in diff.splitlines():
        header = _HUNK_HEADER.match(line)
        if header:
            if start is not None:
                hunks.append(Hunk(start, tuple(old), tuple(new)))
            start, old, new = int(header.group(1)), [], []
            continue
        if start is None:  # "---"/"+++" headers and anything else before the first hunk
            continue
        if line.startswith("\\"):
            continue  # "\ No newline at end of file"
        marker, body = (line[:1], line[1:]) if line else (" ", "")
        if marker == " ":
            old.append(body)
            new.append(body)
        elif marker == "-":
            old.append(body)
        elif marker == "+":
            new.append(body)
        else:
            raise PatchError("patch_malformed", f"line {line!r} starts with neither ' ', '-' nor '+'")
    if start is not None:
        hunks.append(Hunk(start, tuple(old), tuple(new)))
    if not hunks:
        raise PatchError("patch_malformed", "no @@ hunk found; send a unified diff or the full new content")
    return hunks


def _find(lines: list[str], wanted: tuple[str, ...], hint: int) -> int | None:
    """Where ``wanted`` occurs in ``lines``, nearest to ``hint`` (0-based), or None."""
    if not wanted:
        return min(max(hint, 0), len(lines))
    candidates = [i for i in range(len(lines) - len(wanted) + 1) if tuple(lines[i : i + len(wanted)]) == wanted]
    return min(candidates, key=lambda i: abs(i - hint)) if candidates else None


def apply_unified_diff(text: str, diff: str) -> str:
    """Apply ``diff`` to ``text``; raise :class:`PatchError` describing the first hunk that does not match.

    A hunk may have drifted (its line numbers are only a hint); its context and removed lines must match.
    """
    lines = text.splitlines()
    trailing_newline = text.endswith("\n")
    offset = 0
    for number, hunk in enumerate(parse_unified_diff(diff), start=1):
        hint = hunk.old_start - 1 + offset
        at = _find(lines, hunk.old_lines, hint)
        if at is None:
            actual = lines[max(hint, 0) : max(hint, 0) + len(hunk.old_lines)]
            expected = "\n".join(f"  {line}" for line in hunk.old_lines)
            found = "\n".join(f"  {line}" for line in actual) or "  (end of file)"
            raise PatchError(
                "hunk_mismatch",
                f"hunk {number} (@@ -{hunk.old_start}) does not match the file.\nexpected at line {hunk.old_start}:\n"
                f"{expected}\nactual:\n{found}\nre-read the file with react.read and send a new patch",
            )
        lines[at : at + len(hunk.old_lines)] = list(hunk.new_lines)
        offset += len(hunk.new_lines) - len(hunk.old_lines)
    return "\n".join(lines) + ("\n" if trailing_newline or not text else "")
