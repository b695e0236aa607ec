"""Berth: a host for AI agent bundles.

The host core lives in the repository folder ``platform/`` and is installed as ``berth``. When Python
runs with the repository root on ``sys.path`` (``python -c`` or ``python -m`` from there), that folder
would shadow the standard library's ``platform`` module; the first block below hands such an import
over to the real standard-library module, so nothing is ever importable as ``platform`` but stdlib's.
"""

if __name__ == "platform":  # pragma: no cover - exercised in a subprocess by the layout test
    import importlib.util as _util
    import sys as _sys
    import sysconfig as _sysconfig
    from pathlib import Path as _Path

    _spec = _util.spec_from_file_location("platform", _Path(_sysconfig.get_paths()["stdlib"]) / "platform.py")
    assert _spec is not None and _spec.loader is not None
    _stdlib_platform = _util.module_from_spec(_spec)
    _sys.modules["platform"] = _stdlib_platform
    _spec.loader.exec_module(_stdlib_platform)
else:
    from importlib.metadata import PackageNotFoundError, version

    try:
        __version__ = version("berth-platform")
    except PackageNotFoundError:  # a source tree that was never installed
        __version__ = "0.0.0+unknown"

    from berth.bundle import (
        AgentSpec,
        BundleContext,
        BundleInfo,
        KnowledgeDocument,
        KnowledgeSpace,
        MarkdownFolder,
        Skill,
        Widget,
    )
    from berth.hooks import hookimpl
    from berth.tools.contributions import BundleTools, McpServer, ToolPack
    from berth.tools.spec import tool

    __all__ = [
        "AgentSpec",
        "BundleContext",
        "BundleInfo",
        "BundleTools",
        "KnowledgeDocument",
        "KnowledgeSpace",
        "MarkdownFolder",
        "McpServer",
        "Skill",
        "ToolPack",
        "Widget",
        "__version__",
        "hookimpl",
        "tool",
    ]
