"""A bundle whose async ``stall.block`` tool blocks its event loop with ``time.sleep`` — the mistake the host must
survive. The test and the bundle share the flags below through this module (both run in the test's process)."""

from __future__ import annotations

import textwrap
import threading
from pathlib import Path
from typing import Any

BLOCK_S = 4.0
"""How long the tool blocks; its ``timeout_s`` is far shorter."""
TIMEOUT_S = 0.5

entered = threading.Event()
finished = threading.Event()

BUNDLE_SOURCE = f'''
import time
import stall_bundle
from berth import AgentSpec, BundleInfo, hookimpl, tool

@tool(timeout_s={TIMEOUT_S})
async def block() -> str:
    """Block the event loop this coroutine runs on (never awaits)."""
    stall_bundle.entered.set()
    time.sleep({BLOCK_S})
    stall_bundle.finished.set()
    return "finished"

@hookimpl
def berth_bundle():
    return BundleInfo(id="stall", version="1")

@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="block, then answer")

@hookimpl
def berth_tools(ctx):
    return [block]
'''

BLOCK = (
    '<channel:action>{"action": "call_tool", "tool_call": {"tool_id": "stall.block", "params": {}}}</channel:action>'
)
ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>done</channel:answer>'


def reset() -> None:
    """Start a test with both flags down."""
    entered.clear()
    finished.clear()


def stall_bundles(tmp_path: Path) -> dict[str, Any]:
    """``bundles.yaml`` entries with the stall bundle written under ``tmp_path``."""
    folder = tmp_path / "stall"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(BUNDLE_SOURCE))
    return {"stall": {"source": {"path": str(folder)}}}
