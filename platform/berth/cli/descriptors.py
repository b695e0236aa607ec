"""``berth descriptors check|show|schema``."""

from __future__ import annotations

import json
from pathlib import Path

import click
import yaml

from berth.config import Configuration, find_descriptors_dir
from berth.config.descriptors import DESCRIPTOR_MODELS
from berth.config.display import effective_view
from berth.config.errors import DescriptorError
from berth.config.settings import unknown_override_variables
from berth.host.plugins import PlatformPlugins

DIR_ARGUMENT = click.argument(
    "directory", required=False, type=click.Path(file_okay=False, path_type=Path), metavar="[DIR]"
)


def load_configuration(directory: Path | None) -> Configuration:
    """Load the descriptors in ``directory`` (or the default location) with the installed plugins."""
    root = find_descriptors_dir(directory)
    plugins = PlatformPlugins.discover()
    return Configuration.load(root, secret_providers=plugins.secret_providers())


@click.group("descriptors")
def descriptors_group() -> None:
    """Validate, show and export the operator's YAML descriptors."""


@descriptors_group.command("check")
@DIR_ARGUMENT
def check(directory: Path | None) -> None:
    """Validate a descriptor set; list every problem (exit 2) or summarize it (exit 0)."""
    config = load_configuration(directory)
    problems = unknown_override_variables()
    if problems:
        raise DescriptorError(problems)
    descriptors = config.descriptors
    scopes = descriptors.assembly.scopes()
    where = str(descriptors.root) if descriptors.root is not None else "embedded defaults"
    click.echo(
        f"ok: {where}: {len(descriptors.present)} descriptor file(s), "
        f"{len(descriptors.assembly.tenants)} tenant(s), {len(scopes)} project(s), "
        f"{len(descriptors.bundles.bundles)} bundle(s), {len(descriptors.secrets.root)} secret(s)"
    )


@descriptors_group.command("show")
@DIR_ARGUMENT
@click.option("--tenant", help="resolve the effective settings of this tenant")
@click.option("--project", help="... and this project of it (needs --tenant)")
@click.option("--format", "output_format", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
def show(directory: Path | None, tenant: str | None, project: str | None, output_format: str) -> None:
    """Print the effective configuration, secrets masked as ***."""
    if project is not None and tenant is None:
        raise click.UsageError("--project needs --tenant")
    view = effective_view(load_configuration(directory), tenant, project)
    if output_format == "json":
        click.echo(json.dumps(view, indent=2))
    else:
        click.echo(yaml.safe_dump(view, sort_keys=False, allow_unicode=True), nl=False)


@descriptors_group.command("schema")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
def schema(out_dir: Path) -> None:
    """Write a JSON Schema for each descriptor into OUT_DIR (for editors)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, path in write_schemas(out_dir).items():
        click.echo(f"{name} -> {path}")


def descriptor_schemas() -> dict[str, dict[str, object]]:
    """The JSON Schema of each descriptor file, by file name."""
    schemas = {}
    for file_name, model in DESCRIPTOR_MODELS.items():
        document = model.model_json_schema()
        document = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": file_name,
            **{k: v for k, v in document.items() if k != "title"},
        }
        schemas[file_name] = document
    return schemas


def write_schemas(out_dir: Path) -> dict[str, Path]:
    """Write :func:`descriptor_schemas` as ``<name>.schema.json`` files; return the paths."""
    written = {}
    for file_name, document in descriptor_schemas().items():
        path = out_dir / file_name.replace(".yaml", ".schema.json")
        path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        written[file_name] = path
    return written
