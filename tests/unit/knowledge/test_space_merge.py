"""Several knowledge spaces searched together (berth.knowledge.merge, as ``react.search_knowledge`` does): the
spaces' candidates ranked on one scale, so a weak match in one space never outranks a strong one in another
by being that space's first hit, and ties never follow the spaces' names. On both stores."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from berth.bundle.knowledge import KnowledgeSpace, MarkdownFolder
from berth.knowledge.merge import bm25_scores, terms
from berth.knowledge.service import KnowledgeService
from berth.knowledge.space import Candidate, SpaceIndex
from berth.knowledge.store import ChunkRow, SpaceStoreFactory
from berth.runtime.tools.knowledge import search_spaces

LUNCH = (
    "# Lunch menu\n\nMonday: lentil soup and bread. Tuesday: pasta with tomato sauce and a green salad. "
    "Wednesday: the platform team's barbecue in the yard, with grilled vegetables, corn and lemonade. "
    "Thursday: curry with rice; the kitchen closes early because the cooks upgrade the Postgres server "
    "that keeps the canteen's orders. Friday: fish and chips, fruit salad and coffee.\n"
)
BACKUPS = (
    "# Postgres backups\n\nThe Postgres database is backed up every night with pg_basebackup; backups are "
    "kept for 30 days. To restore one of the backups, stop the service and replay the WAL.\n"
)


@pytest.fixture
def space_of(tmp_path: Path, stores: SpaceStoreFactory | None) -> Callable[..., SpaceIndex]:
    """``space_of(name, files)``: a refreshed-later index of a markdown folder of ``files``."""
    service = KnowledgeService(tmp_path / "knowledge", stores=stores)

    def make(name: str, files: dict[str, str]) -> SpaceIndex:
        folder = tmp_path / "src" / name
        folder.mkdir(parents=True)
        for rel, text in files.items():
            (folder / rel).write_text(text, encoding="utf-8")
        return service.open("bundle", KnowledgeSpace(name=name, indexer=MarkdownFolder(folder)))

    return make


@pytest.mark.parametrize("names", [("alpha", "zulu"), ("zulu", "alpha")])
@pytest.mark.parametrize("mode", ["lexical", "hybrid"])
async def test_a_page_about_the_query_outranks_a_passing_mention_in_another_space(
    space_of: Callable[..., SpaceIndex], names: tuple[str, str], mode: str
) -> None:
    lunch = space_of(names[0], {"lunch.md": LUNCH})
    backups = space_of(names[1], {"backups.md": BACKUPS})
    spaces = sorted([lunch, backups], key=lambda space: space.name)
    for space in spaces:
        await space.refresh()
    hits, _ = await search_spaces(spaces, "Postgres backups", limit=5, mode=mode)  # type: ignore[arg-type]
    assert [hit.logical_path for hit in hits] == [
        f"ks:{names[1]}/backups.md#postgres-backups",
        f"ks:{names[0]}/lunch.md#lunch-menu",
    ]
    assert hits[0].score > hits[1].score
    for space in spaces:
        await space.aclose()


@pytest.mark.parametrize("mode", ["lexical", "vector", "hybrid"])
async def test_an_unrelated_space_stays_out_of_the_top_five_when_another_space_answers(
    space_of: Callable[..., SpaceIndex], mode: str
) -> None:
    topics = ["backups", "replication", "vacuum", "indexes", "upgrades", "connections"]
    docs = space_of(
        "docs",
        {f"{topic}.md": f"# Postgres {topic}\n\nHow the Postgres database handles {topic}: configure {topic} in "
         f"postgresql.conf and check the Postgres database log.\n" for topic in topics},
    )  # fmt: skip
    handbook = space_of(
        "handbook",
        {"vacation.md": "# Vacation\n\nEvery employee has 25 days of paid vacation; ask your manager to configure "
         "the calendar.\n", "expenses.md": "# Expenses\n\nSubmit receipts within 30 days.\n"},
    )  # fmt: skip
    for space in (docs, handbook):
        await space.refresh()
    hits, _ = await search_spaces([docs, handbook], "configure the Postgres database", limit=5, mode=mode)  # type: ignore[arg-type]
    assert len(hits) == 5
    assert {hit.space for hit in hits} == {"docs"}, [hit.logical_path for hit in hits]
    for space in (docs, handbook):
        await space.aclose()


def candidate(space: str, chunk_id: int, title: str, text: str) -> Candidate:
    """A candidate chunk of ``space``."""
    return Candidate(space, ChunkRow(chunk_id, f"{chunk_id}.md", "a", title, text, 1, 1, "section"), None)


def test_the_shared_scorer_ignores_which_space_a_chunk_comes_from() -> None:
    a = candidate("alpha", 1, "Lunch", "soup and bread; the postgres server is upgraded")
    b = candidate("zulu", 1, "Postgres backups", "backups of the postgres database")
    assert bm25_scores("postgres backups", [a, b]) == bm25_scores("postgres backups", [b, a])[::-1]
    first, second = bm25_scores("postgres backups", [a, b])
    assert second > first > 0
    assert terms("Backups Cafés running") == ["backup", "cafe", "runn"]
