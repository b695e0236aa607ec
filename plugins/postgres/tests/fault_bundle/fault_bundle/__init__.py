"""A bundle for the distributed fault tests: ``fault.work`` takes a moment and records every run in a ledger file."""

from __future__ import annotations

import os
import time

from berth import AgentSpec, BundleContext, BundleInfo, hookimpl, tool
from berth.logs import log_context


@tool
def work(step: int) -> str:
    """Do step ``step`` of the job (slowly) and record that it ran."""
    time.sleep(0.15)
    turn = (log_context.get() or {}).get("turn", "?")
    with open(os.environ["FAULT_LEDGER"], "a", encoding="utf-8") as ledger:
        ledger.write(f"{turn}:{step}\n")
    return f"step {step} done"


@hookimpl
def berth_bundle() -> BundleInfo:
    """Identify the bundle."""
    return BundleInfo(id="fault", version="1.0.0")


@hookimpl
def berth_agent(ctx: BundleContext) -> AgentSpec:
    """An agent that works through its steps."""
    return AgentSpec(instructions="Do the steps with fault.work, then answer.")


@hookimpl
def berth_tools(ctx: BundleContext) -> list[object]:
    """``fault.work``."""
    return [work]
