"""A bundle whose ``gate.hold`` tool waits until the test opens the gate: turns that stay running on demand.

The bundle runs in the test's process (the API stack is in-process), so its tool and the test share :func:`gate`
through this module. The tool runs on its generation's own event loop and the test on another, so the gate is a
thread-safe flag that the tool polls (an ``asyncio.Event`` belongs to one loop).
"""

from __future__ import annotations

import asyncio
import textwrap
import threading
from pathlib import Path
from typing import Any


class Gate:
    """Opened from any thread or loop; waited on, cancellably, from any loop."""

    def __init__(self) -> None:
        self._opened = threading.Event()

    def set(self) -> None:
        """Open the gate."""
        self._opened.set()

    async def wait(self) -> None:
        """Return once the gate is open (polled: a cancelled wait leaves no thread behind)."""
        while not self._opened.is_set():  # noqa: ASYNC110 - an asyncio.Event belongs to one loop; this is cross-loop
            await asyncio.sleep(0.005)


_gate: Gate | None = None

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


def gate() -> Gate:
    """The gate of the running test."""
    global _gate
    if _gate is None:
        _gate = Gate()
    return _gate


def close_gate() -> None:
    """Start a test with a new, closed gate."""
    global _gate
    _gate = Gate()


def open_gate() -> None:
    """Let every held call through, and every later one at once."""
    gate().set()


def gate_bundles(tmp_path: Path) -> dict[str, Any]:
    """``bundles.yaml`` entries with the gate bundle written under ``tmp_path``."""
    folder = tmp_path / "gate"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(BUNDLE_SOURCE))
    return {"gate": {"source": {"path": str(folder)}}}
