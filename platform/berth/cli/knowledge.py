"""``berth knowledge status|reindex|search``: the knowledge spaces of the bundles, from the command line.

Each command loads the bundles of the descriptors in this process (without indexing them as they load),
then works on the persistent indexes under ``platform.knowledge.root`` — the same ones the host serves,
so ``status`` shows the progress of an index another process is building.
"""

from __future__ import annotations

import asyncio
import functools
import json
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from berth.cli.bundles import DESCRIPTORS_OPTION
from berth.cli.table import print_table
from berth.config.errors import ConfigError
from berth.host.runtime import HostRuntime
from berth.knowledge.filters import CHUNK_KINDS, ChunkFilter, FilterError
from berth.knowledge.space import IndexProgress, SpaceIndex
from berth.runtime.tools.knowledge import search_spaces

__all__ = ["knowledge_group"]

VAR_OPTION = click.option(
    "--var", "var_root", type=click.Path(file_okay=False, path_type=Path), help="storage root override (as berth run)"
)
BUNDLE_OPTION = click.option("--bundle", "bundle_id", help="one bundle (default: every bundle with knowledge)")
SCOPE_OPTIONS = (
    click.option("--tenant", help="only bundles this tenant sees"),
    click.option("--project", help="with --tenant: only bundles this project sees"),
)
SPACE_OPTION = click.option("--space", help="one knowledge space of the bundle")


@dataclass(frozen=True)
class Selection:
    """Which spaces a command works on: the descriptors, the storage root, and the bundle/scope/space filters."""

    descriptors: Path | None
    var_root: Path | None
    bundle_id: str | None
    tenant: str | None
    project: str | None
    space: str | None


def _scoped(function: Any) -> Any:
    """Give a command the selecting options; it receives them as one :class:`Selection` (its first argument)."""

    @functools.wraps(function)
    def command(**options: Any) -> Any:
        selection = Selection(**{name: options.pop(name) for name in Selection.__dataclass_fields__})
        return function(selection, **options)

    for option in reversed((DESCRIPTORS_OPTION, VAR_OPTION, BUNDLE_OPTION, *SCOPE_OPTIONS, SPACE_OPTION)):
        command = option(command)
    return command


@click.group("knowledge")
def knowledge_group() -> None:
    """Show, rebuild and search the bundles' knowledge spaces."""


@asynccontextmanager
async def _spaces(selection: Selection) -> AsyncIterator[list[tuple[str, SpaceIndex]]]:
    """Load the bundles (spaces not refreshed) and yield the selected (bundle id, space index) pairs."""
    bundle_id, tenant, project, space = selection.bundle_id, selection.tenant, selection.project, selection.space
    runtime = HostRuntime.for_descriptors(
        selection.descriptors, watch=False, var_root=selection.var_root, refresh_knowledge=False
    )
    await runtime.start()
    try:
        registry = runtime.registry
        assert registry is not None
        visible = _visible_bundles(registry.config, tenant, project)
        chosen: list[tuple[str, SpaceIndex]] = []
        for status in registry.statuses():
            if status.state != "loaded" or (bundle_id and status.id != bundle_id) or status.id not in visible:
                continue
            for name, index in sorted(registry.current(status.id).knowledge.items()):
                if space is None or name == space:
                    chosen.append((status.id, index))
        if bundle_id and not any(b == bundle_id for b, _ in chosen):
            where = f" for {tenant}/{project}" if tenant else ""
            what = f"space '{space}' of bundle '{bundle_id}'" if space else f"bundle '{bundle_id}' with knowledge"
            raise ConfigError("knowledge_space_unknown", f"no loaded {what}{where}")
        yield chosen
    finally:
        await runtime.stop()


def _visible_bundles(config: Any, tenant: str | None, project: str | None) -> set[str]:
    if tenant is None:
        return set(config.descriptors.bundles.bundles)
    if project is None:
        raise click.UsageError("--tenant needs --project")
    return set(config.descriptors.visible_bundles(tenant, project))


@knowledge_group.command("status")
@_scoped
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table", show_default=True)
def status_command(
    selection: Selection,
    output_format: str,
) -> None:
    """Each space's version, files by status, chunks, embedder, errors and any index in progress."""

    async def run() -> list[dict[str, Any]]:
        async with _spaces(selection) as chosen:
            return [{"bundle": b, **asdict(await index.status())} for b, index in chosen]

    statuses = asyncio.run(run())
    if output_format == "json":
        click.echo(json.dumps(statuses, indent=2))
        return
    rows = [["BUNDLE", "SPACE", "VERSION", "FILES", "CHUNKS", "INDEXED", "STATE"]]
    for status in statuses:
        files = ", ".join(f"{count} {state}" for state, count in sorted(status["files"].items())) or "0"
        indexed = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(status["indexed_at"]))
            if status["indexed_at"]
            else "never"
        )
        rows.append(
            [
                status["bundle"],
                status["space"],
                str(status["version"]),
                files,
                str(status["chunks"]),
                indexed,
                _state(status),
            ]
        )
    print_table(rows)
    for status in statuses:
        for path, state, reason in status["skipped"]:
            click.echo(f"  {status['bundle']}/{status['space']}: {path}: {state}: {reason}")
        if status["duplicates"]:
            click.echo(
                f"  {status['bundle']}/{status['space']}: {status['duplicates']} duplicate chunk(s) dropped "
                "(the same text as an earlier chunk of the space)"
            )
        for path, reason, count in status["excluded"]:
            what = f"excluded {path}" if path != "*" else "excluded files"
            click.echo(f"  {status['bundle']}/{status['space']}: {what}: {reason}: {count} file(s)")


def _state(status: dict[str, Any]) -> str:
    progress = status["progress"]
    if progress:
        return (
            f"indexing ({progress['phase']}: files {progress['files_done']}/{progress['files_total']}, "
            f"chunks {progress['chunks_done']}/{progress['chunks_total']})"
        )
    if status["error"]:
        return f"error: {status['error']}"
    return "ready" if status["version"] else "not indexed"


@knowledge_group.command("reindex")
@_scoped
@click.option("--force", is_flag=True, help="re-chunk and re-embed every file, changed or not")
def reindex_command(
    selection: Selection,
    force: bool,
) -> None:
    """Bring the spaces' indexes up to date (only changed files, unless --force), showing progress."""

    shown: dict[str, tuple[str, int]] = {}

    def show(progress: IndexProgress) -> None:
        """One line per phase and per tenth of its work (not one per file)."""
        done, total = (
            (progress.chunks_done, progress.chunks_total)
            if progress.phase == "embedding"
            else (progress.files_done, progress.files_total)
        )
        step = (progress.phase, (done * 10) // total if total else 0)
        if shown.get(progress.space) != step:
            shown[progress.space] = step
            click.echo(f"  {progress.line()}", err=True)

    async def run() -> int:
        failures = 0
        async with _spaces(selection) as chosen:
            for bundle, index in chosen:
                report = await index.refresh(force=force, progress=show)
                if report.error:
                    failures += 1
                    click.echo(f"{bundle}/{index.name}: error: {report.error}")
                    continue
                click.echo(
                    f"{bundle}/{index.name}: version {report.version} — {report.files} files, {report.changed} "
                    f"re-indexed ({report.chunks_written} chunks), {report.removed} removed, {report.skipped} skipped, "
                    f"{report.seconds:.2f} s"
                )
        return failures

    if asyncio.run(run()):
        raise click.exceptions.Exit(1)


@knowledge_group.command("search")
@_scoped
@click.argument("query")
@click.option("--limit", type=click.IntRange(1, 50), default=5, show_default=True)
@click.option("--mode", type=click.Choice(["hybrid", "lexical", "vector"]), default="hybrid", show_default=True)
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--path", "path_glob", help="only files matching this glob ('*.py', 'src/**/*.ts', 'tests/')")
@click.option("--language", help="only files of this language (python, typescript, go, markdown…)")
@click.option("--symbol", help="only definitions of this name or qualified name ('search', 'Store.search')")
@click.option("--kind", type=click.Choice(list(CHUNK_KINDS)), help="only chunks of this kind")
def search_command(
    selection: Selection,
    query: str,
    limit: int,
    mode: str,
    output_format: str,
    path_glob: str | None,
    language: str | None,
    symbol: str | None,
    kind: str | None,
) -> None:
    """Search the spaces as react.search_knowledge does (after bringing them up to date)."""
    try:
        within = ChunkFilter(path=path_glob, language=language, symbol=symbol, kind=kind)
    except FilterError as error:
        raise click.UsageError(str(error)) from None

    async def run() -> list[dict[str, Any]]:
        async with _spaces(selection) as chosen:
            for _, index in chosen:
                await index.refresh()
            spaces = [index for _, index in chosen]
            hits, notes = await search_spaces(
                spaces,
                query,
                limit=limit,
                mode=mode,  # type: ignore[arg-type]
                within=None if within.empty else within,
            )
            for note in notes:
                click.echo(note, err=True)
            return [
                {"path": hit.logical_path, "title": hit.chunk.title, "score": hit.score, "passage": hit.passage}
                for hit in hits
            ]

    hits = asyncio.run(run())
    if output_format == "json":
        click.echo(json.dumps(hits, indent=2))
        return
    if not hits:
        click.echo("no matches")
    for hit in hits:
        click.echo(f"{hit['score']:.4f}  {hit['path']}  ({hit['title']})\n{textwrap.indent(hit['passage'], ' ' * 8)}")
