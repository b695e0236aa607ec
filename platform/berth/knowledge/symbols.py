"""Code-aware ranking: a definition named by the query comes first, tests come after what they test.

Lexical scores alone rank a test or a caller that repeats a name twenty times above the one chunk that defines
it (issue 38: ``model_validate`` found its definition at rank 83 in pydantic, ``einsum`` at 64 in numpy).
:class:`CodeQuery` reads what a query names:

* **identifiers** — the whole query when it is one word or dotted name (``einsum``, ``Store.search``), and in a
  longer query each word shaped like code: ``snake_case``, ``camelCase`` / ``PascalCase`` with an inner capital,
  ``dotted.names``, ``call()`` or `` `quoted` `` (plain words of a question are not taken for names). The space
  looks up the definitions titled by each (its qualified name, or the end of it: ``model_validate`` names
  ``BaseModel.model_validate``) and :meth:`CodeQuery.definition_rank` puts them first: an exact match before a
  match of a dotted name's last part (``np.einsum`` → ``einsum``), case-sensitive before not, source before
  tests, implementation before a stub (``.pyi``, ``.d.ts``), a definition's first part before the others;
* **tests** — unless the query asks about tests, a chunk of a test file (:func:`is_test_path`) has its score
  weighed down by :data:`TEST_WEIGHT`, so the code it tests ranks above it;
* **windows** — a code window (code outside any definition: imports, constants) has its score weighed down by
  :data:`WINDOW_WEIGHT`, so the definitions and prose that say what the code does rank above it;
* **prose first for plain questions** — a query that names no identifier (and is not about tests) weighs code chunks by
  :data:`PROSE_FIRST_WEIGHT`, so at equal relevance the prose that explains ranks above the code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from berth.knowledge.store import ChunkRow

__all__ = ["PROSE_FIRST_WEIGHT", "TEST_WEIGHT", "WINDOW_WEIGHT", "CodeQuery", "is_stub_path", "is_test_path"]

TEST_WEIGHT: Final = 0.5
"""A test chunk's score is multiplied by this unless the query is about tests (a reciprocal-rank score halved:
the first of one ranking falls behind about the 60th)."""
WINDOW_WEIGHT: Final = 0.5
"""A code window's score (code outside any definition: a module's imports, constants, the lines between two
definitions) is multiplied by this: it repeats the names its module uses without saying what they do, and on the
labelled questions of ``bench/knowledge.py`` (146) no answer is a window, while windows took 1 to 2 places of the
top 5 of a third of the questions (hybrid recall@5 0.671 → 0.685, MRR 0.461 → 0.506; the same at 0.25 or 0.75)."""
PROSE_FIRST_WEIGHT: Final = 0.85
"""A code chunk's score (a definition or a window) is multiplied by this when the query names no identifier: a
question in plain words asks what something does or how to do it, which prose says and code shows, so at equal
relevance the prose ranks first (on the labelled questions of ``bench/knowledge.py``: recall@5 0.692 → 0.705, MRR
0.505 → 0.551 — on the odd and the even questions both; 0.7 and 0.5 lowered recall@5 on the odd ones). A query
naming an identifier (``SpaceIndex.search``) or asking about tests (which are code) is not weighed so."""
DEFINITIONS_PER_NAME: Final = 20
"""The most definitions looked up for one identifier of the query."""

_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_CAMEL: Final = re.compile(r"[a-z0-9][A-Z]|[A-Z]{2}[a-z]|^[A-Z][a-z0-9]+[A-Z]")
_EDGES: Final = "\"'\u201c\u201d\u2018\u2019,;:!?()[]{}<>"
_TEST_DIRECTORY: Final = re.compile(r"(?:^|/)(?:tests?|__tests__|__mocks__|spec|specs|test_?data|fixtures)/")
_TEST_FILE: Final = re.compile(
    r"(?:^|/)(?:test_[^/]*\.py|[^/]*_tests?\.py|conftest\.py|[^/]*_test\.go|[^/]*\.(?:test|spec)\.[cm]?[jt]sx?"
    r"|[^/]*Tests?\.java|[^/]*_test\.rs)$"
)
_TEST_WORDS: Final = re.compile(r"\b(?:tests?|testing|tested|spec|specs|pytest|unittest|fixtures?)\b", re.IGNORECASE)
_STUB: Final = re.compile(r"\.(?:pyi|d\.ts)$")
_PART: Final = re.compile(r"~p\d+$")


def is_test_path(path: str) -> bool:
    """Whether ``path`` is a test: under a ``tests/``, ``test/``, ``__tests__/``, ``spec/`` or fixtures folder, or
    named like one (``test_*.py``, ``*_test.py``, ``conftest.py``, ``*_test.go``, ``*.test.ts``, ``*.spec.js``,
    ``*Test.java``, ``*_test.rs``). A ``testing/`` package is not: it is code others call."""
    return bool(_TEST_DIRECTORY.search(path) or _TEST_FILE.search(path))


def is_stub_path(path: str) -> bool:
    """Whether ``path`` only declares types (``.pyi``, ``.d.ts``): the implementation ranks before it."""
    return bool(_STUB.search(path))


def _code_shaped(word: str) -> bool:
    return "_" in word or "." in word or bool(_CAMEL.search(word))


@dataclass(frozen=True, slots=True)
class CodeQuery:
    """What a query names in code (see the module docstring)."""

    identifiers: tuple[str, ...]
    about_tests: bool

    @classmethod
    def parse(cls, query: str) -> CodeQuery:
        """Read ``query``'s identifiers and whether it asks about tests."""
        words = query.split()
        found: list[str] = []
        for word in words:
            quoted = word.startswith("`") or word.endswith("`")
            called = word.rstrip(_EDGES + ".").endswith("()") or "(" in word
            bare = word.strip(_EDGES + "`").split("(", 1)[0].rstrip(".")
            if not _IDENTIFIER.fullmatch(bare):
                continue
            if len(words) == 1 or quoted or called or _code_shaped(bare):
                found.append(bare)
        return cls(tuple(dict.fromkeys(found)), bool(_TEST_WORDS.search(query)))

    def lookups(self) -> list[str]:
        """The names to look definitions up by: each identifier, then a dotted one's last part."""
        names = list(self.identifiers)
        names += [name.rsplit(".", 1)[1] for name in self.identifiers if "." in name]
        return [name for name in dict.fromkeys(names) if len(name) > 1]

    def definition_rank(self, chunk: ChunkRow) -> tuple[int, ...]:
        """A sort key that puts the definitions the query names first, the best named first; ``(1,)`` for any
        other chunk (see the module docstring for the order)."""
        if chunk.kind != "definition" or not self.identifiers:
            return (1,)
        level = min((_match_level(chunk.title, name) for name in self.identifiers), default=_NO_MATCH)
        if level == _NO_MATCH:
            return (1,)
        return (
            0,
            is_test_path(chunk.path),
            level,
            is_stub_path(chunk.path),
            bool(_PART.search(chunk.anchor)),
        )

    def weight(self, chunk: ChunkRow) -> float:
        """What the chunk's score is multiplied by: :data:`TEST_WEIGHT` for a test the query is not about,
        :data:`WINDOW_WEIGHT` for a code window, :data:`PROSE_FIRST_WEIGHT` for code when the query names no
        identifier and is not about tests (their product when several apply)."""
        weight = TEST_WEIGHT if not self.about_tests and is_test_path(chunk.path) else 1.0
        if chunk.kind == "window":
            weight *= WINDOW_WEIGHT
        if chunk.kind in ("definition", "window") and not self.identifiers and not self.about_tests:
            weight *= PROSE_FIRST_WEIGHT
        return weight


_NO_MATCH: Final = 9


def _match_level(title: str, name: str) -> int:
    """0: ``title`` is ``name`` or ends with ``.name``; 1: so, ignoring case; 2 and 3: likewise for the last part
    of a dotted ``name``; :data:`_NO_MATCH` otherwise."""
    candidates = [name, name.rsplit(".", 1)[1]] if "." in name else [name]
    for offset, candidate in zip((0, 2), candidates, strict=False):
        if title == candidate or title.endswith("." + candidate):
            return offset
        lowered, wanted = title.lower(), candidate.lower()
        if lowered == wanted or lowered.endswith("." + wanted):
            return offset + 1
    return _NO_MATCH
