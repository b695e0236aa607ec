"""The built-in ``react.*`` tools (SPEC §4.7): ordinary runtime tools with params models and notice codes."""

from __future__ import annotations

from berth.runtime.toolbox import RuntimeTool
from berth.runtime.tools.files import checkout_tool, patch_tool, pull_tool, rg_tool, write_tool
from berth.runtime.tools.knowledge import search_knowledge_tool
from berth.runtime.tools.memory import hide_tool, memsearch_tool, plan_tool
from berth.runtime.tools.read import read_tool
from berth.runtime.turn import BundleView


def react_tools(bundle: BundleView, *, with_memory: bool) -> list[RuntimeTool]:
    """The ``react.*`` tools of a turn: all of them, ``memsearch`` with a memory index, and
    ``search_knowledge`` when the bundle has a knowledge space."""
    tools = [read_tool(), write_tool(), patch_tool(), pull_tool(), checkout_tool(), rg_tool(), hide_tool(), plan_tool()]
    if with_memory:
        tools.append(memsearch_tool())
    if bundle.knowledge_spaces:
        tools.append(search_knowledge_tool())
    return tools


__all__ = ["react_tools"]
