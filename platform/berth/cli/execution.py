"""``berth exec run`` and ``berth exec doctor``: isolated execution from the command line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from berth.cli.table import print_table
from berth.config import Configuration, find_descriptors_dir
from berth.execution.dispatch import ScopedToolDispatch
from berth.execution.payload import supervisor_scope_of
from berth.execution.profiles import ExecProfileError, Execution
from berth.execution.sandbox import ImageBuilding
from berth.host.plugins import PlatformPlugins


@click.group("exec")
def exec_group() -> None:
    """Run programs in the isolated executor; check what isolation this machine gives."""


def _execution(plugins: PlatformPlugins) -> Execution:
    return Execution(plugins.exec_backends())


@exec_group.command("run")
@click.argument("program", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--descriptors",
    type=click.Path(file_okay=False, path_type=Path),
    help="descriptor folder (default: $BERTH_DESCRIPTORS, then ./descriptors, then embedded defaults)",
)
@click.option("--profile", help="exec profile (default: platform.exec.default_profile)")
@click.option("--bundle", "bundle_id", help="serve this bundle's tools to the program")
@click.option("--tenant", help="the tenant whose settings, props and secrets the bundle's tools see")
@click.option("--project", help="the project (with --tenant)")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("exec-out"),
    show_default=True,
    help="where to keep the files the program writes under OUTPUT_DIR (and the program itself)",
)
def run_program(
    program: Path,
    descriptors: Path | None,
    profile: str | None,
    bundle_id: str | None,
    tenant: str | None,
    project: str | None,
    out_dir: Path,
) -> None:
    """Run PROGRAM (a Python file) in the sandbox of an exec profile and print the result envelope as JSON.

    Exits 0 when the program succeeded, 1 otherwise (the envelope says why).
    """
    if (tenant is None) != (project is None):
        raise click.UsageError("--tenant and --project go together")
    if bundle_id is not None and tenant is None:
        raise click.UsageError("--bundle needs --tenant and --project: its tools run in that scope")
    plugins = PlatformPlugins.discover()
    config = Configuration.load(find_descriptors_dir(descriptors), secret_providers=plugins.secret_providers())
    settings = config.settings_for(tenant, project)
    execution = _execution(plugins)
    execution.configure(config.settings_for().exec)  # the platform's runs root and uid lock folder
    chosen = profile or settings.exec.default_profile
    try:
        backend, limits = execution.backend(settings.exec, chosen)
    except ExecProfileError as error:
        raise click.ClickException(f"[{error.code}] {error.message}") from None
    code = program.read_text(encoding="utf-8")
    store = _keeper(out_dir)
    envelope = asyncio.run(_run(config, plugins, execution, code, backend, limits, bundle_id, tenant, project, store))
    click.echo(json.dumps(envelope, indent=2))
    if not envelope["ok"]:
        raise click.exceptions.Exit(1)


async def _run(
    config: Configuration,
    plugins: PlatformPlugins,
    execution: Execution,
    code: str,
    backend: Any,
    limits: Any,
    bundle_id: str | None,
    tenant: str | None,
    project: str | None,
    store: Callable[[str, bytes], str],
) -> dict[str, Any]:
    if bundle_id is None or tenant is None or project is None:
        run = await execution.service.run(code, backend=backend, limits=limits, bundle_id="-", store=store)
        return run.envelope.to_json()
    from berth.host.registry import BundleRegistry
    from berth.knowledge.service import KnowledgeService

    knowledge = KnowledgeService.for_config(config)
    knowledge.auto_refresh = False  # tools run here; the host indexes the knowledge spaces
    registry = BundleRegistry(config, known_tool_packs=set(plugins.tool_packs()), knowledge=knowledge)
    outcomes = await registry.start()
    failed = [outcome for outcome in outcomes if outcome.bundle_id == bundle_id and not outcome.ok]
    if failed:
        raise click.ClickException(f"bundle '{bundle_id}' failed to load: {failed[0].error}")
    try:
        async with registry.use(bundle_id) as generation:
            context = registry.context_for(generation, tenant, project)
            scoped = generation.tools_in(context, plugins.tool_packs())
            run = await execution.service.run(
                code,
                backend=backend,
                limits=limits,
                bundle_id=bundle_id,
                dispatch=ScopedToolDispatch(scoped.specs),
                store=store,
                supervisor_scope=supervisor_scope_of(config, tenant, project),
            )
            return run.envelope.to_json()
    finally:
        await registry.close()


def _keeper(out_dir: Path) -> Callable[[str, bytes], str]:
    """Keep each output file under ``out_dir`` (relative paths only: the service collected them safely)."""

    def keep(relative: str, data: bytes) -> str:
        target = out_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return str(target)

    return keep


@exec_group.command("doctor")
@click.option(
    "--descriptors",
    type=click.Path(file_okay=False, path_type=Path),
    help="descriptor folder (default: $BERTH_DESCRIPTORS, then ./descriptors, then embedded defaults)",
)
def doctor(descriptors: Path | None) -> None:
    """Say for every configured exec profile which isolation this machine really gives, and what is missing.

    Exits 1 when any check is not met (0 when every one is)."""
    plugins = PlatformPlugins.discover()
    config = Configuration.load(find_descriptors_dir(descriptors), secret_providers=plugins.secret_providers())
    execution = _execution(plugins)
    exec_config = config.settings_for().exec
    rows = [["PROFILE", "BACKEND", "CHECK", "OK", "DETAIL"]]
    missing = 0
    for name in sorted(exec_config.profiles):
        backend_name = exec_config.profiles[name].backend
        try:
            backend, _ = execution.backend(exec_config, name)
        except ExecProfileError as error:
            rows.append([name, backend_name, "backend installed", "no", error.message])
            missing += 1
            continue
        for finding in backend.doctor():
            rows.append([name, backend_name, finding.check, "yes" if finding.ok else "no", finding.detail])
            missing += 0 if finding.ok else 1
    print_table(rows)
    click.echo(f"{missing} check(s) not met" if missing else "every check is met", err=True)
    if missing:
        raise click.exceptions.Exit(1)


@exec_group.command("build-image")
@click.option(
    "--descriptors",
    type=click.Path(file_okay=False, path_type=Path),
    help="descriptor folder (default: $BERTH_DESCRIPTORS, then ./descriptors, then embedded defaults)",
)
@click.option("--profile", help="the exec profile whose image to build (default: the first that runs in an image)")
@click.option("--base", default="berth-exec-base:offline", show_default=True, help="the image to build on")
@click.option(
    "--context",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="folder with the Dockerfile and berth_exec/ (default: the checkout's exec/)",
)
def build_image(descriptors: Path | None, profile: str | None, base: str, context: Path | None) -> None:
    """Build the exec image of a profile (``exec/Dockerfile`` on BASE), showing the build's progress."""
    plugins = PlatformPlugins.discover()
    config = Configuration.load(find_descriptors_dir(descriptors), secret_providers=plugins.secret_providers())
    execution = _execution(plugins)
    exec_config = config.settings_for().exec
    names = [profile] if profile else sorted(exec_config.profiles)
    builder: ImageBuilding | None = None
    for name in names:
        try:
            backend, _ = execution.backend(exec_config, name)
        except ExecProfileError as error:
            if profile:
                raise click.ClickException(f"[{error.code}] {error.message}") from None
            continue
        if isinstance(backend, ImageBuilding):
            builder = backend
            break
        if profile:
            raise click.ClickException(f"exec profile '{profile}' ({backend.name}) runs in no image")
    if builder is None:
        factory = execution.backends.get("docker")
        if factory is None:
            raise click.ClickException("no exec profile runs in an image and the docker backend is not installed")
        built = factory({"backend": "docker"})
        assert isinstance(built, ImageBuilding)
        builder = built
    click.echo(f"building {builder.image} on {base}", err=True)
    try:
        summary = builder.build_image(base=base, context=str(context) if context else None, progress=click.echo)
    except Exception as error:  # the backend's engine errors say what failed and what to do
        raise click.ClickException(str(error)) from None
    click.echo(summary, err=True)
