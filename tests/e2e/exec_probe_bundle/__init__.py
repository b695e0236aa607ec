"""A folder bundle for the exec tests: enables ``exec.python`` and has a tool that reports its scope."""

from __future__ import annotations

import time

from pydantic import BaseModel

from berth import AgentSpec, BundleContext, BundleInfo, ToolPack, hookimpl, tool


class ProbeProps(BaseModel):
    """A prop the tool reports, so a test sees which scope's props it ran with."""

    motto: str = "default motto"


@hookimpl
def berth_bundle() -> BundleInfo:
    """Identify the bundle."""
    return BundleInfo(id="probe", version="1.0.0", title="Exec probe", props_model=ProbeProps)


@hookimpl
def berth_agent(ctx: BundleContext) -> AgentSpec:
    """An agent that answers with code."""
    return AgentSpec(instructions="Answer by writing Python for exec.python.")


@hookimpl
def berth_tools(ctx: BundleContext) -> list[object]:
    """``probe.whoami`` and the exec pack."""

    @tool
    def whoami(label: str) -> dict[str, str]:
        """Report the scope this tool runs in, its motto prop and the start of its ``b:`` secret."""
        motto = getattr(ctx.props, "motto", "")
        return {
            "label": label,
            "tenant": str(ctx.tenant),
            "project": str(ctx.project),
            "motto": motto,
            "key_prefix": ctx.secret("b:probe_key").reveal()[:6],
        }

    @tool(timeout_s=0.3)
    def slow() -> str:
        """Take longer than this tool's own time limit."""
        time.sleep(2)
        return "late"

    return [whoami, slow, ToolPack(id="exec")]
