"""``berth run`` (serve the API and web UI) and ``berth chat`` (a terminal chat)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import click
import httpx

from berth.api.app import build_services, create_app
from berth.api.errors import ApiError
from berth.api.services import HostServices, new_id
from berth.api.sse import TurnEventLog
from berth.cli.bundles import DESCRIPTORS_OPTION
from berth.config import ConfigError, Configuration
from berth.config.environment import host_environment
from berth.config.models.gateway import is_loopback_host
from berth.default_plugins.models.anthropic import DEFAULT_SECRET_NAME, SDK_KEY_VARIABLE
from berth.execution.profiles import warn_unisolated
from berth.host.models import resolve_model_secret
from berth.logs import configure_logging
from berth.models.protocol import resolve_api_key
from berth.storage.meta import ConversationMeta
from berth.storage.scope import ConversationScope


def demo_overrides(config: Configuration) -> dict[str, Any]:
    """Platform overrides that put every model role on the demo model (``berth.default_plugins.models.demo``:
    it plays a clean turn in whichever bundle is active, from the tool catalog and skills it is shown)."""
    demo = {"provider": "demo", "model": "demo", "api_key": None, "base_url": None}
    roles = {role: dict(demo) for role in config.settings_for().models.roles}
    return {"models": {"default": dict(demo), "roles": roles}}


def check_model_credentials(config: Configuration) -> None:
    """Refuse to start when the default model needs a key that is missing, saying how to fix it."""
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
@click.option("--reload", "watch", is_flag=True, help="development: reload bundles and descriptors when files change")
@click.option("--demo", is_flag=True, help="answer with the scripted demo model (no API key needed)")
@click.option("--var", "var_root", type=click.Path(file_okay=False, path_type=Path), help="storage root override")
def run(
    descriptors: Path | None, host: str | None, port: int | None, watch: bool, demo: bool, var_root: Path | None
) -> None:
    """Serve the HTTP API and the web UI."""
    import uvicorn

    configure_logging(host_environment().log_level)
    services = build_services(descriptors, var_root=var_root, watch=watch)
    config = services.initial_config
    assert config is not None
    if demo:
        services = build_services(
            descriptors, var_root=var_root, watch=watch, platform_overrides=demo_overrides(config)
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


async def _print_events(lines: AsyncIterator[str]) -> None:
    """Print a turn's SSE lines: the answer as it streams, tool calls, notices, follow-ups, failures."""
    event = ""
    async for line in lines:
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            if event == "channel.delta" and data.get("marker") == "answer":
                click.echo(data["text"], nl=False)
            elif event == "tool.call":
                click.secho(f"  · {data['tool_id']}", fg="cyan", err=True)
            elif event == "notice":  # as the web UI shows them: a quiet line (a queued turn says so here)
                click.secho(f"  ! {data.get('message')}", dim=True, err=True)
            elif event == "turn.completed":
                click.echo()
                for followup in data.get("followups") or []:
                    click.secho(f"  → {followup}", fg="green")
                return
            elif event == "turn.failed":
                click.secho(f"\nturn failed [{data.get('code')}]: {data.get('message')}", fg="red", err=True)
                return


async def _messages(given: tuple[str, ...]) -> AsyncIterator[str]:
    """The ``-m`` messages, or lines typed at the prompt until end of input."""
    for text in given:
        click.secho(f"> {text}", fg="yellow")
        yield text
    if given:
        return
    while True:
        try:
            text = await asyncio.to_thread(input, "> ")
        except EOFError:
            return
        if text.strip():
            yield text


def _refusal(status: int, body: bytes) -> str:
    """What the host's JSON error says (``message (code)``, and when to retry), or the raw status."""
    try:
        error = json.loads(body)["error"]
        text = f"{error['message']} ({error['code']})"
    except (ValueError, KeyError, TypeError):
        text = f"HTTP {status}"
    return text


async def _chat_over_http(
    url: str, tenant: str, project: str, bundle: str | None, api_key: str | None, message: tuple[str, ...]
) -> None:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
        prefix = f"/v1/{tenant}/{project}"
        created = await client.post(f"{prefix}/conversations", json={"bundle": bundle} if bundle else {})
        if created.status_code != 201:
            raise click.ClickException(f"cannot start a conversation: {_refusal(created.status_code, created.content)}")
        turns = f"{prefix}/conversations/{created.json()['id']}/turns"
        async for text in _messages(message):
            # one request per turn: the events come in the response
            async with client.stream(
                "POST", turns, json={"message": text}, headers={"Accept": "text/event-stream"}, timeout=None
            ) as response:
                if response.status_code != 200:
                    refusal = _refusal(response.status_code, await response.aread())
                    click.secho(f"refused: {refusal}", fg="red", err=True)
                    continue
                await _print_events(response.aiter_lines())


async def _chat_in_process(
    services: HostServices, tenant: str, project: str, bundle: str | None, message: tuple[str, ...]
) -> None:
    await services.start()
    try:
        visible = services.config.descriptors.scope_bundles(tenant, project)
        chosen = bundle or visible.default_bundle or (visible.bundles[0] if visible.bundles else None)
        if chosen is None or chosen not in visible.bundles:
            raise click.ClickException(f"bundle {chosen!r} is not available in {tenant}/{project}")
        now = datetime.now(UTC)
        scope = ConversationScope(tenant=tenant, project=project, user_id="local", conversation_id=new_id("c"))
        assert services.meta is not None
        await services.meta.create_conversation(ConversationMeta(scope, None, chosen, now, now))
        async for text in _messages(message):
            try:
                running = await services.start_turn(scope, chosen, text)
            except ApiError as refused:
                click.secho(f"refused: {refused.message} ({refused.code})", fg="red", err=True)
                continue

            async def lines(log: TurnEventLog = running.log) -> AsyncIterator[str]:
                async for frame in log.frames():
                    for line in frame.decode().splitlines():
                        yield line

            await _print_events(lines())
            if running.task is not None:
                await running.task  # its bookkeeping (memory index, title) ends before the next turn or exit
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
    if in_process:
        services = build_services(descriptors)
        config = services.initial_config
        assert config is not None
        if demo:
            services = build_services(descriptors, platform_overrides=demo_overrides(config))
        else:
            check_model_credentials(config)
        try:
            asyncio.run(_chat_in_process(services, tenant, project, bundle, message))
        except KeyboardInterrupt:
            sys.exit(0)
        return
    key = api_key or host_environment().api_key
    try:
        asyncio.run(_chat_over_http(url, tenant, project, bundle, key, message))
    except httpx.ConnectError:
        raise click.ClickException(f"no Berth host answers at {url}; start one with `berth run`") from None
    except KeyboardInterrupt:
        sys.exit(0)
