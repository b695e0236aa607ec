"""Refreshing a knowledge space whose files share duplicate chunks (issue 38): what a small change re-embeds.

Run: ``.venv/bin/python bench/knowledge_refresh.py [--runs N] [--quick]`` (``--quick``: ``idna``, ``certifi`` and
``packaging`` only, one run). Needs ``berth-wordllama`` (the semantic embedder; without it the script prints
``skipped:`` and exits 0).

The corpus is the ``.py`` files of a few installed packages and pip's vendored copies of the same packages
(``requests``, ``packaging``, ``idna``, ``certifi``, ``urllib3``, ``rich``: two versions of each, so many chunks
are duplicates across files — as in a monorepo with vendored code). Each run indexes it into a fresh SQLite space,
then changes it the way a working tree changes — one existing file edited (``idna/intranges.py``, no duplicate
touched) and a new module added — and refreshes. Arms, alternating in one process:

* **berth** — this version: only the changed files, and the files whose de-duplication outcome they can change,
  are chunked and embedded again (:func:`berth.knowledge.space.affected_by`).
* **every deduped file (baseline)** — the rule before: every file that had a duplicate dropped is chunked and
  embedded again on any change (``affected_by`` replaced by that rule for the arm).

Printed: chunks embedded by the refresh, files re-indexed and refresh seconds, median (min-max) over runs, and the
ratio of the arms' medians; and whether each arm's index equals a full rebuild's (chunk texts per file).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import site
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import berth.knowledge.space as space_module
from berth.bundle.knowledge import KnowledgeSpace, SourceTree
from berth.knowledge.service import KnowledgeService
from berth.knowledge.space import SpaceIndex

PACKAGES = ("requests", "packaging", "idna", "certifi", "urllib3", "rich")
QUICK_PACKAGES = ("packaging", "idna", "certifi")
NEW_MODULE = '''"""A module the change adds."""


def retry_budget(attempts: int, base_s: float = 0.5) -> float:
    """The total wait of ``attempts`` retries with exponential back-off from ``base_s``."""
    return sum(base_s * 2**n for n in range(attempts))
'''


class CountingEmbedder:
    """Wraps an embedder, counting the texts it embeds."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.semantic = True
        self.embedded = 0

    @property
    def dimensions(self) -> int:
        """The inner embedder's dimensions."""
        return int(self.inner.dimensions)

    async def embed(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Count, then embed."""
        self.embedded += len(texts)
        return list(await self.inner.embed(texts))

    async def embed_query(self, query: str) -> tuple[float, ...]:
        """Embed a query."""
        return tuple(await self.inner.embed_query(query))


def copy_corpus(target: Path, packages: Sequence[str]) -> int:
    """The packages' and pip's vendored copies' ``.py`` files under ``target``; the number of files."""
    root = Path(site.getsitepackages()[0])
    count = 0
    for package in packages:
        for source, name in ((root / package, package), (root / "pip" / "_vendor" / package, f"vendor/{package}")):
            for file in sorted(source.rglob("*.py")):
                destination = target / name / file.relative_to(source)
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(file, destination)
                count += 1
    return count


def every_deduped_file(changing: set[str], keys: Any, new_keys: Any, dropped: dict[str, list[str] | None]) -> set[str]:
    """The baseline rule: every file outside ``changing`` that had a duplicate dropped."""
    return {path for path in dropped if path not in changing}


async def texts_by_file(index: SpaceIndex) -> dict[str, list[str]]:
    """Every file's chunk texts (what a comparison with a full rebuild looks at)."""
    return {path: [row.text for row in await index.store.chunks_of(path)] for path in await index.store.files()}


async def one_run(scratch: Path, corpus: Path, embedder: CountingEmbedder, arm: str) -> dict[str, float]:
    """Index a fresh copy of ``corpus``, change it, refresh; what the refresh did (and equality with a rebuild)."""
    folder = scratch / f"corpus-{arm}"
    shutil.copytree(corpus, folder)
    service = KnowledgeService(scratch / f"index-{arm}", embedder, embedder_name="wordllama")
    space = KnowledgeSpace(name="code", indexer=SourceTree(folder))
    index = service.open("bench", space)
    built = await index.refresh()
    edited = folder / "idna" / "intranges.py"
    edited.write_text(edited.read_text() + "\n\ndef bench_marker() -> str:\n    return 'edited'\n")
    (folder / "idna" / "retry_budget.py").write_text(NEW_MODULE)
    embedder.embedded = 0
    original = space_module.affected_by
    if arm != "berth":
        space_module.affected_by = every_deduped_file
    try:
        started = time.perf_counter()
        report = await index.refresh()
        seconds = time.perf_counter() - started
    finally:
        space_module.affected_by = original
    embedded = embedder.embedded
    rebuilt = KnowledgeService(scratch / f"rebuilt-{arm}", embedder, embedder_name="wordllama").open("bench", space)
    await rebuilt.refresh()
    equal = await texts_by_file(index) == await texts_by_file(rebuilt)
    status = await index.status()
    for opened in (index, rebuilt):
        await opened.aclose()
    shutil.rmtree(folder)
    for name in (f"index-{arm}", f"rebuilt-{arm}"):
        shutil.rmtree(scratch / name)
    return {
        "embedded": embedded,
        "files": report.changed,
        "seconds": seconds,
        "equal": float(equal),
        "chunks": status.chunks,
        "duplicates": status.duplicates,
        "build_chunks": built.chunks_written,
    }


def spread(values: Sequence[float], digits: int = 0) -> str:
    """``median (min-max)``."""
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


async def main(runs: int, packages: Sequence[str]) -> None:
    """Both arms, alternating, ``runs`` times each; print the table."""
    try:
        from berth_wordllama.embedder import WordLlamaEmbedder
    except ImportError:
        print("skipped: berth-wordllama (the semantic embedder) is not installed")
        return

    embedder = CountingEmbedder(WordLlamaEmbedder())
    arms = ("berth", "every deduped file (baseline)")
    results: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory(prefix="berth-bench-refresh-") as scratch_name:
        scratch = Path(scratch_name)
        files = copy_corpus(scratch / "corpus", packages)
        for _ in range(runs):
            for arm in arms:
                results[arm].append(await one_run(scratch, scratch / "corpus", embedder, arm))
    first = results["berth"][0]
    print(f"corpus: {files} .py files of {', '.join(packages)} and pip's vendored copies; "
          f"{first['chunks']:.0f} chunks after the change, {first['duplicates']:.0f} duplicates dropped")  # fmt: skip
    print("change: idna/intranges.py edited (no duplicate in it), idna/retry_budget.py added")
    print(f"\nrefresh after the change, {runs} runs: median (min-max)")
    print(f"{'arm':<34}{'chunks embedded':>20}{'files re-indexed':>20}{'seconds':>22}{'= rebuild':>11}")
    for arm, taken in results.items():
        print(f"{arm:<34}{spread([t['embedded'] for t in taken]):>20}{spread([t['files'] for t in taken]):>20}"
              f"{spread([t['seconds'] for t in taken], 3):>22}{all(t['equal'] for t in taken)!s:>11}")  # fmt: skip

    def median(arm: str, key: str) -> float:
        return statistics.median(t[key] for t in results[arm])

    baseline = arms[1]
    print(f"ratio berth / baseline: chunks embedded {median('berth', 'embedded') / median(baseline, 'embedded'):.3f}x, "
          f"seconds {median('berth', 'seconds') / median(baseline, 'seconds'):.2f}x")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="three small packages, one run")
    arguments = parser.parse_args()
    asyncio.run(main(1 if arguments.quick else arguments.runs, QUICK_PACKAGES if arguments.quick else PACKAGES))
    sys.exit(0)
