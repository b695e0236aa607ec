"""The ``demo`` model provider: a stand-in model that plays a sensible turn in whatever bundle is active.

``berth run --demo`` puts every model role on it, so a new user gets a clean first turn in every bundle without
an API key — the example bundles, and a bundle just made with ``berth bundles new``. It reads what a real model
reads, the rendered prompt (the tool catalog and skill gallery of the system message, the current turn), and
answers with the output protocol:

1. when the bundle has a skill and this turn has not read one, it reads the first with ``react.read``;
2. when the bundle has a tool of its own (not ``react.*``, ``mcp.*``, ``exec.*``) that this turn has not called
   and whose required params it can fill, it calls it: strings from the user's message (a ``name`` gets
   ``friend``), enums their first value, numbers their minimum or 1, booleans true, arrays one string;
3. then it completes: it says which bundle answered and what the tool gave, cites the newest source of the pool
   when there is one (so citations always name a source that exists), and offers two follow-ups.

It never calls a tool that is not in the catalog, and it gives up calling after :data:`MAX_CALLS` calls in a
turn, so a notice can never make it loop. Answers stream in small chunks, like a real model's.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from berth.config.models.assembly import ModelRef
from berth.default_plugins.models.scripted import estimate_tokens
from berth.hooks import hookimpl
from berth.models.events import ModelCompleted, ModelEvent, TextDelta, Usage

if TYPE_CHECKING:
    from berth.models.protocol import ModelProviderFactory, ModelRequest, SecretLookup

PROVIDER_NAME: Final = "demo"
CHUNK_SIZE: Final = 12
MAX_CALLS: Final = 3
PLATFORM_PREFIXES: Final = ("react.", "mcp.", "exec.")

_TOOL_HEADING = re.compile(r"^## (?P<id>\S+)(?P<flags>.*)$", re.M)
_SKILL_LINE = re.compile(r"^- sk:(?P<id>\S+) — ", re.M)
_ROLE = re.compile(r"^# Your role \((?P<title>.*)\)$", re.M)
_TURN = re.compile(r"^\[TURN (?P<turn>\S+)\]", re.M)
_PROMPT = re.compile(r"^\[user\.prompt\] \S+\n(?P<text>.*?)(?=\n\n\[|\Z)", re.M | re.S)
_CALL = re.compile(r"^\[react\.tool\.call\] \S+ \(application/json\)\n(?P<json>\{.*\})$", re.M)
_RESULT = re.compile(r"^\[react\.tool\.result\] \S+\n(?P<text>.*?)(?=\n\n\[|\Z)", re.M | re.S)
_SOURCE = re.compile(r"^\[S:(?P<sid>\d+)\] (?P<title>.*) — ", re.M)


@dataclass(frozen=True)
class CatalogTool:
    """A tool of the catalog: its id and params schema."""

    tool_id: str
    schema: Mapping[str, Any]


@dataclass
class PromptView:
    """What the demo model reads from a rendered prompt."""

    bundle_title: str = "this"
    tools: list[CatalogTool] = field(default_factory=list)
    skills: list[str] = field(default_factory=list)
    message: str = ""
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    sources: list[tuple[int, str]] = field(default_factory=list)

    @classmethod
    def read(cls, texts: list[str]) -> PromptView:
        """Parse the prompt's parts: the system message, then the current turn (from its last ``[TURN`` on)."""
        view = cls()
        system = texts[0] if texts else ""
        if role := _ROLE.search(system):
            view.bundle_title = role.group("title")
        view.tools = list(_catalog(system))
        view.skills = [match.group("id") for match in _SKILL_LINE.finditer(system)]
        rest = "\n\n".join(texts[1:])
        turns = list(_TURN.finditer(rest))
        current = rest[turns[-1].start() :] if turns else rest
        if prompt := _PROMPT.search(current):
            view.message = prompt.group("text").strip()
        for match in _CALL.finditer(current):
            try:
                call = json.loads(match.group("json"))
            except ValueError:
                continue
            view.calls.append((str(call.get("tool_id")), dict(call.get("params") or {})))
        view.results = [match.group("text").strip() for match in _RESULT.finditer(current)]
        view.sources = [(int(m.group("sid")), m.group("title")) for m in _SOURCE.finditer(rest)]
        return view


def _catalog(system: str) -> list[CatalogTool]:
    tools = []
    headings = list(_TOOL_HEADING.finditer(system))
    for index, heading in enumerate(headings):
        end = headings[index + 1].start() if index + 1 < len(headings) else len(system)
        body = system[heading.end() : end]
        params = next((line[len("params: ") :] for line in body.splitlines() if line.startswith("params: ")), None)
        if params is None:
            continue
        try:
            schema = json.loads(params)
        except ValueError:
            continue
        tools.append(CatalogTool(heading.group("id"), schema))
    return tools


def example_params(schema: Mapping[str, Any], message: str) -> dict[str, Any] | None:
    """Params for the schema's required properties, or None when one of them cannot be filled."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    params: dict[str, Any] = {}
    for name in schema.get("required") or []:
        value = _example(name, properties.get(name) or {}, message)
        if value is None:
            return None
        params[name] = value
    return params


def _example(name: str, prop: Mapping[str, Any], message: str) -> Any:
    if prop.get("enum"):
        return prop["enum"][0]
    kind = prop.get("type")
    if kind == "string":
        return "friend" if name == "name" else (message or "hello")[: int(prop.get("maxLength") or 200)]
    if kind == "integer":
        return int(prop.get("minimum", 1))
    if kind == "number":
        return float(prop.get("minimum", 1))
    if kind == "boolean":
        return True
    if kind == "array":
        item = _example(name, prop.get("items") or {"type": "string"}, message)
        return [] if item is None else [item]
    return None


class DemoProvider:
    """Plays one sensible turn in the active bundle (see the module docstring)."""

    def __init__(self, chunk_size: int = CHUNK_SIZE) -> None:
        self._chunk_size = chunk_size

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Answer the next round of the turn in ``request``'s prompt."""
        texts = [part.text for part in request.prompt.parts()]
        text = demo_title(texts[-1]) if request.metadata.get("purpose") == "title" else respond(PromptView.read(texts))
        for start in range(0, len(text), self._chunk_size):
            yield TextDelta(text=text[start : start + self._chunk_size])
        usage = Usage(input_tokens=sum(estimate_tokens(t) for t in texts), output_tokens=estimate_tokens(text))
        yield ModelCompleted(stop_reason="end_turn", usage=usage)

    async def aclose(self) -> None:
        """Nothing to release."""


def demo_title(exchange: str) -> str:
    """A title for a title request: the first words of the user's message (the demo model summarizes nothing)."""
    first = exchange.removeprefix("User: ").split("\n", 1)[0]
    words = first.split()
    if not words:
        return "Demo conversation"
    title = " ".join(words[:6])
    return title[0].upper() + title[1:]


def respond(view: PromptView) -> str:
    """The demo model's response to one round."""
    called = {tool_id for tool_id, _ in view.calls}
    if len(view.calls) < MAX_CALLS:
        read_skill = any(tool_id == "react.read" and _reads_skill(params) for tool_id, params in view.calls)
        if view.skills and not read_skill and any(tool.tool_id == "react.read" for tool in view.tools):
            skill = view.skills[0]
            return _call("react.read", {"paths": [f"sk:{skill}"]}, f"Let me read the {skill} skill first.")
        for tool in view.tools:
            if tool.tool_id.startswith(PLATFORM_PREFIXES) or tool.tool_id in called:
                continue
            params = example_params(tool.schema, view.message)
            if params is not None:
                return _call(tool.tool_id, params, f"Now I use {tool.tool_id}.")
    return _complete(view)


def _reads_skill(params: Mapping[str, Any]) -> bool:
    return any(str(path).startswith("sk:") for path in params.get("paths") or [])


def _call(tool_id: str, params: dict[str, Any], thinking: str) -> str:
    action = {"action": "call_tool", "notes": thinking, "tool_call": {"tool_id": tool_id, "params": params}}
    return f"<channel:thinking>{thinking}</channel:thinking><channel:action>{json.dumps(action)}</channel:action>"


def _complete(view: PromptView) -> str:
    own = [(tool_id, result) for (tool_id, _), result in zip(view.calls, view.results, strict=False)]
    own = [(tool_id, result) for tool_id, result in own if not tool_id.startswith(PLATFORM_PREFIXES)]
    lines = [f"**Hello!** This is Berth's demo model answering through the *{view.bundle_title}* bundle."]
    if own:
        tool_id, result = own[-1]
        excerpt = " ".join(result.split("\nsources:")[0].split())[:300]
        lines.append(f"`{tool_id}` answered: {excerpt}")
    if view.sources:
        sid, _ = view.sources[-1]
        lines.append(f"Read more: [[S:{sid}]].")
    lines.append("Set a real model (an Anthropic key, or an OpenAI-compatible server) to get real answers.")
    followups = {"followups": ["What can this bundle do?", "Show me another example"]}
    return (
        "<channel:thinking>I have what I need; time to answer.</channel:thinking>"
        '<channel:action>{"action": "complete", "notes": "done"}</channel:action>'
        f"<channel:answer>{' '.join(lines)}</channel:answer>"
        f"<channel:followups>{json.dumps(followups)}</channel:followups>"
    )


def create_demo_provider(model_ref: ModelRef, secrets: SecretLookup) -> DemoProvider:
    """Build the demo provider (it needs no credentials and ignores the model name)."""
    return DemoProvider()


@hookimpl
def berth_model_providers() -> dict[str, ModelProviderFactory]:
    """Contribute the ``demo`` provider."""
    return {PROVIDER_NAME: create_demo_provider}
