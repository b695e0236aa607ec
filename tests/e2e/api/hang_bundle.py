"""A bundle whose sync ``hang.block`` tool never returns until the test releases it: the tool the host must survive
(its ``timeout_s`` ends the call, but Python cannot stop the thread). ``hang.quick`` is a sync tool that answers at
once. The bundle runs in the test's process (the API stack is in-process), so the test and the tool share the
event and the counts below through this module."""

from __future__ import annotations

import textwrap
import threading
from pathlib import Path
from typing import Any

TIMEOUT_S = 0.2
"""``hang.block``'s ``timeout_s``: the call ends here, its thread does not."""

release = threading.Event()
_lock = threading.Lock()
_counts = {"entered": 0, "returned": 0}
_all_returned = threading.Event()

BUNDLE_SOURCE = f'''
import hang_bundle
from berth import AgentSpec, BundleInfo, hookimpl, tool

@tool(timeout_s={TIMEOUT_S})
def block() -> str:
    """Wait until the test releases every call (a sync tool that does not return)."""
    hang_bundle.entered()
    try:
        hang_bundle.release.wait()
    finally:
        hang_bundle.returned()
    return "released"

@tool(timeout_s=10)
def quick(text: str = "pong") -> str:
    """Answer at once."""
    return text

@hookimpl
def berth_bundle():
    return BundleInfo(id="hang", version="1")

@hookimpl
def berth_agent(ctx):
    return AgentSpec(instructions="call the tools, then answer")

@hookimpl
def berth_tools(ctx):
    return [block, quick]
'''

BLOCK = '<channel:action>{"action": "call_tool", "tool_call": {"tool_id": "hang.block", "params": {}}}</channel:action>'
QUICK = '<channel:action>{"action": "call_tool", "tool_call": {"tool_id": "hang.quick", "params": {}}}</channel:action>'
ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>done</channel:answer>'


def entered() -> None:
    """A call of ``hang.block`` started."""
    with _lock:
        _counts["entered"] += 1
        _all_returned.clear()


def returned() -> None:
    """A call of ``hang.block`` returned (it was released)."""
    with _lock:
        _counts["returned"] += 1
        if _counts["returned"] == _counts["entered"]:
            _all_returned.set()


def counts() -> tuple[int, int]:
    """(calls that started, calls that returned)."""
    with _lock:
        return _counts["entered"], _counts["returned"]


def wait_all_returned(timeout_s: float) -> bool:
    """Block until every started call returned (after :func:`release_all`); False if ``timeout_s`` passed first."""
    return _all_returned.wait(timeout_s)


def reset() -> None:
    """Start a test with the calls held and nothing counted."""
    release.clear()
    _all_returned.clear()
    with _lock:
        _counts.update(entered=0, returned=0)


def release_all() -> None:
    """Let every held call (and every later one) return."""
    release.set()


def hang_bundles(tmp_path: Path) -> dict[str, Any]:
    """``bundles.yaml`` entries with the hang bundle written under ``tmp_path``."""
    folder = tmp_path / "hang"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(BUNDLE_SOURCE))
    return {"hang": {"source": {"path": str(folder)}}}
