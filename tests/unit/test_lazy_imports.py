"""What importing a Berth module costs: each imports only what it runs at import (issue 34, lazy start-up).

Each check runs in a fresh interpreter, so modules other tests imported do not hide an import.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def modules_after(code: str, watched: tuple[str, ...]) -> list[str]:
    """The ``watched`` modules (or packages: any module under them) loaded after running ``code`` afresh."""
    probe = (
        f"{code}\n"
        "import json, sys\n"
        f"watched = {watched!r}\n"
        "loaded = sorted(w for w in watched if any(m == w or m.startswith(w + '.') for m in sys.modules))\n"
        "print(json.dumps(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_import_berth_leaves_the_bundle_api_for_its_first_use() -> None:
    assert modules_after("import berth", ("pydantic", "berth.bundle", "berth.tools", "importlib.metadata")) == []


def test_the_bundle_api_names_come_from_berth_on_first_use() -> None:
    import berth
    from berth import BundleInfo, hookimpl, tool
    from berth.bundle.info import BundleInfo as Defined
    from berth.hooks import hookimpl as defined_hookimpl
    from berth.tools.spec import tool as defined_tool

    assert (BundleInfo, hookimpl, tool) == (Defined, defined_hookimpl, defined_tool)
    assert set(berth.__all__) <= set(dir(berth))
    assert all(getattr(berth, name) is not None for name in berth.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = berth.nope  # type: ignore[attr-defined]


def test_the_version_is_the_installed_distributions() -> None:
    from importlib.metadata import version

    import berth

    assert berth.__version__ == version("berth-platform")


def test_the_plugin_modules_import_no_backend() -> None:
    """The host loads every platform plugin at start-up: a plugin module imports its backend when it is used."""
    plugins = (
        "berth.default_plugins.models.anthropic_plugin",
        "berth.default_plugins.models.openai_compatible",
        "berth.default_plugins.models.scripted",
        "berth.default_plugins.models.demo",
        "berth.default_plugins.tools.web",
        "berth.default_plugins.storage.embedded",
        "berth.default_plugins.embedders.hashed",
        "berth_aws.secrets",
        "berth_aws.fargate",
        "berth_aws.artifacts",
        "berth_docker.backend",
        "berth_postgres.plugin",
    )
    backends = (
        "anthropic",
        "httpx",
        "trafilatura",
        "boto3",
        "botocore",
        "docker",
        "asyncpg",
        "numpy",
        "sqlite3",
        "PIL",
    )
    code = "\n".join(f"import {module}" for module in plugins)
    lazy = ("berth.runtime", "berth.default_plugins.storage.sqlite", "berth.default_plugins.tools.web.pack")
    watched = (*backends, *lazy)
    assert modules_after(code, watched) == []


def test_pillow_is_loaded_by_the_first_image_that_needs_it_not_by_the_runtime() -> None:
    """Images are downscaled for a model only when one is over its limits (issue 37): Pillow stays unloaded."""
    code = (
        "import berth.runtime.images, berth.runtime.attachments, berth.runtime.live, berth.runtime.loop, "
        "berth.runtime.media, berth.runtime.tools.read, berth.turns.build, berth.testing.fakes.media"
    )
    assert modules_after(code, ("PIL", "numpy")) == []
    used = "from berth.runtime.images import image_size\nimage_size(b'not an image')"
    assert modules_after(used, ("PIL",)) == ["PIL"]


def test_the_model_events_do_not_import_the_renderer() -> None:
    code = "import berth.models.events, berth.models.errors, berth.models"
    assert modules_after(code, ("berth.runtime", "berth.models.protocol")) == []


def test_the_model_names_are_one_class_wherever_they_are_imported_from() -> None:
    from berth.models import ModelCompleted, Usage, events, protocol

    assert Usage is protocol.Usage is events.Usage
    assert ModelCompleted is protocol.ModelCompleted is events.ModelCompleted


def test_building_host_services_imports_neither_fastapi_nor_the_mcp_sdk() -> None:
    """``berth worker`` builds its services with :func:`berth.turns.build.build_services` and serves no API."""
    watched = ("fastapi", "mcp", "mcp_types", "berth.api.routes", "berth.api.mcp_server", "jsonschema", "numpy")
    code = "import berth.turns.build, berth.turns.readiness, berth.distributed.worker, berth.distributed.health"
    assert modules_after(code, watched) == []


def test_mcp_clients_load_the_sdk_only_with_a_session() -> None:
    watched = ("mcp", "mcp_types", "httpx2")
    assert modules_after("import berth.tools.mcp, berth.runtime.mcp_tools", watched) == []


def test_the_knowledge_modules_load_their_parsers_and_numpy_on_first_use() -> None:
    code = "import berth.knowledge.text, berth.knowledge.space, berth.knowledge.sqlite_store, berth.runtime.memory"
    assert modules_after(code, ("lxml", "markdown_it", "numpy")) == []


def test_the_constants_named_to_spare_an_import_match_their_source() -> None:
    from mcp.server.streamable_http import MCP_SESSION_ID_HEADER

    import berth.default_plugins.tools.web as web_plugin
    from berth.api import mcp_server
    from berth.default_plugins.tools.web import pack, searxng

    assert mcp_server.MCP_SESSION_ID_HEADER == MCP_SESSION_ID_HEADER
    assert pack.SEARXNG == searxng.BACKEND_NAME
    assert web_plugin.WEB_PACK_ID == pack.PACK_ID


def test_the_documented_error_responses_are_built_once() -> None:
    from berth.api import errors

    assert errors.SCOPED_ERRORS is errors.SCOPED_ERRORS
    assert set(errors.SCOPED_ERRORS) == {400, 401, 404, 409, 413, 415, 422, 429, 503}
    assert set(errors.ADMIN_ERRORS) == {401, 403, 404, 413, 422, 503}
    with pytest.raises(AttributeError):
        _ = errors.OTHER_ERRORS  # type: ignore[attr-defined]


def test_the_config_packages_light_modules_do_not_load_the_descriptor_models() -> None:
    code = "import berth.config.errors, berth.config.redaction"
    assert modules_after(code, ("pydantic", "berth.config.models", "berth.config.configuration", "yaml")) == []


def test_the_config_package_offers_its_names_on_first_use() -> None:
    import berth.config
    from berth.config import (
        ConfigError,
        Configuration,
        DescriptorError,
        Secret,
        configuration,
        errors,
        find_descriptors_dir,
        secrets,
    )

    assert (Configuration, find_descriptors_dir) == (configuration.Configuration, configuration.find_descriptors_dir)
    assert (ConfigError, DescriptorError, Secret) == (errors.ConfigError, errors.DescriptorError, secrets.Secret)
    assert all(getattr(berth.config, name) is not None for name in berth.config.__all__)
    with pytest.raises(AttributeError):
        _ = berth.config.nope  # type: ignore[attr-defined]
