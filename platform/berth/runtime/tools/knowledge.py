"""``react.search_knowledge``: ranked search over the bundle's knowledge spaces (BM25)."""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from berth.bundle.knowledge import KnowledgeDocument
from berth.runtime.toolbox import RuntimeTool, ToolNotice
from berth.runtime.turn import TurnState
from berth.tools.results import ToolOutput

_WORD = re.compile(r"\w+", re.UNICODE)


class KnowledgeParams(BaseModel):
    """Params of ``react.search_knowledge``."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1)
    space: str | None = Field(None, description="one knowledge space (default: all)")
    limit: int = Field(5, ge=1, le=20)


def bm25_rank(
    query: str, documents: list[KnowledgeDocument], *, k1: float = 1.5, b: float = 0.75
) -> list[tuple[float, KnowledgeDocument]]:
    """Documents scored by Okapi BM25 for ``query`` (highest first, zero scores dropped)."""
    tokenized = [_WORD.findall((doc.title + " " + doc.text).lower()) for doc in documents]
    if not tokenized:
        return []
    average = sum(len(tokens) for tokens in tokenized) / len(tokenized) or 1.0
    frequency = Counter(term for tokens in tokenized for term in set(tokens))
    terms = set(_WORD.findall(query.lower()))
    scored = []
    for doc, tokens in zip(documents, tokenized, strict=True):
        counts = Counter(tokens)
        score = 0.0
        for term in terms:
            if counts[term] == 0:
                continue
            idf = math.log(1 + (len(documents) - frequency[term] + 0.5) / (frequency[term] + 0.5))
            tf = counts[term]
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(tokens) / average))
        if score > 0:
            scored.append((score, doc))
    return sorted(scored, key=lambda pair: (-pair[0], pair[1].path))


async def run_search_knowledge(params: BaseModel, state: TurnState) -> Any:
    """Search the bundle's knowledge; hits are readable as ks:<space>/<path>."""
    assert isinstance(params, KnowledgeParams)
    bundle = state.bundle
    if bundle.knowledge is None:
        raise ToolNotice("tool_inactive", "this bundle has no knowledge space")
    spaces = [params.space] if params.space else list(bundle.knowledge_spaces)
    unknown = [space for space in spaces if space not in bundle.knowledge_spaces]
    if unknown:
        raise ToolNotice(
            "read_paths_missing", f"no knowledge space {unknown[0]!r} (spaces: {', '.join(bundle.knowledge_spaces)})"
        )
    hits = []
    for space in spaces:
        hits += [(score, space, doc) for score, doc in bm25_rank(params.query, bundle.knowledge(space))]
    hits.sort(key=lambda hit: -hit[0])
    rows = []
    for score, space, doc in hits[: params.limit]:
        snippet = " ".join(doc.text.split())[:240]
        rows.append(
            {"path": f"ks:{space}/{doc.path}", "title": doc.title, "score": round(score, 3), "snippet": snippet}
        )
    return ToolOutput(value=rows or "no matches", summary=f"{len(rows)} knowledge hit(s)")


def search_knowledge_tool() -> RuntimeTool:
    """``react.search_knowledge``."""
    return RuntimeTool(
        "react.search_knowledge",
        "Search the bundle's knowledge spaces; read a hit in full with react.read(['ks:<space>/<path>']).",
        KnowledgeParams,
        run_search_knowledge,
        read_only=True,
    )


__all__ = ["KnowledgeParams", "bm25_rank", "search_knowledge_tool"]
