"""``berth worker``: a host process that loads bundles and follows reloads; with distributed storage, it also
claims queued turns and runs them (:mod:`berth.distributed.worker`)."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import click

from berth.cli.bundles import DESCRIPTORS_OPTION
from berth.cli.serve import check_model_credentials, demo_overrides
from berth.config.environment import host_environment
from berth.distributed.health import WorkerHealthServer
from berth.distributed.worker import TurnWorker, WorkerSettings
from berth.host.runtime import HostRuntime
from berth.logs import configure_logging
from berth.turns.build import build_services


@click.command("worker")
@DESCRIPTORS_OPTION
@click.option("--worker-id", help="name of this process in reports and in the turn queue (default: host-pid)")
@click.option("--no-watch", is_flag=True, help="do not watch bundle folders and descriptors")
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="turns run at once (at most gateway.yaml's backpressure.max_inflight_turns_per_worker)",
)
@click.option(
    "--lease",
    "lease_s",
    type=click.FloatRange(min=0.5),
    default=15.0,
    show_default=True,
    help="seconds after which another worker takes over the turns of a worker that stopped renewing them",
)
@click.option("--demo", is_flag=True, help="answer with the scripted demo model (as `berth run --demo`)")
@click.option(
    "--health-port",
    type=click.IntRange(min=0, max=65535),
    help="serve /healthz, /readyz and /metrics on this port (distributed mode; probes of an orchestrator)",
)
@click.option("--health-host", default="0.0.0.0", show_default=True, help="address of the health port")  # noqa: S104
def worker(
    descriptors: Path | None,
    worker_id: str | None,
    no_watch: bool,
    concurrency: int,
    lease_s: float,
    demo: bool,
    health_port: int | None,
    health_host: str,
) -> None:
    """Run a host process: load bundles and follow reloads; with distributed storage, run queued turns."""
    configure_logging(host_environment().log_level)
    services = build_services(descriptors, watch=not no_watch, worker_id=worker_id)
    config = services.initial_config
    assert config is not None
    if config.settings_for().storage.kind != "distributed":
        asyncio.run(_follow_reloads(descriptors, worker_id, watch=not no_watch))
        return
    if demo:
        services = build_services(
            descriptors, watch=not no_watch, worker_id=worker_id, platform_overrides=demo_overrides(config)
        )
    else:
        check_model_credentials(config)

    async def run() -> None:
        await services.start()
        turns = TurnWorker(services, WorkerSettings(concurrency=concurrency, lease_s=lease_s), name=worker_id)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, turns.stop)
        loop.add_signal_handler(signal.SIGUSR1, _print_tasks)
        health = None
        if health_port is not None:
            health = WorkerHealthServer(turns, host=health_host, port=health_port)
            await health.start()
        if turns.capacity < concurrency:
            click.echo(
                f"--concurrency {concurrency} is capped at {turns.capacity} by gateway.yaml's "
                "backpressure.max_inflight_turns_per_worker",
                err=True,
            )
        click.echo(f"worker {turns.name} ready: runs up to {turns.capacity} queued turns", err=True)
        try:
            await turns.run()
        finally:
            if health is not None:
                await health.aclose()
            await services.stop()

    asyncio.run(run())


async def _follow_reloads(descriptors: Path | None, worker_id: str | None, *, watch: bool) -> None:
    """Embedded storage: a host process that loads bundles and follows reloads (turns run in `berth run`)."""
    runtime = HostRuntime.for_descriptors(descriptors, worker_id=worker_id, watch=watch)
    for outcome in await runtime.start():
        state = f"generation {outcome.generation}" if outcome.ok else f"FAILED {outcome.error}"
        click.echo(f"{outcome.bundle_id}: {state}")
    click.echo(f"worker {runtime.worker_id} ready", err=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await runtime.stop()


def _print_tasks() -> None:
    """``kill -USR1 <worker>``: print where each task of the worker waits (to find a turn that does not end)."""
    for task in asyncio.all_tasks():
        click.echo(f"--- {task.get_name()}", err=True)
        task.print_stack(limit=12, file=sys.stderr)
