"""``berth run`` (serve the API and web UI) and ``berth chat`` (a terminal chat).

``berth worker`` imports this module too, so what only one command needs (uvicorn, httpx, the chat) is imported by
that command.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from berth.cli.bundles import DESCRIPTORS_OPTION

if TYPE_CHECKING:
    from berth.cli.chat_session import ChatBackend
    from berth.config import Configuration
    from berth.turns.services import HostServices


def demo_overrides(config: Configuration) -> dict[str, Any]:
    """Platform overrides that put every model role on the demo model (``berth.default_plugins.models.demo``:
    it plays a clean turn in whichever bundle is active, from the tool catalog and skills it is shown)."""
    demo = {"provider": "demo", "model": "demo", "api_key": None, "base_url": None}
    roles = {role: dict(demo) for role in config.settings_for().models.roles}
    return {"models": {"default": dict(demo), "roles": roles}}


def check_model_credentials(config: Configuration) -> None:
    """Refuse to start when the default model needs a key that is missing, saying how to fix it."""
    from berth.config import ConfigError
    from berth.default_plugins.models.anthropic_names import DEFAULT_SECRET_NAME, SDK_KEY_VARIABLE
    from berth.host.models import resolve_model_secret
    from berth.models.protocol import resolve_api_key

    model = config.settings_for().models.default
    if model.provider != "anthropic":
        return
    try:
        secrets = partial(resolve_model_secret, config)
        resolve_api_key(model, secrets, DEFAULT_SECRET_NAME, SDK_KEY_VARIABLE)
    except ConfigError as exc:
        raise ConfigError(
            "model_key_missing",
            f"the default model ({model.provider}:{model.model}) needs an API key, but {exc}. Set it (export "
            "ANTHROPIC_API_KEY=…, or name it in secrets.yaml as anthropic_api_key), or "
            "try Berth without a key: berth run --demo (the scripted demo model)",
        ) from None


@click.command("run")
@DESCRIPTORS_OPTION
@click.option("--host", help="address to listen on (default: gateway.yaml listen.host, 127.0.0.1)")
@click.option("--port", type=int, help="port (default: gateway.yaml listen.port, 8000)")
@click.option(
    "--reload",
    "--watch",
    "watch",
    is_flag=True,
    help="follow the descriptors (API keys, tenants, bundles) and watched bundle folders when their files change",
)
@click.option("--demo", is_flag=True, help="answer with the scripted demo model (no API key needed)")
@click.option("--var", "var_root", type=click.Path(file_okay=False, path_type=Path), help="storage root override")
@click.option(
    "--check-services",
    is_flag=True,
    help="distributed storage: say whether PostgreSQL, Redis and the artifact store answer, then exit",
)
def run(
    descriptors: Path | None,
    host: str | None,
    port: int | None,
    watch: bool,
    demo: bool,
    var_root: Path | None,
    check_services: bool,
) -> None:
    """Serve the HTTP API and the web UI (with distributed storage: the API only; `berth worker` runs turns)."""
    import uvicorn

    from berth.api.app import create_app
    from berth.config import ConfigError
    from berth.config.environment import host_environment
    from berth.config.models.gateway import is_loopback_host
    from berth.execution.profiles import warn_unisolated
    from berth.logs import configure_logging
    from berth.turns.build import build_services

    configure_logging(host_environment().log_level)
    services = build_services(descriptors, var_root=var_root, watch=watch)
    config = services.initial_config
    assert config is not None
    if check_services:
        report_services(config)
        return
    if demo:
        overrides = demo_overrides(config)
        services = build_services(
            descriptors, var_root=var_root, watch=watch, platform_overrides=overrides, plugins=services.plugins
        )
        config = services.initial_config
        assert config is not None
    else:
        check_model_credentials(config)
    scopes = [(None, None), *config.descriptors.assembly.scopes()]
    warn_unisolated((f"{t}/{p}" if t else "platform", config.settings_for(t, p).exec) for t, p in scopes)
    gateway = config.descriptors.gateway
    bind_host = host or gateway.listen.host
    bind_port = port or gateway.listen.port
    if gateway.auth.mode == "none" and not is_loopback_host(bind_host):
        raise ConfigError(
            "auth_none_public",
            f"auth mode 'none' may only listen on loopback, not {bind_host}; configure API keys in gateway.yaml",
        )
    url = f"http://{'127.0.0.1' if bind_host in ('0.0.0.0', '::') else bind_host}:{bind_port}/"  # noqa: S104
    click.echo(f"Berth {'(demo model) ' if demo else ''}serving on {url}", err=True)
    uvicorn.run(
        create_app(services=services, govern_heap=True),
        host=bind_host,
        port=bind_port,
        log_level="warning",
        log_config=None,
    )


def report_services(config: Configuration) -> None:
    """Print whether each service of a distributed assembly answers; exit 1 when one does not."""
    from berth.host.plugins import PlatformPlugins
    from berth.turns.probes import probe_services

    if config.settings_for().storage.kind != "distributed":
        click.echo("storage is embedded: SQLite and files under the storage root, nothing to reach")
        return
    probes = asyncio.run(probe_services(config, PlatformPlugins.discover()))
    for probe in probes:
        click.echo(f"{probe.service:<18} {'ok' if probe.ok else 'UNREACHABLE':<12} {probe.detail}")
    if not all(probe.ok for probe in probes):
        raise click.exceptions.Exit(1)


async def _feed_lines(given: tuple[str, ...], lines: asyncio.Queue[str | None]) -> None:
    """Put the ``-m`` messages in ``lines``, else what is typed until end of input (then None).

    Typed lines are read on a thread, so the user can type while an answer streams: such a line goes to the
    running turn as a follow-up (``/steer …``: a steer). The view shows the prompt when the chat waits.
    """
    for text in given:  # echoed as each starts its turn
        await lines.put(text)
    if given:
        await lines.put(None)
        return
    click.secho("(/help lists the commands; type while an answer streams to add a follow-up)", dim=True)
    loop = asyncio.get_running_loop()
    # A daemon thread of its own, not the loop's executor: after /quit it is still blocked reading the next line,
    # and asyncio.run waits for every executor thread before it returns (the chat then never ended).
    threading.Thread(target=_read_typed_lines, args=(loop, lines), name="berth-chat-stdin", daemon=True).start()


def _read_typed_lines(loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None]) -> None:
    """Put each non-blank line typed on stdin in ``lines`` (from this thread), then None at end of input."""
    try:
        for text in iter(sys.stdin.readline, ""):
            if text.strip():
                loop.call_soon_threadsafe(lines.put_nowait, text.rstrip("\n"))
    except (EOFError, ValueError, OSError):
        pass
    finally:
        with contextlib.suppress(RuntimeError):  # the loop has closed: the chat is over
            loop.call_soon_threadsafe(lines.put_nowait, None)


async def _converse(backend: ChatBackend, bundle: str | None, given: tuple[str, ...]) -> None:
    from berth.cli.chat_session import ChatRefusedError, converse
    from berth.cli.chat_view import PlainView, chat_view

    try:
        chosen = await backend.new_conversation(bundle)
    except ChatRefusedError as refused:
        raise click.ClickException(f"cannot start a conversation: {refused}") from None
    view = PlainView() if given else chat_view()
    if not given:
        click.secho(f"talking to {chosen}", dim=True)
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    feeding = asyncio.create_task(_feed_lines(given, lines))
    try:
        await converse(backend, lines, live=not given, view=view)
    finally:
        feeding.cancel()


async def _chat_over_http(
    url: str, tenant: str, project: str, bundle: str | None, api_key: str | None, message: tuple[str, ...]
) -> None:
    import httpx

    from berth.cli.chat_session import HttpChat

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        await _converse(HttpChat(client, f"/v1/{tenant}/{project}"), bundle, message)


async def _chat_in_process(
    services: HostServices, tenant: str, project: str, bundle: str | None, message: tuple[str, ...]
) -> None:
    from berth.cli.chat_session import InProcessChat

    await services.start(sweep_retention=False)  # a chat session is no place for a background deletion
    try:
        await _converse(InProcessChat(services, tenant, project), bundle, message)
    finally:
        await services.stop()


@click.command("chat")
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="a running Berth host")
@click.option("--in-process", is_flag=True, help="run the host in this process instead of calling --url")
@DESCRIPTORS_OPTION
@click.option("--demo", is_flag=True, help="with --in-process: answer with the scripted demo model")
@click.option("--tenant", default="default", show_default=True)
@click.option("--project", default="default", show_default=True)
@click.option("--bundle", help="bundle id (default: the project's default bundle)")
@click.option("--api-key", help="API key (default: $BERTH_API_KEY)")
@click.option("--message", "-m", multiple=True, help="send these messages and exit (non-interactive)")
def chat(
    url: str,
    in_process: bool,
    descriptors: Path | None,
    demo: bool,
    tenant: str,
    project: str,
    bundle: str | None,
    api_key: str | None,
    message: tuple[str, ...],
) -> None:
    """Chat in the terminal with a bundle, streaming the answer: against a running host, or in-process."""
    from berth.config.environment import host_environment

    if in_process:
        from berth.config import ConfigError
        from berth.turns.build import build_services

        services = build_services(descriptors)
        config = services.initial_config
        if config is not None and config.settings_for().storage.kind == "distributed":
            raise ConfigError(
                "in_process_distributed",
                "--in-process runs turns in this process, which distributed storage leaves to `berth worker`; "
                "chat with a running API instead (--url)",
            )
        assert config is not None
        if demo:
            services = build_services(descriptors, platform_overrides=demo_overrides(config), plugins=services.plugins)
        else:
            check_model_credentials(config)
        try:
            asyncio.run(_chat_in_process(services, tenant, project, bundle, message))
        except KeyboardInterrupt:
            sys.exit(0)
        return
    import httpx

    key = api_key or host_environment().api_key
    try:
        asyncio.run(_chat_over_http(url, tenant, project, bundle, key, message))
    except httpx.ConnectError:
        raise click.ClickException(f"no Berth host answers at {url}; start one with `berth run`") from None
    except KeyboardInterrupt:
        sys.exit(0)
