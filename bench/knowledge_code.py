"""Knowledge spaces over real code: at which rank a query naming an identifier finds its definition.

Run: ``.venv/bin/python bench/knowledge_code.py`` (about a minute on two cores; ``--postgres`` also runs it on
the PostgreSQL store of ``berth-postgres``, on a scratch database at 127.0.0.1:5432; ``--quick``: the pydantic
space and its queries only, a few seconds).

Two ``SourceTree`` spaces over installed packages, each with its own tests: ``pydantic`` (the package folder,
~100 modules) and ``numpy`` (~500 modules, ``numpy/_core/tests`` and the like included: tests that call a
function many times compete with its definition). Every query below was chosen before the ranking was tuned; each
names the file and the qualified title of the definition that answers it (any overload or part of it counts).
A query is searched as ``react.search_knowledge`` searches its space (``builtin`` embedder, hybrid mode), 50
hits deep (the most a space proposes); the table prints the rank of the definition (``>50``: not in them),
and the median time of five searches of the query at limit 5 per store.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from _machine import header

from berth.bundle.knowledge import KnowledgeSpace, SourceTree
from berth.knowledge.service import KnowledgeService
from berth.knowledge.space import SpaceIndex
from berth.knowledge.store import SpaceStoreFactory
from berth.runtime.memory import HashedNgramEmbedder
from berth.runtime.tools.knowledge import search_spaces

SITE_PACKAGES = Path(next(p for p in sys.path if p.endswith("site-packages")))
DEPTH = 50


@dataclass(frozen=True)
class IdentifierQuery:
    """A query and the definition that answers it: ``space``, file path and qualified title."""

    space: str
    query: str
    path: str
    title: str


QUERIES = (
    IdentifierQuery("pydantic", "model_validate", "main.py", "BaseModel.model_validate"),
    IdentifierQuery("pydantic", "model_dump_json", "main.py", "BaseModel.model_dump_json"),
    IdentifierQuery("pydantic", "create_model", "main.py", "create_model"),
    IdentifierQuery("pydantic", "TypeAdapter", "type_adapter.py", "TypeAdapter"),
    IdentifierQuery("pydantic", "field_validator", "functional_validators.py", "field_validator"),
    IdentifierQuery("pydantic", "ConfigDict", "config.py", "ConfigDict"),
    IdentifierQuery("pydantic", "where is BaseModel.model_validate defined", "main.py", "BaseModel.model_validate"),
    IdentifierQuery("numpy", "einsum", "_core/einsumfunc.py", "einsum"),
    IdentifierQuery("numpy", "einsum_path", "_core/einsumfunc.py", "einsum_path"),
    IdentifierQuery("numpy", "assert_allclose", "testing/_private/utils.py", "assert_allclose"),
    IdentifierQuery("numpy", "broadcast_to", "lib/_stride_tricks_impl.py", "broadcast_to"),
    IdentifierQuery("numpy", "meshgrid", "lib/_function_base_impl.py", "meshgrid"),
    IdentifierQuery("numpy", "histogram", "lib/_histograms_impl.py", "histogram"),
    IdentifierQuery("numpy", "how does einsum_path choose the contraction order", "_core/einsumfunc.py", "einsum_path"),
)
"""Chosen before tuning (issue 38): the two the issue reports, then others of each package."""


async def ranks(
    root: Path, stores: SpaceStoreFactory | None, queries: Sequence[IdentifierQuery] = QUERIES
) -> tuple[list[int | None], list[float], str]:
    """The rank of each query's definition (None: not in the first :data:`DEPTH`), each query's median search
    time (ms, limit 5) and how the spaces were built."""
    service = KnowledgeService(root, HashedNgramEmbedder(), embedder_name="builtin", stores=stores)
    spaces: dict[str, SpaceIndex] = {
        name: service.open("bench", KnowledgeSpace(name=name, indexer=SourceTree(SITE_PACKAGES / name)))
        for name in dict.fromkeys(item.space for item in queries)
    }
    started = time.perf_counter()
    for space in spaces.values():
        await space.refresh()
    chunks = {name: (await space.status()).chunks for name, space in spaces.items()}
    built = f"indexed {chunks} chunks in {time.perf_counter() - started:.1f} s"
    found: list[int | None] = []
    times: list[float] = []
    for item in queries:
        samples = []
        for _ in range(5):
            begun = time.perf_counter()
            await spaces[item.space].search(item.query, limit=5)
            samples.append((time.perf_counter() - begun) * 1000)
        times.append(statistics.median(samples))
        hits, _ = await search_spaces([spaces[item.space]], item.query, limit=DEPTH)
        found.append(
            next(
                (
                    rank
                    for rank, hit in enumerate(hits, start=1)
                    if hit.chunk.path == item.path and hit.chunk.title == item.title
                ),
                None,
            )
        )
    for space in spaces.values():
        await space.aclose()
    return found, times, built


async def postgres_ranks(
    root: Path, queries: Sequence[IdentifierQuery] = QUERIES
) -> tuple[list[int | None], list[float], str]:
    """:func:`ranks` on the PostgreSQL store (a scratch database)."""
    from berth_postgres.knowledge import PostgresKnowledgeStores
    from berth_postgres.testing import async_scratch_database

    async with async_scratch_database() as dsn:
        stores = PostgresKnowledgeStores(dsn)
        try:
            return await ranks(root, stores, queries)
        finally:
            await stores.aclose()


async def main(arguments: argparse.Namespace) -> None:
    """Index both packages, search every query and print the table."""
    queries = [item for item in QUERIES if item.space == "pydantic"] if arguments.quick else list(QUERIES)
    columns: dict[str, list[int | None]] = {}
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="berth-bench-knowledge-code-") as folder:
        columns["sqlite"], times["sqlite"], built = await ranks(Path(folder) / "sqlite", None, queries)
        print(f"sqlite: {built}")
        if arguments.postgres:
            columns["postgres"], times["postgres"], built = await postgres_ranks(Path(folder) / "pg", queries)
            print(f"postgres: {built}")
    header = "".join(f"{name:>10}" for name in columns) + "".join(f"{name + ' ms':>13}" for name in times)
    print(f"\n{'space':<10}{'query':<52}{'definition':<48}{header}")
    for i, item in enumerate(queries):
        cells = "".join(f"{_rank(column[i]):>10}" for column in columns.values())
        cells += "".join(f"{column[i]:>13.1f}" for column in times.values())
        print(f"{item.space:<10}{item.query:<52}{item.path + ' ' + item.title:<48}{cells}")
    for name, column in columns.items():
        first = sum(1 for rank in column if rank == 1)
        reciprocal = sum(1.0 / rank for rank in column if rank) / len(column)
        print(f"{name}: definition first for {first} of {len(column)} queries; MRR {reciprocal:.3f}")


def _rank(rank: int | None) -> str:
    return str(rank) if rank is not None else f">{DEPTH}"


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--postgres", action="store_true", help="also on the PostgreSQL store (berth-postgres)")
    parser.add_argument("--quick", action="store_true", help="the pydantic space and its queries only")
    return parser.parse_args(argv)


if __name__ == "__main__":
    print(header(), flush=True)
    asyncio.run(main(parse()))
