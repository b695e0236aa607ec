"""Knowledge search at 200k chunks of real code (issue 38): query latency, first query after start, embedding.

A module of ``bench/knowledge_storage.py --scale``, not a script (hence the underscore).

Run: ``.venv/bin/python bench/knowledge_storage.py --scale`` (``--keep DIR`` keeps the corpus and its index in
``DIR`` and reuses them on the next run: indexing takes tens of minutes on two cores; ``--runs N`` repeats the
query timings). Needs ``berth-wordllama``: the default semantic embedder indexes and ranks.

The corpus is the ``.py`` files of the installed packages of :data:`SCALE_PACKAGES` (real code, about 130 MB),
indexed by ``SourceTree`` into one SQLite space. Printed:

* **query latency** — p50 / p99 in ms over the same seeded three-word queries as the storage bench (drawn from
  random chunks' words), per run; the table gives the median over runs with (min-max). Arms, timed one after the
  other for each query: Berth ``lexical``, ``vector`` and ``hybrid`` (``SpaceIndex.search``, limit 5: the whole
  search, rows and passages included); the baselines, a plain SQLite FTS5 table over the same chunk texts (the
  default ``unicode61`` tokenizer, ``ORDER BY rank``: its documented configuration) asked the same OR-ed words
  (lexical), and numpy's brute-force cosine over the same vectors held in RAM, query embedded (vector).
* **first query after start** — a fresh process opening the built index and running one search: the search
  call itself, from the process having imported Berth and the embedder to the first result, and from the
  process's start (the parent's clock: interpreter start and imports included). The page cache is warm (the index
  was just read). Arms: ``lexical``, ``hybrid``, and ``hybrid, warmed`` — ``SpaceIndex.warm()`` (what the host
  starts in the background after start) awaited first, its time shown apart.
* **embedding** — chunks/s of the embedder over a sample of the chunks, embedded as a refresh embeds them.
* **stored term scores** — the common terms' own scores (:mod:`berth.knowledge.term_postings`) stored again, as a
  refresh that changes chunks stores them after committing: the time, the terms, rows and bytes; then each query's
  pruned ranking (``SqliteSpaceStore._pruned``, limit 50) against FTS5's own ``ORDER BY bm25(...) LIMIT 50``: how many
  are the same rows, order and score bits, how many the same rows and order with scores equal to 1e-12 (the
  rare-phrase pruning adds its sums in another order), how many differ (none should).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _embedding_rate import embedding_rates as shared_embedding_rates
from _embedding_rate import refresh_texts

from berth.bundle.knowledge import KnowledgeSpace, SourceTree
from berth.knowledge.fts_topk import STORED
from berth.knowledge.service import KnowledgeService
from berth.knowledge.space import EMBED_BATCH, IndexProgress, SpaceIndex
from berth.knowledge.sqlite_store import SqliteSpaceStore, fts_query

SCALE_PACKAGES = (
    "sympy", "moto", "numpy", "anthropic", "networkx", "pip", "mypy", "pygments", "langsmith", "schemathesis",
    "huggingface_hub", "playwright", "setuptools", "redis", "langchain_core", "mpmath", "pydantic", "hypothesis",
    "mypyc", "pypdf", "langgraph", "graphql", "botocore", "_pytest", "dateparser", "cfnlint", "rich", "mcp", "PIL",
    "pptx", "fastapi", "openpyxl", "fsspec", "websockets", "werkzeug", "docx", "docker", "antlr4", "cryptography",
    "attr", "charset_normalizer", "prometheus_client", "greenlet", "aws_xray_sdk", "requests", "yaml", "joserfc",
    "markdown_it", "pycparser", "httpcore", "starlette", "dateutil", "httpcore2", "uvicorn", "httpx",
    "pydantic_settings", "lxml", "boto3", "jsonpath_ng", "s3transfer", "idna", "flask", "cffi", "jsonschema",
    "trafilatura", "mcp_types", "asyncpg", "httpx2", "urllib3", "click", "babel", "pyparsing", "packaging", "jinja2",
    "anyio", "filelock", "langchain", "langgraph_sdk", "xlsxwriter",
)  # fmt: skip
"""Installed packages whose ``.py`` files make the corpus (botocore's data is JSON: only its code counts)."""
FIRST_QUERY = """
import time
import asyncio, json, sys
from pathlib import Path
from berth.bundle.knowledge import KnowledgeSpace, SourceTree
from berth.knowledge.service import KnowledgeService
from berth_wordllama.embedder import WordLlamaEmbedder
imported = time.perf_counter()
service = KnowledgeService(Path({root!r}), WordLlamaEmbedder(), embedder_name="wordllama")
index = service.open("bench", KnowledgeSpace(name="code", indexer=SourceTree(Path({corpus!r}))))


async def first() -> tuple[float, float, int]:
    warmed = time.perf_counter()
    if {warm!r}:
        await index.warm()  # what the host starts in the background right after start
    asked = time.perf_counter()
    hits = await index.search({query!r}, limit=5, mode={mode!r})
    return asked - warmed, time.perf_counter() - asked, len(hits)


warm_s, search_s, hits = asyncio.run(first())
answered = time.perf_counter()
print(json.dumps({{"after_imports": answered - imported, "search": search_s, "warm": warm_s, "at": time.time(),
                  "hits": hits, "state": index.warm_state}}))
"""
FIRST_QUERY_ARMS = {"lexical": ("lexical", False), "hybrid": ("hybrid", False), "hybrid, warmed": ("hybrid", True)}
"""The first-query arms: (mode, whether the index is warmed up — as the host does after start — before it)."""


def percentiles(samples: Sequence[float]) -> tuple[float, float]:
    """p50 and p99 (nearest rank), in milliseconds."""
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] * 1000

    return pick(0.50), pick(0.99)


def spread(values: Sequence[float]) -> str:
    """``median (min-max)``."""
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


class Peers:
    """The baselines: plain FTS5 over the chunk texts, and numpy brute force over the vectors in RAM."""

    def __init__(self, database: Path, peer_path: Path, embedder: Any) -> None:
        import numpy as np

        source = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
        rows = source.execute("SELECT id, text, vector FROM chunks ORDER BY id").fetchall()
        source.close()
        self.embedder = embedder
        with_vectors = [(i, v) for i, _, v in rows if v is not None]
        self.ids = np.fromiter((i for i, _ in with_vectors), dtype=np.int64, count=len(with_vectors))
        self.matrix = (
            np.frombuffer(b"".join(v for _, v in with_vectors), dtype=np.float32).reshape(len(with_vectors), -1).copy()
        )
        fresh = not peer_path.exists()
        self.fts = sqlite3.connect(peer_path)
        if fresh:
            self.fts.execute("CREATE VIRTUAL TABLE docs USING fts5(body)")
            self.fts.executemany("INSERT INTO docs (rowid, body) VALUES (?, ?)", [(i, t) for i, t, _ in rows])
            self.fts.commit()

    def lexical(self, query: str, limit: int = 5) -> list[int]:
        """Plain FTS5 BM25 over the same words Berth asks for."""
        expression = fts_query(query)
        sql = "SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT ?"
        return [row[0] for row in self.fts.execute(sql, (expression, limit))] if expression else []

    def vector(self, query: str, limit: int = 5) -> list[int]:
        """Brute-force cosine: the query embedded, one product over every row, the top picked."""
        import numpy as np

        (vector,) = self.embedder.encode([query])
        scores = self.matrix @ vector
        top = np.argpartition(-scores, limit - 1)[:limit]
        return [int(self.ids[i]) for i in top[np.argsort(-scores[top])]]


async def build(root: Path, corpus: Path, embedder: Any) -> tuple[SpaceIndex, dict[str, float]]:
    """Index (or bring up to date) the corpus; what the refresh did, with its embedding rate when it embedded."""
    service = KnowledgeService(root / "sqlite", embedder, embedder_name="wordllama")
    index = service.open("bench", KnowledgeSpace(name="code", indexer=SourceTree(corpus)))
    phases: dict[str, float] = {}

    def progress(step: IndexProgress) -> None:
        phases.setdefault(step.phase, time.perf_counter())
        phases["chunks_total"] = step.chunks_total or phases.get("chunks_total", 0)

    report = await index.refresh(progress=progress)
    done = {"seconds": report.seconds, "chunks_written": report.chunks_written}
    if "embedding" in phases and "writing" in phases:
        done["embedding_rate"] = phases["chunks_total"] / (phases["writing"] - phases["embedding"])
        done["writing_s"] = report.seconds - (phases["writing"] - phases["listing"])
    return index, done


FULL_LEXICAL = (
    "SELECT rowid, -bm25(chunks_fts, 3.0, 2.0, 1.0) FROM chunks_fts WHERE chunks_fts MATCH ? "
    "ORDER BY bm25(chunks_fts, 3.0, 2.0, 1.0) LIMIT ?"
)
"""The store's unpruned lexical query: FTS5 scores every matching row."""


def term_scores(database: Path, asked: Sequence[str], limit: int = 50) -> None:
    """Store the common terms' scores again, timed (a refresh's cost), then check every pruned ranking."""
    store = SqliteSpaceStore(database)
    ((version,),) = store._read("SELECT value FROM meta WHERE key = 'version'")
    began = time.perf_counter()
    terms, rows = store.save_term_scores(int(version))
    took = time.perf_counter() - began
    ((size,),) = store._read("SELECT sum(length(ids) + length(scores)) FROM chunks_fts_postings")
    print(f"\nstored term scores: {terms} terms in over {STORED:,} chunks, {rows:,} rows, {(size or 0) / 1e6:.0f} MB; "
          f"stored in {took:.1f} s (each refresh that changes chunks, after its commit)")  # fmt: skip
    same = close = differ = 0
    for query in asked:
        answer = store._pruned(query, limit)
        if answer is None:
            continue
        full = [(int(rowid), float(score)) for rowid, score in store._read(FULL_LEXICAL, (fts_query(query), limit))]
        if answer == full:
            same += 1
        elif [r for r, _ in answer] == [r for r, _ in full] and all(
            abs(a - b) <= 1e-12 * abs(b) for (_, a), (_, b) in zip(answer, full, strict=True)
        ):
            close += 1
        else:
            differ += 1
    store.close()
    print(f"pruned rankings (limit {limit}) against FTS5's own: {same + close + differ} of {len(asked)} pruned; "
          f"{same} the same rows, order and score bits; {close} the same rows and order, scores to 1e-12; "
          f"{differ} differ")  # fmt: skip


def embedding_rates(database: Path, embedder: Any, sample: int, runs: int) -> list[float]:
    """Chunks/s of ``embedder.embed`` over ``sample`` chunks (evenly spaced ids), as a refresh embeds them."""
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    rows = connection.execute("SELECT title, text FROM chunks ORDER BY id").fetchall()
    connection.close()
    return shared_embedding_rates(embedder, refresh_texts(rows, sample), runs)


async def direct(search: Any, query: str) -> list[int]:
    """A peer's search, called in this thread (the peers take no thread hop: their figures are the floor)."""
    return list(search(query))


async def latency(
    index: SpaceIndex, peers: Peers, asked: Sequence[str], runs: int
) -> dict[str, list[tuple[float, float]]]:
    """p50/p99 of each arm per run, the arms timed one after the other for each query."""
    arms: dict[str, Any] = {
        "berth lexical": lambda q: index.search(q, limit=5, mode="lexical"),
        "fts5 bm25 (peer)": lambda q: direct(peers.lexical, q),
        "berth vector": lambda q: index.search(q, limit=5, mode="vector"),
        "numpy brute force (peer)": lambda q: direct(peers.vector, q),
        "berth hybrid": lambda q: index.search(q, limit=5, mode="hybrid"),
    }
    for arm in arms.values():  # warm: the first search maps the vectors and loads the embedder
        await arm(asked[0])
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
    for _ in range(runs):
        samples: dict[str, list[float]] = {name: [] for name in arms}
        for query in asked:
            for name, arm in arms.items():
                began = time.perf_counter()
                await arm(query)
                samples[name].append(time.perf_counter() - began)
        for name, taken in samples.items():
            results[name].append(percentiles(taken))
    return results


def first_queries(root: Path, corpus: Path, asked: Sequence[str], runs: int) -> dict[str, list[dict[str, float]]]:
    """Each arm's first search in ``runs`` fresh processes (a different query each run, the same for every arm)."""
    found: dict[str, list[dict[str, float]]] = {arm: [] for arm in FIRST_QUERY_ARMS}
    for run in range(runs):
        for arm, (mode, warm) in FIRST_QUERY_ARMS.items():
            script = textwrap.dedent(FIRST_QUERY).format(
                root=str(root / "sqlite"), corpus=str(corpus), query=asked[-1 - run], mode=mode, warm=warm
            )
            started = time.time()
            done = subprocess.run(
                [sys.executable, "-c", script], env=os.environ.copy(), capture_output=True, text=True, check=True
            )
            line = json.loads(done.stdout.strip().splitlines()[-1])
            found[arm].append(
                {"after_imports": line["after_imports"], "search": line["search"], "warm": line["warm"],
                 "from_start": line["at"] - started}
            )  # fmt: skip
    return found


def print_first_queries(first: dict[str, list[dict[str, float]]], runs: int) -> None:
    """The first-query table."""
    print(f"\nfirst query after start (fresh process, warm page cache, {runs} runs): median (min-max), ms")
    print(f"{'arm':<16}{'first search':>24}{'warm-up before it':>24}{'after imports':>24}{'from process start':>24}")
    for arm, taken in first.items():
        cells = [spread([t[key] * 1000 for t in taken]) for key in ("search", "warm", "after_imports", "from_start")]
        print(f"{arm:<16}" + "".join(f"{cell:>24}" for cell in cells))
    cold, warmed = (statistics.median(t["search"] for t in first[arm]) for arm in ("hybrid", "hybrid, warmed"))
    print(f"ratio first hybrid search warmed / cold: {warmed / cold:.2f}x")


async def run_scale(root: Path, runs: int, count: int, embed_sample: int) -> None:
    """Build (or reuse) the corpus and index under ``root``, then measure and print every table."""
    from knowledge_storage import copy_packages, queries

    from berth_wordllama.embedder import WordLlamaEmbedder

    corpus = root / "corpus"
    if not corpus.is_dir():
        source_bytes = copy_packages(SCALE_PACKAGES, corpus)
        print(f"corpus: copied {source_bytes / 1e6:.1f} MB of .py files", flush=True)
    embedder = WordLlamaEmbedder()
    index, built = await build(root, corpus, embedder)
    status = await index.status()
    database = root / "sqlite" / "spaces" / "bench" / "code.sqlite3"
    files = sum(status.files.values())
    print(f"corpus: the .py files of {len(SCALE_PACKAGES)} installed packages: {', '.join(SCALE_PACKAGES)}")
    print(f"index: {files} files, {status.chunks} chunks, {database.stat().st_size / 1e6:.0f} MB SQLite "
          f"(+{sum(p.stat().st_size for p in database.with_suffix('.vectors').glob('*')) / 1e6:.0f} MB vector "
          f"files); this refresh {built['seconds']:.1f} s, {built['chunks_written']:.0f} chunks written")  # fmt: skip
    if "embedding_rate" in built:
        print(f"refresh embedding phase: {built['embedding_rate']:.0f} chunks/s")
    rates = await asyncio.to_thread(embedding_rates, database, embedder, embed_sample, 3)
    print(f"embedding (wordllama, {embed_sample} chunks, batches of {EMBED_BATCH}, 3 runs): "
          f"{spread(rates)} chunks/s", flush=True)  # fmt: skip
    asked = await queries(index, count)
    await asyncio.to_thread(term_scores, database, asked)
    peers = Peers(database, root / "peer-fts5.sqlite3", embedder)
    results = await latency(index, peers, asked, runs)
    await index.aclose()
    print(f"\nquery latency, {status.chunks} chunks, {count} queries, {runs} runs: median over runs (min-max), ms")
    print(f"{'arm':<28}{'p50':>26}{'p99':>26}")
    for name, per_run in results.items():
        print(f"{name:<28}{spread([p for p, _ in per_run]):>26}{spread([p for _, p in per_run]):>26}")

    def ratio(arm: str, peer: str, at: int) -> float:
        return statistics.median(x[at] for x in results[arm]) / statistics.median(x[at] for x in results[peer])

    print(f"ratio berth lexical / fts5 peer: p50 {ratio('berth lexical', 'fts5 bm25 (peer)', 0):.2f}x, "
          f"p99 {ratio('berth lexical', 'fts5 bm25 (peer)', 1):.2f}x")  # fmt: skip
    print(f"ratio berth vector / numpy peer: p50 {ratio('berth vector', 'numpy brute force (peer)', 0):.2f}x, "
          f"p99 {ratio('berth vector', 'numpy brute force (peer)', 1):.2f}x")  # fmt: skip
    print_first_queries(first_queries(root, corpus, asked, runs), runs)


def main(keep: Path | None, runs: int, count: int, embed_sample: int) -> None:
    """``--scale`` of ``bench/knowledge_storage.py``: in ``keep`` (reused), else a temporary folder."""
    random.seed(5)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        asyncio.run(run_scale(keep, runs, count, embed_sample))
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="berth-bench-scale-") as folder:
        asyncio.run(run_scale(Path(folder), runs, count, embed_sample))
