"""The ``ops-copilot`` bundle: turns raw incident notes into a timeline, using the summarizer role."""

from __future__ import annotations

from pydantic import BaseModel

from berth import AgentSpec, BundleContext, BundleInfo, ToolPack, hookimpl

from .timeline import incident_timeline


class OpsProps(BaseModel):
    """Props: which model role the agent uses."""

    model_role: str = "summarizer"


@hookimpl
def berth_bundle() -> BundleInfo:
    """Identify the bundle."""
    return BundleInfo(id="ops-copilot", version="1.0.0", title="Ops copilot", props_model=OpsProps)


@hookimpl
def berth_agent(ctx: BundleContext) -> AgentSpec:
    """An agent for incident reviews."""
    props = ctx.props
    assert isinstance(props, OpsProps)
    return AgentSpec(
        instructions="You help on-call engineers write incident reviews. Build timelines first.",
        model_role=props.model_role,
    )


@hookimpl
def berth_tools(ctx: BundleContext) -> list[object]:
    """``ops-copilot.incident_timeline``, and ``exec.python`` to crunch logs and draw charts in the sandbox."""
    return [incident_timeline, ToolPack(id="exec")]
