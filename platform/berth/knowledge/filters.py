"""What a search may be limited to: a path glob, a language, a symbol, a kind of chunk (:class:`ChunkFilter`).

A store applies the filter to every ranking it makes (``within=`` of
:meth:`~berth.knowledge.store.SpaceStore.lexical` and :meth:`~berth.knowledge.store.SpaceStore.nearest`) and lists
the chunks it matches (:meth:`~berth.knowledge.store.SpaceStore.matching`). The conditions are expressed here
once, as a regular expression over the path (a glob and a language both become one) and ``LIKE`` patterns over
the title, which SQLite and PostgreSQL read alike.

Globs (``path``):

* ``*`` is any run of characters but ``/``, ``?`` one character but ``/``, ``[abc]`` / ``[!abc]`` a class,
  ``**`` any run of characters (folders included; ``**/`` also none);
* a glob without ``/`` is matched against the file's name, in any folder (``*.py``, ``test_*``); one with ``/``
  against the whole path from the space's root (``numpy/_core/*.py``, ``src/**/*.ts``);
* a trailing ``/`` stands for everything under that folder (``tests/``, ``docs/api/``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from berth.knowledge.chunks import ChunkKind
from berth.knowledge.code import LANGUAGES
from berth.knowledge.text import DOCUMENT_SUFFIXES

__all__ = ["CHUNK_KINDS", "ChunkFilter", "FilterError", "glob_regex", "language_suffixes", "like_escape"]

CHUNK_KINDS: Final[tuple[ChunkKind, ...]] = ("definition", "window", "section", "page")
"""The kinds of chunk: a code definition (a symbol), a window of lines, a document section, a PDF page."""
_LANGUAGE_ALIASES: Final = {"typescript": ("typescript", "tsx")}
"""A language that also takes in another's files (TypeScript: ``.tsx`` too)."""


class FilterError(ValueError):
    """A filter that cannot be applied (``react.search_knowledge`` reports it as ``tool_params_invalid``); the
    message says what is accepted."""


def language_suffixes(language: str) -> tuple[str, ...]:
    """The file suffixes of ``language`` (case-insensitive): a language :mod:`berth.knowledge.code` parses
    (``python``, ``typescript``…) or a document type (``markdown``, ``html``, ``pdf``, ``text``)."""
    by_language: dict[str, list[str]] = {}
    for suffix, name in [*LANGUAGES.items(), *DOCUMENT_SUFFIXES.items()]:
        by_language.setdefault(name, []).append(suffix)
    wanted = language.strip().lower()
    if wanted not in by_language:
        known = ", ".join(sorted(by_language))
        raise FilterError(f"unknown language {language!r} (known: {known})")
    return tuple(suffix for name in _LANGUAGE_ALIASES.get(wanted, (wanted,)) for suffix in by_language[name])


def glob_regex(glob: str) -> str:
    """A regular expression (the subset Python and PostgreSQL read alike) matching the paths ``glob`` matches
    (see the module docstring)."""
    pattern = glob.strip()
    if not pattern or pattern == "/":
        raise FilterError("an empty path glob (e.g. '*.py', 'tests/', 'src/**/*.ts')")
    if pattern.endswith("/"):
        pattern += "**"
    if "/" in pattern:
        return "^" + _translate(pattern.lstrip("/")) + "$"
    return "^(?:.*/)?" + _translate(pattern) + "$"


def _translate(glob: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(glob):
        char = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and "]" in glob[i + 2 :]:
            end = glob.index("]", i + 2)
            body = glob[i + 1 : end]
            negated = body.startswith("!")
            body = body[1:] if negated else body
            out.append("[" + ("^" if negated else "") + body.replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def like_escape(text: str) -> str:
    """``text`` as a literal in a ``LIKE … ESCAPE '\\'`` pattern (``%``, ``_`` and ``\\`` escaped)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


@dataclass(frozen=True, slots=True)
class ChunkFilter:
    """Which chunks a search may return; every condition given must hold.

    :ivar path: a glob over the chunk's file path (see the module docstring).
    :ivar language: the file's language, by its suffix (:func:`language_suffixes`).
    :ivar symbol: a definition's name or the end of its qualified name (``search`` and ``Store.search`` both
        match the definition titled ``Store.search``), case-insensitive; implies ``kind="definition"``.
    :ivar kind: the kind of chunk (:data:`CHUNK_KINDS`).
    """

    path: str | None = None
    language: str | None = None
    symbol: str | None = None
    kind: str | None = None

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in CHUNK_KINDS:
            raise FilterError(f"unknown kind {self.kind!r} (kinds: {', '.join(CHUNK_KINDS)})")
        if self.symbol is not None and not self.symbol.strip():
            raise FilterError("an empty symbol")
        if self.symbol is not None and self.kind not in (None, "definition"):
            raise FilterError(f"a symbol is a definition, not a {self.kind}")
        if self.path is not None:
            glob_regex(self.path)
        if self.language is not None:
            language_suffixes(self.language)

    @property
    def empty(self) -> bool:
        """Whether the filter lets every chunk through."""
        return self.path is None and self.language is None and self.symbol is None and self.kind is None

    def path_patterns(self) -> list[str]:
        """Regular expressions the path must match (each of them)."""
        patterns = []
        if self.path is not None:
            patterns.append(glob_regex(self.path))
        if self.language is not None:
            suffixes = "|".join(re.escape(suffix.lstrip(".")) for suffix in language_suffixes(self.language))
            patterns.append(f"(?i)\\.(?:{suffixes})$")
        return patterns

    def title_patterns(self) -> tuple[str, str] | None:
        """``LIKE`` patterns (``ESCAPE '\\'``) of which the title must match one: the symbol itself, or ending in
        ``.<symbol>``; None without a symbol."""
        if self.symbol is None:
            return None
        symbol = like_escape(self.symbol.strip())
        return symbol, "%." + symbol

    def symbol_name(self) -> str | None:
        """The symbol's last dotted part (``Store.search`` → ``search``): what every title it matches ends with,
        which the stores index (a title equal to the symbol or ending in ``.<symbol>`` has it as its last part)."""
        return None if self.symbol is None else self.symbol.strip().rsplit(".", 1)[-1]

    def kinds(self) -> str | None:
        """The kind the chunk must be (a symbol is a definition)."""
        return "definition" if self.symbol is not None and self.kind is None else self.kind
