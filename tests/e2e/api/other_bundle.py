"""A second bundle, ``orbit``, for tests where tenants enable different bundles (``hello`` for acme, ``orbit`` for
globex): a tool, an agent and an HTML widget."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

BUNDLE_SOURCE = '''
from berth import AgentSpec, BundleInfo, Widget, hookimpl, tool

@tool
async def ping() -> str:
    """Answer pong."""
    return "pong"

@hookimpl
def berth_bundle():
    return BundleInfo(id="orbit", version="1", title="Orbit")

@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="answer")

@hookimpl
def berth_tools(ctx):
    return [ping]

@hookimpl
def berth_widgets(ctx):
    return [Widget(alias="radar", title="Radar", html="<h3>Radar of orbit</h3>")]
'''

TENANT_BUNDLES = {"acme": ["hello"], "globex": ["orbit"]}
"""``tenant_bundles`` of :func:`api_stack.api_stack`: acme enables only ``hello``, globex only ``orbit``."""


def both_bundles(tmp_path: Path) -> dict[str, Any]:
    """``bundles.yaml`` entries: ``hello`` (its entry point) and ``orbit`` (written under ``tmp_path``)."""
    folder = tmp_path / "orbit"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(BUNDLE_SOURCE))
    return {"hello": {"source": {"entry_point": "hello"}}, "orbit": {"source": {"path": str(folder)}}}
