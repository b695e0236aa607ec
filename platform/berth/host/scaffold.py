"""``berth bundles new NAME``: a new bundle project that installs and loads unchanged."""

from __future__ import annotations

import re
from pathlib import Path

from berth import __version__
from berth.config.errors import ConfigError
from berth.config.models.common import BUNDLE_ID_PATTERN

_PYPROJECT = """\
[build-system]
requires = ["setuptools>=70"]
build-backend = "setuptools.build_meta"

[project]
name = "berth-bundle-{bundle_id}"
version = "0.1.0"
description = "A Berth bundle."
requires-python = ">=3.11"
dependencies = ["berth-platform>={berth_version}"]

[project.optional-dependencies]
test = ["pytest>=8"]

[project.entry-points."berth.bundles"]
{bundle_id} = "{package}"

[tool.setuptools]
packages = ["{package}"]
"""

_INIT = '''\
"""The ``{bundle_id}`` bundle."""

from __future__ import annotations

from pydantic import BaseModel

from berth import AgentSpec, BundleContext, BundleInfo, hookimpl

from .tools import echo


class Props(BaseModel):
    """Settings operators may override per tenant/project in bundles.yaml (every field needs a default)."""

    prefix: str = "echo:"


@hookimpl
def berth_bundle() -> BundleInfo:
    """Identify the bundle (the id must match its name in bundles.yaml)."""
    return BundleInfo(id="{bundle_id}", version="0.1.0", title="{title}", props_model=Props)


@hookimpl
def berth_agent(ctx: BundleContext) -> AgentSpec:
    """How the shared runtime serves this bundle's chat."""
    return AgentSpec(instructions="You are the {title} assistant.")


@hookimpl
def berth_tools(ctx: BundleContext) -> list[object]:
    """The bundle's tools descriptor: @tool functions, ToolPack(...) and McpServer(...) entries."""
    return [echo]
'''

_TOOLS = '''\
"""The bundle's tools. Import your own modules relatively (``from .tools import echo``)."""

from __future__ import annotations

from berth import tool


@tool(read_only=True)
def echo(text: str) -> str:
    """Return the text unchanged.

    Args:
        text: what to echo.
    """
    return text
'''

_TEST = '''\
"""Tests of the ``{bundle_id}`` bundle, using Berth's fixtures (berth.testing)."""

from __future__ import annotations

from collections.abc import Callable

from berth.testing import BundleHost


def test_echo_tool_returns_its_input(bundle_host: Callable[..., BundleHost]) -> None:
    host = bundle_host(["{bundle_id}"])
    assert host.call_tool("{bundle_id}", "{bundle_id}.echo", {{"text": "hi"}}) == "hi"
'''

_README = """\
# {title}

A Berth bundle. Develop it with:

```bash
pip install -e .            # registers the entry point '{bundle_id}' in group berth.bundles
berth bundles list          # with '{bundle_id}: {{source: {{entry_point: {bundle_id}}}}}' in bundles.yaml
berth run --demo --reload   # serve it; with --reload, saving a file of this folder reloads the bundle
pytest                      # its tests, with the bundle_host fixture
```

`--reload` watches the source folder of every bundle installed in editable mode (`pip install -e`, as above):
edit `tools.py`, save, and the next turn runs the new code (in-flight turns finish on the old one). Install
before you start the host: a package installed in editable mode while it runs is found after a restart.

`--demo` answers without a model key: the demo model reads the bundle's first skill and calls its first tool
whose required params it can fill from their schema, so a first message shows `echo` at work.
"""


def scaffold_bundle(bundle_id: str, parent: Path) -> Path:
    """Write a new bundle project ``parent/<bundle_id>``; return its folder."""
    if not re.fullmatch(BUNDLE_ID_PATTERN, bundle_id):
        raise ConfigError("bundle_id_invalid", f"'{bundle_id}' is not a bundle id: it must match {BUNDLE_ID_PATTERN}")
    target = parent / bundle_id
    if target.exists():
        raise ConfigError("bundle_exists", f"{target} already exists; choose another name or folder")
    package = bundle_id.replace("-", "_") + "_bundle"
    title = bundle_id.replace("-", " ").title()
    values = {"bundle_id": bundle_id, "package": package, "title": title, "berth_version": __version__.split("+")[0]}
    files = {
        "pyproject.toml": _PYPROJECT,
        f"{package}/__init__.py": _INIT,
        f"{package}/tools.py": _TOOLS,
        "tests/test_bundle.py": _TEST,
        "README.md": _README,
    }
    for relative, template in files.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**values), encoding="utf-8")
    return target
