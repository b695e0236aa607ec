"""``docs.search_docs``: ranked search over the handbook, locally or through a remote search service."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable
from typing import Any

from berth import BundleContext, MarkdownFolder, tool

WORD = re.compile(r"[a-z0-9]+")


def score(query: str, text: str) -> int:
    """How many query words occur in ``text`` (counting repeats)."""
    words = WORD.findall(text.lower())
    return sum(words.count(term) for term in set(WORD.findall(query.lower())))


def make_search_tool(ctx: BundleContext) -> Callable[..., Any]:
    """Build the search tool for one scope: props choose the limits and the backend."""
    props: Any = ctx.props

    @tool(read_only=True)
    def search_docs(query: str) -> list[dict[str, Any]]:
        """Search the handbook and return the best matching documents.

        Args:
            query: words to look for.
        """
        if props.remote_search_url:
            token = ctx.secret("b:search_api_key").reveal()
            if not props.remote_search_url.startswith(("https://", "http://")):
                raise ValueError("remote_search_url must be an http(s) URL")
            request = urllib.request.Request(  # noqa: S310 - scheme checked above
                props.remote_search_url,
                data=json.dumps({"query": query, "limit": props.max_results}).encode(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - scheme checked above
                return list(json.loads(response.read())["results"])
        folder = MarkdownFolder(ctx.path(props.knowledge_dir))
        ranked = sorted(
            ((score(query, doc.title + " " + doc.text), doc) for doc in folder.documents()),
            key=lambda pair: (-pair[0], pair[1].path),
        )
        return [
            {"path": f"ks:handbook/{doc.path}", "title": doc.title, "score": points}
            for points, doc in ranked[: props.max_results]
            if points > 0
        ]

    return search_docs
