"""The tools of one turn: bundle functions, tool packs, MCP tools and ``react.*``, behind one interface.

Every tool is a :class:`RuntimeTool` with an id, a description, a params model (its JSON Schema is
what the catalog shows) and an async ``run(params, state)``. The catalog text in the system message is
sorted by id and stable, so it never breaks the prompt cache by itself.
"""

from __future__ import annotations

import fnmatch
import json
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from berth.bundle.skills import Skill
from berth.runtime.turn import TurnState
from berth.tools.calls import ToolCall, calling
from berth.tools.notices import ToolNotice as ToolNotice  # re-exported: the runtime's tools raise it
from berth.tools.spec import ToolSpec

ToolRunner = Callable[[BaseModel, TurnState], Awaitable[Any]]

# The catalog text of each params model's schema. A model class is built once per tool (per bundle
# generation), and generating its schema costs far more than a turn's other setup; a reloaded bundle's
# classes are new keys, and the old ones drop out with their classes.
_SCHEMA_TEXTS: weakref.WeakKeyDictionary[type[BaseModel], str] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class RuntimeTool:
    """One callable tool of the turn."""

    tool_id: str
    description: str
    params_model: type[BaseModel]
    run: ToolRunner = field(repr=False)
    read_only: bool = False
    timeout_s: float | None = None
    input_schema_override: dict[str, Any] | None = None

    @property
    def input_schema(self) -> dict[str, Any]:
        """The params' JSON Schema."""
        if self.input_schema_override is not None:
            return self.input_schema_override
        schema = self.params_model.model_json_schema()
        schema.pop("title", None)
        return schema

    @property
    def schema_text(self) -> str:
        """The params' JSON Schema as the catalog shows it: compact, keys sorted."""
        if self.input_schema_override is not None:
            return _compact_json(self.input_schema_override)
        text = _SCHEMA_TEXTS.get(self.params_model)
        if text is None:
            text = _SCHEMA_TEXTS[self.params_model] = _compact_json(self.input_schema)
        return text


def _compact_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def function_tool(tool_id: str, spec: ToolSpec) -> RuntimeTool:
    """Wrap a ``@tool`` function (bundle or tool pack) as a runtime tool."""

    async def run(params: BaseModel, state: TurnState) -> Any:
        scope = state.scope
        call = ToolCall(scope.tenant, scope.project, scope.conversation_id, state.turn_id, state.current_call_id or "")
        with calling(call):  # copied into the tool's thread, or its generation's loop, as the call starts
            return await spec.call(params)  # validated by the caller, which also applies the tool's timeout

    return RuntimeTool(
        tool_id=tool_id,
        description=spec.description,
        params_model=spec.params_model,
        run=run,
        read_only=spec.read_only,
        timeout_s=spec.timeout_s,
    )


@dataclass
class ToolBox:
    """The tools a turn may call, those listed as inactive (id → reason), and the allow-list applied."""

    tools: dict[str, RuntimeTool] = field(default_factory=dict)
    inactive: dict[str, str] = field(default_factory=dict)
    inactive_codes: dict[str, str] = field(default_factory=dict)
    """The notice code of an inactive id (``mcp_server_unavailable`` …); ``tool_inactive`` when not named."""
    unknown_codes: dict[str, str] = field(default_factory=dict)
    """The notice code for an unknown id under a prefix (``mcp.`` → ``mcp_unknown_tool``); else ``unknown_tool``."""
    allowed: tuple[str, ...] | None = None
    """The allow-list :meth:`restrict` applied (None: every tool), kept for tools added later in the turn."""
    withheld: dict[str, RuntimeTool] = field(default_factory=dict)
    """Tools the allow-list left out; a skill's ``tools.yaml`` may bring them back (:meth:`widen`)."""

    def add(self, tool: RuntimeTool) -> None:
        """Add ``tool``; a second tool with the same id is refused."""
        if tool.tool_id in self.tools:
            raise ValueError(f"tool id '{tool.tool_id}' is contributed twice")
        self.tools[tool.tool_id] = tool

    def restrict(self, patterns: Sequence[str] | None) -> None:
        """Keep only the tools matching ``patterns`` (``docs.*``, ``react.read``); None keeps all."""
        if patterns is None:
            return
        self.allowed = tuple(patterns)
        self.withheld.update({k: v for k, v in self.tools.items() if not self.allows(k)})
        self.tools = {k: v for k, v in self.tools.items() if self.allows(k)}

    def widen(self, patterns: Sequence[str]) -> list[RuntimeTool]:
        """Admit the withheld tools matching ``patterns`` for the rest of the turn; return those newly added."""
        if self.allowed is None or not patterns:
            return []
        self.allowed = (*self.allowed, *(p for p in patterns if p not in self.allowed))
        added = [tool for tool_id, tool in sorted(self.withheld.items()) if self.allows(tool_id)]
        for tool in added:
            self.tools[tool.tool_id] = self.withheld.pop(tool.tool_id)
        return added

    def allows(self, tool_id: str) -> bool:
        """Whether the allow-list of :meth:`restrict` admits ``tool_id``."""
        return self.allowed is None or any(fnmatch.fnmatchcase(tool_id, pattern) for pattern in self.allowed)

    def refusal(self, tool_id: str) -> tuple[str, str]:
        """Why ``tool_id`` cannot be called (it is not offered): a notice code and a message saying what is known.

        An id listed inactive (exactly, or under an ``<prefix>.*`` entry) gets its own code; any other id is
        unknown, with the code of its namespace.
        """
        for key, reason in self.inactive.items():
            if key == tool_id or (key.endswith(".*") and tool_id.startswith(key[:-1])):
                return self.inactive_codes.get(key, "tool_inactive"), f"{tool_id} is inactive: {reason}"
        code = next((c for prefix, c in self.unknown_codes.items() if tool_id.startswith(prefix)), "unknown_tool")
        return code, f"no tool {tool_id!r}; the catalog has: {', '.join(sorted(self.tools))}"

    def get(self, tool_id: str) -> RuntimeTool | None:
        """The tool with ``tool_id``, if offered."""
        return self.tools.get(tool_id)

    def catalog_text(self) -> str:
        """The catalog for the system message: id, purpose, params schema, constraints; sorted, stable."""
        return catalog_entries(self.tools[tool_id] for tool_id in sorted(self.tools))


def catalog_entries(tools: Iterable[RuntimeTool]) -> str:
    """Catalog entries of ``tools``, in the given order: id, flags, purpose and params schema."""
    sections = []
    for tool in tools:
        flags = " (read-only)" if tool.read_only else ""
        timeout = f" (times out after {tool.timeout_s:g} s)" if tool.timeout_s else ""
        sections.append(f"## {tool.tool_id}{flags}{timeout}\n{tool.description.strip()}\nparams: {tool.schema_text}")
    return "\n\n".join(sections)


def skill_gallery(skills: Iterable[Skill]) -> str:
    """One line per skill: ``sk:<id>`` and its description (sorted)."""
    return "\n".join(f"- sk:{skill.id} — {skill.description}" for skill in sorted(skills, key=lambda s: s.id))


def system_message(
    *, protocol: str, instructions: str, toolbox: ToolBox, skills: Mapping[str, Skill], bundle_title: str
) -> str:
    """The stable system message: protocol, the bundle's instructions, the tool catalog, the skill gallery."""
    parts = [protocol.strip(), f"# Your role ({bundle_title})\n{instructions.strip() or 'Help the user.'}"]
    parts.append(
        f"# Tools\nCall one with a call_tool action; params must match the schema.\n\n{toolbox.catalog_text()}"
    )
    if skills:
        parts.append(
            f"# Skills\nLoad one with react.read(['sk:<id>']) before you follow it.\n{skill_gallery(skills.values())}"
        )
    return "\n\n".join(parts) + "\n"
