"""The ``hello`` bundle: the smallest complete Berth bundle (a tool, a skill, a widget, an agent)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from berth import AgentSpec, BundleContext, BundleInfo, Widget, hookimpl

from .greetings import greet

HERE = Path(__file__).parent


class HelloProps(BaseModel):
    """Props operators may override in bundles.yaml."""

    punctuation: str = "!"


@hookimpl
def berth_bundle() -> BundleInfo:
    """Identify the bundle."""
    return BundleInfo(
        id="hello",
        version="1.0.0",
        title="Hello",
        description="Greets people; the reference example of a bundle.",
        props_model=HelloProps,
    )


@hookimpl
def berth_agent(ctx: BundleContext) -> AgentSpec:
    """A friendly agent that greets with the ``hello.greet`` tool."""
    return AgentSpec(instructions="You greet people warmly. Use hello.greet to produce greetings.")


@hookimpl
def berth_tools(ctx: BundleContext) -> list[object]:
    """The bundle's tools: ``hello.greet``."""
    return [greet]


@hookimpl
def berth_skills(ctx: BundleContext) -> list[str]:
    """The greeting-etiquette skill (``sk:greeting-etiquette``)."""
    return [str(HERE / "skills" / "greeting-etiquette")]


@hookimpl
def berth_widgets(ctx: BundleContext) -> list[Widget]:
    """A small greeter widget for the side panel."""
    return [Widget(alias="greeter", title="Greeter", static_dir=HERE / "widgets" / "greeter", icon="👋")]
