"""What a knowledge space lists and what it leaves out (berth.knowledge.sources.FileTree): build output only at
the space's root (``doc/build/`` is kept), and every excluded folder with its file count, and every other reason
with its count, reported — in the listing and in the space's status."""

from __future__ import annotations

from pathlib import Path

from berth.bundle.knowledge import KnowledgeSpace, SourceTree
from berth.knowledge.indexers import DocumentFolder
from berth.knowledge.service import KnowledgeService
from berth.knowledge.sources import Exclusion, FileTree


def write(folder: Path, files: dict[str, str]) -> None:
    """Write ``files`` (path → text) under ``folder``."""
    for rel, text in files.items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


TREE = {
    "README.md": "# Project\n",
    "doc/build/index.md": "# The docs' sources\n",
    "doc/build/orm/session.md": "# Session\n",
    "doc/dist/notes.md": "# Notes\n",
    "build/out.md": "# generated\n",
    "build/lib/more.md": "# generated\n",
    "dist/pkg.md": "# generated\n",
    "web/node_modules/a/x.md": "# vendored\n",
    ".cache/y.md": "# hidden\n",
    ".hidden.txt": "hidden file\n",
    "image.png": "not a document",
    "skip-me.md": "# Skipped\n",
}


def test_build_and_dist_are_left_out_only_at_the_root_and_every_exclusion_is_counted(tmp_path: Path) -> None:
    write(tmp_path, TREE)
    files, excluded = FileTree(tmp_path, ("*.md",), ("skip-*",)).listing()
    assert [f.path for f in files] == [
        "README.md",
        "doc/build/index.md",
        "doc/build/orm/session.md",
        "doc/dist/notes.md",
    ]
    assert excluded == [
        Exclusion(".cache/", "hidden folder", 1),
        Exclusion("build/", "build output at the space root", 2),
        Exclusion("dist/", "build output at the space root", 1),
        Exclusion("web/node_modules/", "excluded folder", 1),
        Exclusion("*", "matched by exclude", 1),
        Exclusion("*", "not matched by include", 2),
    ]


async def test_a_space_status_reports_what_its_listing_left_out(tmp_path: Path) -> None:
    write(tmp_path / "src", TREE)
    service = KnowledgeService(tmp_path / "knowledge")
    index = service.open("bundle", KnowledgeSpace(name="docs", indexer=DocumentFolder(tmp_path / "src")))
    await index.refresh()
    status = await index.status()
    assert status.files == {"indexed": 6}  # README, doc/build (2), doc/dist, skip-me and .hidden.txt
    assert ("build/", "build output at the space root", 2) in status.excluded
    assert ("web/node_modules/", "excluded folder", 1) in status.excluded
    assert ("*", "not matched by include", 1) in status.excluded  # image.png
    # a new file in an excluded folder changes no chunk, but the status counts it
    write(tmp_path / "src", {"build/third.md": "# generated\n"})
    await index.refresh()
    assert ("build/", "build output at the space root", 3) in (await index.status()).excluded
    await index.aclose()


async def test_a_source_tree_keeps_doc_build(tmp_path: Path) -> None:
    write(tmp_path / "src", {"doc/build/changelog.md": "# Changelog\n\nSession.merge now copies state.\n"})
    service = KnowledgeService(tmp_path / "knowledge")
    index = service.open("bundle", KnowledgeSpace(name="code", indexer=SourceTree(tmp_path / "src")))
    await index.refresh()
    hits = await index.search("Session merge copies state", limit=1)
    assert hits and hits[0].chunk.path == "doc/build/changelog.md"
    await index.aclose()
