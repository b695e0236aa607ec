"""The ``docs`` bundle: answers questions from a folder of markdown.

It shows a knowledge space (``ks:handbook/...``), a tool configured by props (``docs.search_docs``) and a
bundle secret (``b:search_api_key``), used only when props point the tool at a remote search service.
"""

from __future__ import annotations

from pydantic import BaseModel

from berth import AgentSpec, BundleContext, BundleInfo, KnowledgeSpace, MarkdownFolder, hookimpl

from .search import make_search_tool


class DocsProps(BaseModel):
    """Props operators may override per tenant/project in bundles.yaml."""

    greeting: str = "Hi! Ask me anything about the handbook."
    knowledge_dir: str = "knowledge"
    max_results: int = 3
    remote_search_url: str | None = None


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
        instructions=f"{props.greeting}\nSearch with docs.search_docs and cite what you use.",
        tools=["docs.*", "react.*"],
    )


@hookimpl
def berth_tools(ctx: BundleContext) -> list[object]:
    """``docs.search_docs``, configured from this scope's props and secrets."""
    return [make_search_tool(ctx)]


@hookimpl
def berth_knowledge(ctx: BundleContext) -> list[KnowledgeSpace]:
    """The handbook: every markdown file under ``props.knowledge_dir``."""
    props = ctx.props
    assert isinstance(props, DocsProps)
    return [KnowledgeSpace(name="handbook", indexer=MarkdownFolder(ctx.path(props.knowledge_dir)))]
