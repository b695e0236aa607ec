"""HTML page chrome is not indexed and a space keeps one copy of each chunk text (berth.knowledge.text.chunk_html,
berth.knowledge.space): the fixture is three pages of an mdBook (``tests/data/mdbook``: its "Keyboard shortcuts"
popup, sidebar, menu bar with theme list, search box and page navigation around each chapter), whose chapters
end in the same "License" section. On both stores."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from berth.bundle.knowledge import KnowledgeSpace
from berth.knowledge.indexers import DocumentFolder
from berth.knowledge.service import KnowledgeService
from berth.knowledge.space import SpaceIndex
from berth.knowledge.store import SpaceStoreFactory
from berth.knowledge.text import _CHROME_NAMES, chunk_html

MDBOOK = Path(__file__).resolve().parents[2] / "data" / "mdbook"
CHROME = ("Keyboard shortcuts", "Press Esc", "Coal", "Navy", "Skip to main content", "Search this book",
          "The Rust Programming Language", "Next chapter")  # fmt: skip


@pytest.fixture
async def book(tmp_path: Path, stores: SpaceStoreFactory | None) -> AsyncIterator[tuple[Path, SpaceIndex]]:
    """A copy of the mdBook fixture and its (not yet refreshed) space."""
    folder = tmp_path / "book"
    shutil.copytree(MDBOOK, folder)
    service = KnowledgeService(tmp_path / "knowledge", stores=stores)
    index = service.open("bundle", KnowledgeSpace(name="book", indexer=DocumentFolder(folder)))
    yield folder, index
    await index.aclose()


def test_an_mdbook_page_is_chunked_without_its_chrome() -> None:
    page = MDBOOK / "ch03-ownership.html"
    chunks = chunk_html(page.name, page.read_text(encoding="utf-8"))
    assert [chunk.anchor for chunk in chunks] == ["understanding-ownership", "the-borrow-checker", "license"]
    text = "\n".join(chunk.title + "\n" + chunk.text for chunk in chunks)
    assert [words for words in CHROME if words in text] == []
    assert "the borrow checker rejects dangling references" in text


async def test_a_space_keeps_one_copy_of_a_repeated_chunk_and_counts_the_rest(
    book: tuple[Path, SpaceIndex],
) -> None:
    folder, index = book
    await index.refresh()
    status = await index.status()
    assert (status.chunks, status.duplicates) == (7, 2)  # 3 pages x 3 sections, two License copies dropped
    hits = await index.search("dual-licensed MIT Apache License", limit=5)
    assert [hit.logical_path for hit in hits if hit.chunk.anchor == "license"] == [
        "ks:book/ch01-getting-started.html#license"
    ]
    assert await index.search("keyboard shortcuts press Esc to hide this help", limit=5, mode="lexical") == []

    # the page that held the kept copy goes: the next page's copy is indexed in its place
    (folder / "ch01-getting-started.html").unlink()
    await index.refresh()
    status = await index.status()
    assert (status.chunks, status.duplicates) == (5, 1)
    hits = await index.search("dual-licensed MIT Apache License", limit=5)
    assert [hit.logical_path for hit in hits if hit.chunk.anchor == "license"] == [
        "ks:book/ch02-guessing-game.html#license"
    ]


NAMES = st.text(alphabet="abcdehilmnoprstuvwxyz-_", min_size=1, max_size=20)


@given(NAMES, NAMES, st.sampled_from(["div", "section", "ul", "span", "form"]))
def test_content_is_kept_unless_its_container_is_named_as_chrome(name: str, ident: str, tag: str) -> None:
    page = (
        f'<html class="sidebar-visible"><body><main><{tag} class="{name}" id="{ident}"><p>Paragraph of content'
        f"</p></{tag}><h2>Next</h2><p>More.</p></main></body></html>"
    )
    text = " ".join(chunk.text for chunk in chunk_html("page.html", page))
    named_chrome = tag != "section" and any(_CHROME_NAMES.search(n.lower()) for n in (name, ident))
    assert ("Paragraph of content" in text) is (not named_chrome or name == "section")
    assert "More." in text


@given(NAMES, st.sampled_from(["popup", "help-popup", "sidebar", "menu-bar", "search-wrapper", "navbar-inner"]))
def test_a_container_named_as_chrome_is_dropped(prefix: str, chrome: str) -> None:
    page = f'<html><body><div id="{prefix}-{chrome}"><p>Press Esc</p></div><p>Real text.</p></body></html>'
    text = " ".join(chunk.text for chunk in chunk_html("page.html", page))
    assert "Press Esc" not in text and "Real text." in text
