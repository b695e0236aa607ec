"""A chunk: the unit of a knowledge space that is indexed, searched, read and cited.

A chunk lives in one file of the space (``path``, '/'-separated, relative to the space's root) and is
named inside it by an ``anchor`` that is unique within the file. Its logical path is
``ks:<space>/<path>#<anchor>`` (:func:`chunk_path`).

Anchors are stable across re-indexing as long as the structure they name is unchanged:

* a markdown/HTML section: the GitHub slug of its own heading (:func:`slugify`), de-duplicated within
  the file GitHub's way (``usage``, ``usage-1``, ``usage-2``); text before the first heading is ``top``;
* a PDF page: ``page-<n>`` (1-based);
* a code definition: its qualified name (``Store.search``, ``outer.inner``); a second definition of the
  same name in the file gets ``~2``, a third ``~3``;
* a window of lines (code outside any definition, or a file no parser knows): ``L<first>-<last>``.

A section or definition too long for one chunk is split into parts; the first keeps the anchor, the
next ones append ``~p2``, ``~p3`` (:func:`part_anchor`). :func:`base_anchor` strips a part suffix, so a
reference to a section matches every part of it.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

__all__ = [
    "MAX_CHUNK_CHARS",
    "Chunk",
    "ChunkKind",
    "SkipFile",
    "base_anchor",
    "chunk_path",
    "dedupe_anchor",
    "part_anchor",
    "slugify",
]

MAX_CHUNK_CHARS: Final = 4_000
"""A chunk's text is at most this long; longer sections and definitions are split into parts."""

ChunkKind: TypeAlias = Literal["section", "page", "definition", "window"]

_PART: Final = re.compile(r"~p\d+$")
_NOT_SLUG: Final = re.compile(r"[^\w\- ]", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One indexed piece of a file.

    :ivar path: the file's path inside the space ('/'-separated, relative).
    :ivar anchor: the chunk's name inside the file (unique within it); see the module docstring.
    :ivar title: what a reader sees as the chunk's heading: the heading path of a section joined with
        ``" > "`` (``"Deploy > The compose stack"``), a definition's qualified name (``"Store.search"``),
        ``"page 3"``, or the file name for a window.
    :ivar text: the chunk's own text (for a section, including its heading line).
    :ivar first_line: 1-based first line of the chunk in the file (a PDF page: the page number).
    :ivar last_line: 1-based last line, inclusive.
    :ivar kind: ``section``, ``page``, ``definition`` or ``window``.
    """

    path: str
    anchor: str
    title: str
    text: str
    first_line: int
    last_line: int
    kind: ChunkKind = "section"


class SkipFile(Exception):  # noqa: N818 - a control-flow signal carrying its reason, not an error type name
    """Raised by a chunker for a file that cannot be indexed; ``reason`` is recorded against the file."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def slugify(heading: str) -> str:
    """GitHub's anchor for a heading: lower-cased, punctuation dropped, spaces to hyphens.

    ``"The compose stack (v1)"`` → ``"the-compose-stack-v1"``; an empty result becomes ``"section"``.
    """
    text = unicodedata.normalize("NFKC", heading).strip().lower()
    text = _NOT_SLUG.sub("", text).replace(" ", "-")
    return text or "section"


def dedupe_anchor(anchor: str, seen: dict[str, int], *, style: Literal["github", "tilde"] = "github") -> str:
    """``anchor``, or a suffixed variant when ``seen`` already holds it; records what it returns.

    ``github`` style appends ``-1``, ``-2`` (headings); ``tilde`` appends ``~2``, ``~3`` (definitions).
    """
    count = seen.get(anchor)
    if count is None:
        seen[anchor] = 1
        return anchor
    while True:
        candidate = f"{anchor}-{count}" if style == "github" else f"{anchor}~{count + 1}"
        count += 1
        if candidate not in seen:
            seen[anchor] = count
            seen[candidate] = 1
            return candidate


def part_anchor(anchor: str, part: int) -> str:
    """The anchor of ``part`` (1-based) of a split chunk: the first part keeps ``anchor``."""
    return anchor if part <= 1 else f"{anchor}~p{part}"


def base_anchor(anchor: str) -> str:
    """``anchor`` without a part suffix (``"usage~p2"`` → ``"usage"``)."""
    return _PART.sub("", anchor)


def chunk_path(space: str, chunk: Chunk) -> str:
    """The chunk's logical path, ``ks:<space>/<path>#<anchor>``."""
    return f"ks:{space}/{chunk.path}#{chunk.anchor}"
