"""De-duplication across files under incremental refresh (issue 38): a refresh chunks and embeds again only the
changed files and the files whose de-duplication outcome they can change, and the index it leaves is the one a
full rebuild of the same files makes (the same chunks in the same files, the same duplicates dropped)."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from berth.bundle.knowledge import KnowledgeSpace, MarkdownFolder
from berth.knowledge.service import KnowledgeService
from berth.knowledge.space import SpaceIndex, affected_by
from berth.knowledge.store import SpaceStoreFactory
from berth.runtime.memory import HashedNgramEmbedder

SECTIONS = (
    "## License\n\nPermission is hereby granted, free of charge, to any person obtaining a copy.\n",
    "## Install\n\nRun pip install berth and start the host with berth up.\n",
    "## Support\n\nWrite to the support desk; answers come within one working day.\n",
    "## Changelog\n\nVersion 2 drops the old configuration keys.\n",
)
"""Sections shared between files (and repeated inside one): the duplicates."""
PATHS = ("a.md", "b/x.md", "b/y.md", "c.md", "d.md")


class CountingEmbedder(HashedNgramEmbedder):
    """Hashed n-grams taken for a semantic model (its vectors are stored), counting the texts it embeds."""

    semantic = True

    def __init__(self) -> None:
        super().__init__(dimensions=32)
        self.embedded: list[str] = []

    async def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Count, then embed."""
        self.embedded.extend(texts)
        return await super().embed(texts)


def document(name: str, sections: Sequence[int]) -> str:
    """A markdown file of its own section and the shared ``sections`` (indexes into SECTIONS)."""
    own = f"# {name}\n\nWhat {name} alone says.\n\n"
    return own + "\n".join(SECTIONS[i] for i in sections)


class Folder:
    """A folder of markdown files whose every write gets a new modification time (a new stat key)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = 1_000_000_000

    def write(self, path: str, text: str) -> None:
        """Write one file."""
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        self.clock += 1_000_000_000
        os.utime(target, ns=(self.clock, self.clock))

    def remove(self, path: str) -> None:
        """Delete one file."""
        (self.root / path).unlink()


def open_space(
    root: Path, folder: Path, embedder: HashedNgramEmbedder | None = None, stores: SpaceStoreFactory | None = None
) -> SpaceIndex:
    """The index of one space over ``folder`` (its store under ``root``)."""
    service = KnowledgeService(root, embedder, embedder_name="small" if embedder else "builtin", stores=stores)
    return service.open("bundle", KnowledgeSpace(name="docs", indexer=MarkdownFolder(folder)))


async def snapshot(index: SpaceIndex) -> tuple[dict[str, object], int]:
    """Every file's record and chunks (anchor, title, text), and the number of duplicates dropped."""
    files: dict[str, object] = {}
    for path, record in sorted((await index.store.files()).items()):
        chunks = [(row.anchor, row.title, row.text) for row in await index.store.chunks_of(path)]
        files[path] = (record.status, record.chunks, chunks)
    return files, (await index.status()).duplicates


operations = st.lists(
    st.tuples(
        st.sampled_from(PATHS),
        st.one_of(st.none(), st.lists(st.integers(0, len(SECTIONS) - 1), max_size=4)),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=30, deadline=None)
@given(start=st.dictionaries(st.sampled_from(PATHS), st.lists(st.integers(0, 3), max_size=4)), steps=operations)
def test_any_sequence_of_changes_leaves_the_index_a_full_rebuild_makes(
    start: dict[str, list[int]], steps: list[tuple[str, list[int] | None]]
) -> None:
    """Each step writes a file (its shared sections) or removes it (None); after each incremental refresh the
    index equals a fresh index of the same folder."""

    async def run(root: Path) -> None:
        folder = Folder(root / "docs")
        folder.root.mkdir()
        for path, shared in start.items():
            folder.write(path, document(path, shared))
        index = open_space(root / "incremental", folder.root)
        await index.refresh()
        for number, (path, sections) in enumerate(steps):
            if sections is None:
                if (folder.root / path).exists():
                    folder.remove(path)
            else:
                folder.write(path, document(f"{path} {number}", sections))
            await index.refresh()
            rebuilt = open_space(root / f"rebuilt-{number}", folder.root)
            await rebuilt.refresh()
            assert await snapshot(index) == await snapshot(rebuilt)
            await rebuilt.aclose()
        await index.aclose()

    with tempfile.TemporaryDirectory() as scratch:
        asyncio.run(run(Path(scratch)))


async def test_a_change_that_touches_no_duplicate_embeds_only_that_file(
    tmp_path: Path, stores: SpaceStoreFactory | None
) -> None:
    folder = Folder(tmp_path / "docs")
    for path, sections in {"a.md": [0, 1], "b/x.md": [0, 2], "b/y.md": [1, 2, 0], "c.md": [3], "d.md": []}.items():
        folder.write(path, document(path, sections))
    embedder = CountingEmbedder()
    index = open_space(tmp_path / "knowledge", folder.root, embedder, stores)
    await index.refresh()
    assert (await index.status()).duplicates == 4  # b/x.md: License; b/y.md: Install, Support, License
    embedder.embedded.clear()
    folder.write("d.md", document("d.md", []) + "\n## Roadmap\n\nVersion 3 adds spaces per team.\n")
    report = await index.refresh()
    assert (report.changed, report.chunks_written) == (1, 2)
    assert [text.split("\n")[0] for text in embedder.embedded] == ["d.md", "d.md > Roadmap"]  # titles
    await index.aclose()


async def test_a_change_to_a_kept_copy_re_embeds_only_the_files_that_deferred_to_it(
    tmp_path: Path, stores: SpaceStoreFactory | None
) -> None:
    folder = Folder(tmp_path / "docs")
    for path, sections in {"a.md": [0, 3], "b/x.md": [0], "b/y.md": [3], "c.md": [1], "d.md": [1]}.items():
        folder.write(path, document(path, sections))
    embedder = CountingEmbedder()
    index = open_space(tmp_path / "knowledge", folder.root, embedder, stores)
    await index.refresh()
    embedder.embedded.clear()
    folder.write("a.md", document("a.md", [3]))  # the License copy b/x.md deferred to goes
    report = await index.refresh()
    # a.md, and b/x.md (now keeps License); not b/y.md (Changelog stays in a.md), nor c.md or d.md
    assert sorted({text.split("\n")[0].split(" > ")[0].split(" ")[0] for text in embedder.embedded}) == [
        "a.md",
        "b/x.md",
    ]
    assert report.changed == 2
    folder.write("b/x.md", document("b/x.md", [1]))  # Install now first in b/x.md: c.md's copy is dropped
    embedder.embedded.clear()
    await index.refresh()
    assert {row.path for row in await index.read("c.md")} == {"c.md"}
    assert len(await index.read("c.md")) == 1
    await index.aclose()


def test_a_file_whose_dropped_chunks_were_not_recorded_is_chunked_again_once_anything_changes() -> None:
    stored = [("a.md", "1" * 64), ("b.md", "2" * 64)]
    changed = [("b.md", "3" * 64)]
    dropped: dict[str, list[str] | None] = {"c.md": None, "d.md": ["9" * 16], "e.md": ["2" * 16]}
    # c.md: keys unknown (an index written before they were recorded); d.md: its copy is in no changing file;
    # e.md: its copy was in b.md, which no longer has it
    assert affected_by({"b.md"}, stored, changed, dropped) == {"c.md", "e.md"}
