"""A bundle for the distributed fault tests: ``fault.work`` takes a moment and records every run in a ledger file
(``props.ledger`` in ``bundles.yaml``)."""

from __future__ import annotations

import time

from pydantic import BaseModel

from berth import AgentSpec, BundleContext, BundleInfo, hookimpl, tool
from berth.logs import log_context


class FaultProps(BaseModel):
    """Where the runs of ``fault.work`` are recorded."""

    ledger: str = "fault-ledger.txt"
    """The ledger file (the fault tests name one in the test's folder)."""


@hookimpl
def berth_bundle() -> BundleInfo:
    """Identify the bundle."""
    return BundleInfo(id="fault", version="1.0.0", props_model=FaultProps)


@hookimpl
def berth_agent(ctx: BundleContext) -> AgentSpec:
    """An agent that works through its steps."""
    return AgentSpec(instructions="Do the steps with fault.work, then answer.")


@hookimpl
def berth_tools(ctx: BundleContext) -> list[object]:
    """``fault.work``, recording into this scope's ledger."""
    props = ctx.props
    assert isinstance(props, FaultProps)

    @tool
    def work(step: int) -> str:
        """Do step ``step`` of the job (slowly) and record that it ran."""
        time.sleep(0.15)
        turn = (log_context.get() or {}).get("turn", "?")
        with open(props.ledger, "a", encoding="utf-8") as ledger:
            ledger.write(f"{turn}:{step}\n")
        return f"step {step} done"

    return [work]
