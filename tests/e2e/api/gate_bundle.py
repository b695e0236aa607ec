"""A bundle whose ``gate.hold`` tool waits until the test opens the gate: turns that stay running on demand.

The bundle runs in the test's process and event loop (the API stack is in-process), so its tool and the
test share :func:`gate` through this module.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

_gate: asyncio.Event | None = None

BUNDLE_SOURCE = '''
import gate_bundle
from berth import AgentSpec, BundleInfo, hookimpl, tool

@tool
async def hold() -> str:
    """Return once the test opens the gate."""
    await gate_bundle.gate().wait()
    return "through"

@hookimpl
def berth_bundle():
    return BundleInfo(id="gate", version="1")

@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="hold, then answer")

@hookimpl
def berth_tools(ctx):
    return [hold]
'''

HOLD = '<channel:action>{"action": "call_tool", "tool_call": {"tool_id": "gate.hold", "params": {}}}</channel:action>'
ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>done</channel:answer>'


def gate() -> asyncio.Event:
    """The gate of the running test."""
    global _gate
    if _gate is None:
        _gate = asyncio.Event()
    return _gate


def close_gate() -> None:
    """Start a test with a new, closed gate (an event of the test's own loop)."""
    global _gate
    _gate = asyncio.Event()


def open_gate() -> None:
    """Let every held call through, and every later one at once."""
    gate().set()


def gate_bundles(tmp_path: Path) -> dict[str, Any]:
    """``bundles.yaml`` entries with the gate bundle written under ``tmp_path``."""
    folder = tmp_path / "gate"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(BUNDLE_SOURCE))
    return {"gate": {"source": {"path": str(folder)}}}
