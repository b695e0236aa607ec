"""A folder bundle ``slow`` whose one tool never returns, and the scripted action that calls it: a turn that stays
running until it is cancelled (or its conversation deleted)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

SLOW_BUNDLE = '''
import asyncio
from berth import AgentSpec, BundleInfo, hookimpl, tool

@tool
async def wait_forever() -> str:
    """Never returns."""
    await asyncio.Event().wait()
    return "unreachable"

@hookimpl
def berth_bundle():
    return BundleInfo(id="slow", version="1")

@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="wait")

@hookimpl
def berth_tools(ctx):
    return [wait_forever]
'''
WAIT = (
    '<channel:action>{"action": "call_tool", "tool_call": {"tool_id": "slow.wait_forever", "params": {}}}'
    "</channel:action>"
)
"""The scripted model's response that calls ``slow.wait_forever``."""


def slow_bundle(tmp_path: Path) -> dict[str, Any]:
    """Write the ``slow`` bundle under ``tmp_path``; its ``bundles.yaml`` entry."""
    folder = tmp_path / "slow"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(SLOW_BUNDLE))
    return {"source": {"path": str(folder)}}
