"""A bundle generation's tool catalog: every tool id it offers, sorted and stable."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from berth.tools.contributions import BundleTools, McpServer, ToolPack
from berth.tools.packs import RUNTIME_PACKS
from berth.tools.spec import ToolSpec, tool_spec_of

RESERVED_NAMESPACES = frozenset({"react", "mcp"})


class CatalogError(ValueError):
    """A tools descriptor that cannot become a catalog; carries every problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True)
class CatalogEntry:
    """One tool id and what provides it: a bundle function, a tool pack or an MCP server."""

    tool_id: str
    kind: Literal["function", "pack", "mcp"]
    spec: ToolSpec | None = None
    pack: ToolPack | None = None
    server: McpServer | None = None


@dataclass(frozen=True)
class ToolCatalog:
    """The tools of one bundle generation. Function tools are ``<alias>.<name>``; packs are listed by
    pack id (their tools are added when the pack is instantiated) and MCP servers by ``mcp.<alias>``."""

    alias: str
    entries: tuple[CatalogEntry, ...]

    def __iter__(self) -> Iterator[CatalogEntry]:
        return iter(self.entries)

    @property
    def tool_ids(self) -> list[str]:
        """Every entry's id, sorted."""
        return [entry.tool_id for entry in self.entries]

    def get(self, tool_id: str) -> CatalogEntry | None:
        """The entry for ``tool_id``, if any."""
        return next((entry for entry in self.entries if entry.tool_id == tool_id), None)

    def function_specs(self) -> list[ToolSpec]:
        """The specs of the bundle's own function tools."""
        return [entry.spec for entry in self.entries if entry.spec is not None]


def build_catalog(bundle_id: str, contribution: Any, known_packs: Collection[str] | None = None) -> ToolCatalog:
    """Build the catalog from what ``berth_tools`` returned (a list, or :class:`BundleTools`).

    Raises :class:`CatalogError` listing every problem: an item that is not a tool, a duplicate id,
    a reserved alias, an unknown tool pack (when ``known_packs`` is given), a duplicate MCP alias.
    """
    descriptor = contribution if isinstance(contribution, BundleTools) else BundleTools(items=list(contribution or []))
    alias = descriptor.alias or bundle_id
    problems: list[str] = []
    if alias in RESERVED_NAMESPACES:
        problems.append(f"tool alias '{alias}' is reserved for the platform")
    entries: dict[str, CatalogEntry] = {}

    def add(entry: CatalogEntry, origin: str) -> None:
        if entry.tool_id in entries:
            problems.append(f"tool id '{entry.tool_id}' is contributed twice ({origin})")
        else:
            entries[entry.tool_id] = entry

    for index, item in enumerate(descriptor.items):
        spec = tool_spec_of(item)
        if spec is not None:
            add(CatalogEntry(f"{alias}.{spec.name}", "function", spec=spec), spec.location)
        elif isinstance(item, ToolPack):
            if known_packs is not None and item.id not in known_packs and item.id not in RUNTIME_PACKS:
                known = ", ".join(sorted(known_packs)) or "none installed"
                problems.append(f"unknown tool pack '{item.id}' (known: {known})")
            add(CatalogEntry(item.id, "pack", pack=item), f"tool pack '{item.id}'")
        elif isinstance(item, McpServer):
            add(CatalogEntry(f"mcp.{item.alias}", "mcp", server=item), f"MCP server '{item.alias}'")
        else:
            problems.append(
                f"item {index} of berth_tools is {type(item).__name__}, not a @tool function, ToolPack or McpServer"
            )
    if problems:
        raise CatalogError(problems)
    return ToolCatalog(alias, tuple(sorted(entries.values(), key=lambda entry: entry.tool_id)))
