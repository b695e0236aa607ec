"""Searching a code base (berth.knowledge.symbols, berth.knowledge.filters): a query naming an identifier finds its
definition first even when a test repeats the name twenty times, tests rank below the code they test, and a search
can be limited to a path glob, a language, a symbol or a kind of chunk. Every test runs on both stores: SQLite
files (embedded) and PostgreSQL (distributed, ``berth-postgres``, a scratch database)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from berth.bundle.knowledge import KnowledgeSpace, SourceTree
from berth.knowledge.filters import ChunkFilter, FilterError, glob_regex
from berth.knowledge.merge import search_spaces_merged
from berth.knowledge.service import KnowledgeService
from berth.knowledge.space import SpaceIndex
from berth.knowledge.store import SpaceStoreFactory
from berth.knowledge.symbols import CodeQuery, is_test_path
from berth.runtime.memory import HashedNgramEmbedder

AREA = '''\
"""Areas of plane shapes."""


def polygon_area(points):
    """The area of a simple polygon given its corner points in order (the shoelace formula)."""
    total = 0.0
    for (x1, y1), (x2, y2) in zip(points, points[1:] + points[:1]):
        total += x1 * y2 - x2 * y1
    return abs(total) / 2


class Canvas:
    """Where shapes are drawn."""

    def draw(self, points):
        """Draw the outline through the points."""
        return [tuple(point) for point in points]
'''

GEOMETRY_GO = """\
package geometry

// PolygonArea is the shoelace area of the points.
func PolygonArea(xs, ys []float64) float64 {
\treturn 0
}
"""

GUIDE = "# Shapes\n\nThe polygon area helper computes the area of a polygon from its points.\n"


def repeating_test() -> str:
    """A test that names ``polygon_area`` twenty times (lexically, it outranks the one definition)."""
    checks = "\n".join(
        f"    assert polygon_area(square({n})) == polygon_area(square({n})) * 1  # polygon area {n}" for n in range(10)
    )
    return f"from shapes.area import polygon_area\n\n\ndef test_polygon_area_of_squares():\n{checks}\n"


@pytest.fixture
def open_space(tmp_path: Path, stores: SpaceStoreFactory | None) -> Callable[..., SpaceIndex]:
    """``open_space(folder, name="code")``: the ``SourceTree`` space of ``folder`` (hashed n-gram vectors)."""
    service = KnowledgeService(tmp_path / "knowledge", HashedNgramEmbedder(), embedder_name="small", stores=stores)

    def make(folder: Path, name: str = "code") -> SpaceIndex:
        return service.open("bundle", KnowledgeSpace(name=name, indexer=SourceTree(folder)))

    return make


@pytest.fixture
async def code_space(tmp_path: Path, open_space: Callable[..., SpaceIndex]) -> AsyncIterator[SpaceIndex]:
    """An indexed tree: ``shapes/area.py`` (the definitions), ``tests/test_area.py`` (twenty mentions), a Go file
    and a markdown guide."""
    files = {
        "shapes/area.py": AREA,
        "tests/test_area.py": repeating_test(),
        "geometry/area.go": GEOMETRY_GO,
        "docs/shapes.md": GUIDE,
    }
    for rel, text in files.items():
        target = tmp_path / "tree" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    index = open_space(tmp_path / "tree")
    await index.refresh()
    yield index
    await index.aclose()


async def test_a_query_naming_an_identifier_finds_its_definition_before_a_test_repeating_it(
    code_space: SpaceIndex,
) -> None:
    lexical_only = await code_space.store.lexical("polygon_area", 10)
    rows = await code_space.store.chunk_rows(i for i, _ in lexical_only)
    assert rows[lexical_only[0][0]].path == "tests/test_area.py"  # what the words alone rank first
    for query in ("polygon_area", "where is polygon_area defined?", "`polygon_area`", "shapes.area.polygon_area"):
        for mode in ("hybrid", "lexical", "vector"):
            hits = await code_space.search(query, limit=3, mode=mode)
            assert (hits[0].chunk.path, hits[0].chunk.title) == ("shapes/area.py", "polygon_area"), (query, mode)
    method = await code_space.search("Canvas.draw", limit=1)
    assert method[0].logical_path == "ks:code/shapes/area.py#Canvas.draw"


async def test_tests_rank_below_the_code_they_test_unless_the_query_is_about_tests(code_space: SpaceIndex) -> None:
    hits = await code_space.search("polygon area", limit=20)
    paths = [hit.chunk.path for hit in hits]
    assert paths.index("shapes/area.py") < paths.index("tests/test_area.py")
    about_tests = await code_space.search("tests of polygon area", limit=1)
    assert about_tests[0].chunk.path == "tests/test_area.py"


async def test_merged_spaces_rank_the_named_definition_first(
    tmp_path: Path, code_space: SpaceIndex, open_space: Callable[..., SpaceIndex]
) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.md").write_text("# Notes\n\nCall polygon_area polygon_area polygon_area.\n")
    other = open_space(tmp_path / "other", name="notes")
    await other.refresh()
    hits = await search_spaces_merged([code_space, other], "polygon_area", limit=3, mode="lexical")
    assert hits[0].logical_path == "ks:code/shapes/area.py#polygon_area"
    await other.aclose()


async def test_a_search_is_limited_to_a_path_glob_a_language_a_symbol_or_a_kind(code_space: SpaceIndex) -> None:
    async def paths(query: str, within: ChunkFilter, mode: str = "hybrid") -> set[tuple[str, str]]:
        hits = await code_space.search(query, limit=20, mode=mode, within=within)  # type: ignore[arg-type]
        return {(hit.chunk.path, hit.chunk.kind) for hit in hits}

    everywhere = await paths("polygon area points", ChunkFilter())
    assert {path for path, _ in everywhere} == {"shapes/area.py", "tests/test_area.py", "geometry/area.go",
                                                "docs/shapes.md"}  # fmt: skip
    assert {path for path, _ in await paths("polygon area points", ChunkFilter(path="tests/"))} == {
        "tests/test_area.py"
    }
    assert {path for path, _ in await paths("polygon area points", ChunkFilter(path="*.py"))} == {
        "shapes/area.py",
        "tests/test_area.py",
    }
    assert {path for path, _ in await paths("polygon area", ChunkFilter(path="shapes/**"))} == {"shapes/area.py"}
    for mode in ("lexical", "vector"):
        assert {path for path, _ in await paths("polygon area", ChunkFilter(language="go"), mode)} == {
            "geometry/area.go"
        }
        assert {path for path, _ in await paths("polygon area", ChunkFilter(language="Markdown"), mode)} == {
            "docs/shapes.md"
        }
    symbol = await code_space.search("points", limit=10, within=ChunkFilter(symbol="draw"))
    assert [hit.chunk.title for hit in symbol] == ["Canvas.draw"]
    assert [hit.chunk.title for hit in await code_space.search("points", within=ChunkFilter(symbol="canvas.DRAW"))] == [
        "Canvas.draw"
    ]
    definitions = await paths("polygon area points", ChunkFilter(kind="definition"))
    assert {kind for _, kind in definitions} == {"definition"}
    assert ("geometry/area.go", "definition") in definitions
    windows = await paths("polygon area points", ChunkFilter(kind="window", language="python"))
    assert windows and {kind for _, kind in windows} == {"window"}
    assert await code_space.search("polygon", within=ChunkFilter(path="nowhere/")) == []


async def test_a_symbol_filter_takes_like_wildcards_literally(code_space: SpaceIndex) -> None:
    for symbol in ("polygon%area", "polygon_are_", "%"):
        assert await code_space.store.matching(ChunkFilter(symbol=symbol), -1) == [], symbol
    found = await code_space.store.matching(ChunkFilter(symbol="polygon_area"), -1)
    assert [row.title for row in (await code_space.store.chunk_rows(found)).values()] == ["polygon_area"]


def test_globs_match_names_anywhere_and_paths_from_the_root() -> None:
    import re

    def matches(glob: str, path: str) -> bool:
        return re.search(glob_regex(glob), path) is not None

    assert matches("*.py", "a/b/c.py") and not matches("*.py", "a/b/c.pyi")
    assert matches("tests/", "tests/unit/x.py") and not matches("tests/", "src/tests/x.py")
    assert matches("src/**/*.ts", "src/a/b/c.ts") and matches("src/**/*.ts", "src/c.ts")
    assert not matches("src/*.ts", "src/a/c.ts")
    assert matches("test_?.py", "x/test_a.py") and matches("[!a]*.md", "b.md") and not matches("[!a]*.md", "a.md")
    assert matches("a+b (1).txt", "a+b (1).txt") and not matches("a+b (1).txt", "aab 1.txt")


def test_unknown_languages_kinds_and_empty_filters_are_refused_with_what_is_accepted() -> None:
    with pytest.raises(FilterError, match=r"unknown language 'cobol' \(known: .*python"):
        ChunkFilter(language="cobol")
    with pytest.raises(FilterError, match="unknown kind"):
        ChunkFilter(kind="function")
    with pytest.raises(FilterError, match="empty path glob"):
        ChunkFilter(path=" ")
    with pytest.raises(FilterError, match="a symbol is a definition"):
        ChunkFilter(symbol="x", kind="window")


def test_what_a_query_names_in_code() -> None:
    assert CodeQuery.parse("einsum").identifiers == ("einsum",)
    assert CodeQuery.parse("where is BaseModel.model_validate defined?").identifiers == ("BaseModel.model_validate",)
    assert CodeQuery.parse("how does `merge` call fuse_rankings()").identifiers == ("merge", "fuse_rankings")
    assert CodeQuery.parse("how many vacation days do I get").identifiers == ()
    assert CodeQuery.parse("np.einsum").lookups() == ["np.einsum", "einsum"]
    assert CodeQuery.parse("unit tests of the parser").about_tests
    assert not CodeQuery.parse("the parser").about_tests


@pytest.mark.parametrize(
    ("path", "test"),
    [
        ("tests/unit/test_x.py", True),
        ("numpy/_core/tests/test_einsum.py", True),
        ("pkg/test_x.py", True),
        ("pkg/x_test.go", True),
        ("web/src/app.spec.ts", True),
        ("web/src/__tests__/app.js", True),
        ("src/main/java/FooTest.java", True),
        ("conftest.py", True),
        ("numpy/testing/_private/utils.py", False),
        ("pkg/contest.py", False),
        ("pkg/latest.py", False),
        ("src/attestation.go", False),
    ],
)
def test_test_paths(path: str, test: bool) -> None:
    assert is_test_path(path) is test


def test_the_definition_order_puts_source_before_tests_and_stubs() -> None:
    from berth.knowledge.store import ChunkRow

    def row(path: str, title: str, anchor: str | None = None, kind: str = "definition") -> ChunkRow:
        return ChunkRow(1, path, anchor or title, title, "", 1, 2, kind)

    code = CodeQuery.parse("einsum")
    ordered = sorted(
        [
            row("tests/test_e.py", "einsum"),
            row("e.pyi", "einsum"),
            row("e.py", "einsum", "einsum~p2"),
            row("e.py", "einsum"),
            row("e.py", "EinSum"),
            row("e.py", "einsum lines 1-9", "L1-9", "window"),
        ],
        key=code.definition_rank,
    )
    assert [(r.path, r.title, r.anchor) for r in ordered] == [
        ("e.py", "einsum", "einsum"),
        ("e.py", "einsum", "einsum~p2"),
        ("e.pyi", "einsum", "einsum"),
        ("e.py", "EinSum", "EinSum"),
        ("tests/test_e.py", "einsum", "einsum"),
        ("e.py", "einsum lines 1-9", "L1-9"),
    ]


async def test_a_symbol_look_up_seeks_the_name_index_of_either_store(code_space: SpaceIndex) -> None:
    from berth.knowledge.sqlite_store import SqliteSpaceStore, _within_sql

    store = code_space.store
    if isinstance(store, SqliteSpaceStore):
        where, parameters = _within_sql(ChunkFilter(symbol="Canvas.draw"))
        plan = store._read(f"EXPLAIN QUERY PLAN SELECT id FROM chunks WHERE {where}", parameters)
        assert any("USING INDEX chunks_by_name" in str(row) for row in plan), plan
    else:
        from berth_postgres.knowledge import _within_sql as postgres_within

        where, parameters = postgres_within(ChunkFilter(symbol="Canvas.draw"), 2)
        pool = await store._stores.pool()  # type: ignore[attr-defined]
        space_id = await store._id()  # type: ignore[attr-defined]

        async def explain(connection: Any) -> list[Any]:
            await connection.execute("SET LOCAL enable_seqscan = off")  # a tiny table: can the index serve it?
            sql = f"EXPLAIN SELECT c.id FROM knowledge_chunks c WHERE c.space_id = $1 AND {where}"
            return list(await connection.fetch(sql, space_id, *parameters))

        plan = await pool.in_transaction(explain)
        assert any("knowledge_chunks_by_name" in row[0] for row in plan), plan


def test_windows_and_code_answering_a_plain_question_are_weighed_down() -> None:
    from berth.knowledge.store import ChunkRow

    def row(path: str, kind: str) -> ChunkRow:
        return ChunkRow(1, path, "a", "a", "", 1, 2, kind)

    plain = CodeQuery.parse("how is the area of a polygon computed")
    named = CodeQuery.parse("where is polygon_area defined")
    about_tests = CodeQuery.parse("tests of the polygon area")
    section, definition, window = row("docs/shapes.md", "section"), row("a.py", "definition"), row("a.py", "window")
    assert plain.weight(section) == 1.0
    assert plain.weight(section) > plain.weight(definition) > plain.weight(window)  # prose, then code, then windows
    assert named.weight(definition) == 1.0 > named.weight(window)  # a named identifier asks for code
    assert about_tests.weight(row("tests/test_a.py", "definition")) == 1.0  # tests are code: not weighed as such
    assert plain.weight(row("tests/test_a.py", "window")) < plain.weight(window)  # a test's window: both weights
