"""Helpers for host tests: a basic folder bundle, writing file trees, bundles.yaml entries."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BASIC_INIT = '''
from pydantic import BaseModel
from berth import AgentSpec, BundleInfo, hookimpl, tool

class Props(BaseModel):
    greeting: str = "hello"

@tool(read_only=True)
def answer() -> str:
    """Return the answer of this version."""
    return "v1"

@hookimpl
def berth_bundle():
    return BundleInfo(id="{bundle_id}", version="1.0", props_model=Props)

@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions=ctx.props.greeting)

@hookimpl
def berth_tools(ctx):
    return [answer]
'''


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    """Write ``files`` (relative path → text, dedented) under ``root``."""
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


def path_entry(folder: Path, **extra: Any) -> dict[str, Any]:
    """A bundles.yaml entry for a folder bundle."""
    return {"source": {"path": str(folder)}, **extra}
