"""The packages of ``platform/berth`` import one way (docs/architecture.md, "Layers"): each package imports only the
packages it is allowed to, and no two modules import each other, directly or round a circle.

Read from the source with :mod:`ast`, every ``import`` counted: at module level, inside functions (lazy imports)
and under ``TYPE_CHECKING``; a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "platform"

CORE = frozenset({"berth", "bundle", "hooks", "tools", "knowledge", "models", "runtime", "execution", "usage"})
"""What bundles and the runtime are made of; its packages import one another (below ``host``)."""
BASE = frozenset({"config", "logs", "storage", "streaming", "gateway"})
"""What the core stands on."""

ALLOWED: dict[str, frozenset[str]] = {
    "config": frozenset({"logs"}),
    "logs": frozenset({"config"}),
    "streaming": frozenset(),
    "storage": frozenset({"config"}),
    "gateway": frozenset({"config", "storage"}),
    **{package: BASE | CORE for package in CORE},
    "default_plugins": BASE | CORE,
    "host": BASE | CORE,
    "turns": BASE | CORE | {"default_plugins", "host"},
    "api": BASE | CORE | {"host", "turns"},
    "distributed": BASE | CORE | {"host", "turns"},
    "cli": BASE | CORE | {"default_plugins", "host", "turns", "distributed", "api"},
    "testing": BASE | CORE | {"default_plugins", "host", "turns"},
}
"""The packages each package may import (besides itself). ``api`` and ``distributed`` never import each other;
nothing imports ``api``, ``distributed`` or ``cli`` but ``cli``."""

EXCEPTIONS: dict[tuple[str, str], str] = {
    ("berth.execution.supervisor_process", "host"): "the supervisor away from the host loads the bundle as a host does",
    ("berth.runtime.loop", "host"): "names BundleGeneration for type checking only",
    ("berth.cli.__init__", "api"): "berth run preloads the app while the descriptors load",
}
"""Single modules allowed an import their package is not, with the reason."""

CLI_API_USERS = frozenset({"berth.cli.serve", "berth.cli.__init__"})
"""``cli`` imports ``api`` only to serve HTTP."""


@dataclass(frozen=True)
class Import:
    """One import statement's target, as a module name (``berth.turns.services``)."""

    source: str
    target: str
    line: int


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts)


def berth_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted((ROOT / "berth").rglob("*.py"))}


def imports_of(name: str, path: Path) -> Iterator[Import]:
    package = name.split(".")[:-1]  # the package of berth.api.sse and of berth.api.__init__ is berth.api
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            yield Import(name, base, node.lineno)
            for alias in node.names:  # ``from berth.api import services`` imports the module berth.api.services
                yield Import(name, f"{base}.{alias.name}", node.lineno)


def top_package(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "berth":
        return None
    if len(parts) == 1 or parts[1] == "__init__":
        return "berth"
    return parts[1]


def all_imports() -> list[Import]:
    modules = berth_modules()
    return [found for name, path in modules.items() for found in imports_of(name, path)]


def test_each_package_imports_only_the_layers_below_it() -> None:
    modules = berth_modules()
    wrong = []
    for found in all_imports():
        source, target = top_package(found.source), top_package(found.target)
        if source is None or target is None or source == target or (target == "berth" and source in CORE):
            continue
        if found.target not in modules and f"{found.target}.__init__" not in modules:
            continue  # a name imported from a module, not a module
        allowed = ALLOWED.get(source, frozenset()) | ({"berth"} if source != "berth" else set())
        if target in allowed or (found.source, target) in EXCEPTIONS:
            continue
        wrong.append(f"{found.source}:{found.line} imports {found.target} ({source} may not import {target})")
    assert wrong == []


def test_cli_imports_the_api_only_to_serve_http() -> None:
    users = {f.source for f in all_imports() if top_package(f.source) == "cli" and top_package(f.target) == "api"}
    assert users <= CLI_API_USERS


def test_no_module_imports_itself_round_a_circle() -> None:
    modules = berth_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for found in all_imports():
        for candidate in (found.target, f"{found.target}.__init__"):
            if candidate in modules and candidate != found.source and not candidate.endswith(".__init__"):
                graph[found.source].add(candidate)
    assert strongly_connected(graph) == []


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of ``graph``: its strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return circles


@pytest.mark.parametrize(
    ("graph", "circles"),
    [
        ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_the_circle_finder_finds_circles(graph: dict[str, set[str]], circles: list[list[str]]) -> None:
    assert strongly_connected(graph) == circles
