"""The ``docs`` bundle: answers questions about a handbook and about Berth itself, with citations.

It shows knowledge spaces — ``ks:handbook/...`` (a folder of markdown), ``ks:berth-docs/...`` (Berth's own
``docs/``, chunked by headings) and ``ks:berth-source/...`` (Berth's Python source, chunked by definitions)
— a tool configured by props (``docs.search_docs``) and a bundle secret (``b:search_api_key``), used only
when props point the tool at a remote search service.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

import berth
from berth import (
    AgentSpec,
    BundleContext,
    BundleInfo,
    DocumentFolder,
    KnowledgeSpace,
    MarkdownFolder,
    SourceTree,
    hookimpl,
)

from .search import make_search_tool


class DocsProps(BaseModel):
    """Props operators may override per tenant/project in bundles.yaml."""

    greeting: str = "Hi! Ask me anything about the handbook."
    knowledge_dir: str = "knowledge"
    max_results: int = 3
    remote_search_url: str | None = None
    berth_spaces: bool = True
    """Also index Berth's own docs and source (``berth-docs``, ``berth-source``)."""
    berth_docs_dir: str | None = None
    """Berth's ``docs/`` folder (default: the one beside the installed package, in a source checkout)."""


@hookimpl
def berth_bundle() -> BundleInfo:
    """Identify the bundle."""
    return BundleInfo(
        id="docs",
        version="1.0.0",
        title="Docs assistant",
        description="Answers from the handbook, with citations.",
        props_model=DocsProps,
    )


@hookimpl
def berth_agent(ctx: BundleContext) -> AgentSpec:
    """An agent that searches the handbook before answering."""
    props = ctx.props
    assert isinstance(props, DocsProps)
    return AgentSpec(
        instructions=(
            f"{props.greeting}\nFor the handbook, search with docs.search_docs. For questions about Berth, search "
            "with react.search_knowledge (spaces berth-docs and berth-source), read the best chunks with react.read "
            "and cite them."
        ),
        tools=["docs.*", "react.*"],
    )


@hookimpl
def berth_tools(ctx: BundleContext) -> list[object]:
    """``docs.search_docs``, configured from this scope's props and secrets."""
    return [make_search_tool(ctx)]


@hookimpl
def berth_knowledge(ctx: BundleContext) -> list[KnowledgeSpace]:
    """The handbook (every markdown file under ``props.knowledge_dir``) and, with ``props.berth_spaces``,
    Berth's own documentation and source."""
    props = ctx.props
    assert isinstance(props, DocsProps)
    spaces = [KnowledgeSpace(name="handbook", indexer=MarkdownFolder(ctx.path(props.knowledge_dir)))]
    if not props.berth_spaces:
        return spaces
    package = Path(berth.__file__).resolve().parent
    docs = Path(props.berth_docs_dir) if props.berth_docs_dir else package.parents[1] / "docs"
    if docs.is_dir():  # a source checkout (an installed wheel carries no docs/)
        spaces.append(
            KnowledgeSpace(name="berth-docs", indexer=DocumentFolder(docs), description="Berth's documentation")
        )
    spaces.append(
        KnowledgeSpace(
            name="berth-source",
            indexer=SourceTree(package, include=("*.py",)),
            description="Berth's Python source, by function and class",
        )
    )
    return spaces
