"""Knowledge storage on real code: index size against its text, lexical query latency and index time, per store.

Run: ``.venv/bin/python bench/knowledge_storage.py`` (a few minutes on two cores; ``--quick`` indexes one small
package — ``yaml`` — in seconds; ``--postgres`` adds the PostgreSQL store of
``berth-postgres`` on a scratch database at 127.0.0.1:5432; ``--packages`` names the installed packages indexed;
``--scale`` measures search at 200k chunks of real code with the ``wordllama`` embedder instead: see
``bench/_knowledge_scale.py``).

The corpus is real text: the ``.py`` files of a few installed packages (default ``pip``, ``pydantic``,
``hypothesis``, ``_pytest``, ``rich``, ``mypy``: about 30k chunks), copied into one folder and indexed by
``SourceTree`` with the ``builtin`` embedder. Printed per store:

* **index ÷ text** — the store's size on disk (SQLite: the database file after its last connection closed;
  PostgreSQL: ``pg_total_relation_size`` of the knowledge tables, indexes and TOAST included) over the bytes of
  the chunks' text. The baseline arm is the text itself (1.0x).
* **lexical p50/p99** — 200 queries of three words each, drawn from random chunks' words (seeded), through
  ``SpaceIndex.search(mode="lexical")``. SQLite is the baseline of PostgreSQL.
* **full index (s)** — the first refresh, listing to commit.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from _machine import header

from berth.bundle.knowledge import KnowledgeSpace, SourceTree
from berth.knowledge.service import KnowledgeService
from berth.knowledge.space import SpaceIndex

DEFAULT_PACKAGES = ("pip", "pydantic", "hypothesis", "_pytest", "rich", "mypy", "setuptools")
_WORD = re.compile(r"[A-Za-z]{4,}")


def copy_packages(packages: Sequence[str], target: Path) -> int:
    """Copy the ``.py`` files of the installed ``packages`` under ``target``; their total bytes."""
    site = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p, packages[0]).is_dir())
    total = 0
    for name in packages:
        shutil.copytree(
            site / name,
            target / name,
            ignore=lambda folder, names: [n for n in names if not n.endswith(".py") and not Path(folder, n).is_dir()],
        )
    for file in target.rglob("*.py"):
        total += file.stat().st_size
    return total


def percentiles(samples: Sequence[float]) -> tuple[float, float]:
    """p50 and p99 (nearest rank), in milliseconds."""
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] * 1000

    return pick(0.50), pick(0.99)


async def queries(index: SpaceIndex, count: int) -> list[str]:
    """``count`` three-word queries drawn from random chunks (seeded)."""
    rng = random.Random(5)
    texts = [text for _, text in await index.store.texts()]
    picked: list[str] = []
    while len(picked) < count:
        words = _WORD.findall(rng.choice(texts))
        if len(words) >= 3:
            picked.append(" ".join(rng.sample(words, 3)))
    return picked


async def measure(index: SpaceIndex, size: Callable[[], Awaitable[int]], count: int) -> dict[str, float]:
    """Index, then size and lexical latency of one store."""
    report = await index.refresh()
    chunk_bytes = sum(len(text.encode()) for _, text in await index.store.texts())
    asked = await queries(index, count)
    await index.search(asked[0], mode="lexical")  # warm
    samples = []
    for query in asked:
        begin = time.perf_counter()
        await index.search(query, limit=5, mode="lexical")
        samples.append(time.perf_counter() - begin)
    p50, p99 = percentiles(samples)
    chunks = (await index.status()).chunks
    await index.aclose()
    stored = await size()
    return {"chunks": chunks, "text": chunk_bytes, "size": stored, "p50": p50, "p99": p99, "index": report.seconds}


async def sqlite_arm(corpus: Path, root: Path, count: int) -> dict[str, float]:
    """The embedded store."""
    service = KnowledgeService(root / "sqlite")
    index = service.open("bench", KnowledgeSpace(name="code", indexer=SourceTree(corpus)))
    database = service.store_path("bench", "code")

    async def size() -> int:
        return sum(p.stat().st_size for p in database.parent.glob(database.name + "*"))

    return await measure(index, size, count)


async def postgres_arm(corpus: Path, root: Path, count: int) -> dict[str, float]:
    """The PostgreSQL store, on a scratch database."""
    import asyncpg  # type: ignore[import-untyped, unused-ignore]
    from berth_postgres.knowledge import PostgresKnowledgeStores
    from berth_postgres.testing import async_scratch_database

    async with async_scratch_database() as dsn:
        stores = PostgresKnowledgeStores(dsn)
        service = KnowledgeService(root / "pg", stores=stores)
        index = service.open("bench", KnowledgeSpace(name="code", indexer=SourceTree(corpus)))

        async def size() -> int:
            connection = await asyncpg.connect(dsn)
            try:
                await connection.execute("VACUUM ANALYZE")
                return int(
                    await connection.fetchval(
                        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE c.relkind = 'r' AND n.nspname = 'public' AND c.relname LIKE 'knowledge%'"
                    )
                )
            finally:
                await connection.close()

        try:
            return await measure(index, size, count)
        finally:
            await stores.aclose()


async def main(arguments: argparse.Namespace) -> None:
    """Index the packages in each store and print the table."""
    with tempfile.TemporaryDirectory(prefix="berth-bench-storage-") as folder:
        root = Path(folder)
        source_bytes = copy_packages(arguments.packages, root / "corpus")
        print(f"corpus: the .py files of {', '.join(arguments.packages)} ({source_bytes / 1e6:.1f} MB)")
        arms = {"sqlite": await sqlite_arm(root / "corpus", root, arguments.queries)}
        if arguments.postgres:
            arms["postgres"] = await postgres_arm(root / "corpus", root, arguments.queries)
    print(f"{'store':<10}{'chunks':>8}{'text MB':>9}{'index MB':>10}{'index÷text':>11}"
          f"{'lexical p50':>13}{'p99 ms':>8}{'full index s':>14}")  # fmt: skip
    print(f"{'(text)':<10}{'':>8}{'':>9}{'':>10}{1.0:>10.2f}x")
    for name, row in arms.items():
        print(
            f"{name:<10}{row['chunks']:>8.0f}{row['text'] / 1e6:>9.1f}{row['size'] / 1e6:>10.1f}"
            f"{row['size'] / row['text']:>10.2f}x{row['p50']:>13.1f}{row['p99']:>8.1f}{row['index']:>14.1f}"
        )
    print(f"ratio sqlite index / text: {arms['sqlite']['size'] / arms['sqlite']['text']:.2f}x")
    if "postgres" in arms:
        print(f"ratio postgres / sqlite lexical p50: {arms['postgres']['p50'] / arms['sqlite']['p50']:.1f}x")


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--postgres", action="store_true", help="also measure the PostgreSQL store")
    parser.add_argument("--packages", nargs="+", default=list(DEFAULT_PACKAGES), help="installed packages to index")
    parser.add_argument("--queries", type=int, default=200, help="lexical queries timed")
    parser.add_argument("--quick", action="store_true", help="one small package, 50 queries: the same work in seconds")
    parser.add_argument(
        "--scale", action="store_true", help="200k chunks of real code, wordllama: latency, first query, embedding"
    )
    parser.add_argument("--keep", type=Path, help="--scale: keep the corpus and index here, reuse them next time")
    parser.add_argument("--runs", type=int, default=3, help="--scale: runs of the query timings")
    parser.add_argument("--embed-sample", type=int, default=4096, help="--scale: chunks embedded per throughput run")
    arguments = parser.parse_args(argv)
    if arguments.quick:
        arguments.packages, arguments.queries = ["yaml"], 50
    return arguments


if __name__ == "__main__":
    print(header(), flush=True)
    options = parse()
    if options.scale:
        import _knowledge_scale as knowledge_scale

        knowledge_scale.main(options.keep, options.runs, options.queries, options.embed_sample)
    else:
        asyncio.run(main(options))
