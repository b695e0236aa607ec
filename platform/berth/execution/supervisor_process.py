"""The supervisor as a process of its own: ``python -m berth.execution.supervisor_process``.

This is how a supervisor runs away from the host (the Docker split strategy's supervisor container, a Fargate
task). It reads its launch payload and descriptors from the environment (:mod:`berth.execution.payload`),
materializes the descriptors into a private folder, loads the active bundle through the normal host code (so
``ctx.settings``, ``ctx.props`` and ``ctx.secret("b:…")`` are exactly what the API process gives the bundle in
that scope), and serves the bundle's tools on the payload's socket until it is told to stop (SIGTERM/SIGINT).
It prints ``ready <socket>`` on stdout once it listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from berth.config import Configuration
from berth.config.environment import exec_launch_variables
from berth.execution.dispatch import ScopedToolDispatch
from berth.execution.payload import PAYLOAD_VARIABLE, LaunchPayload, materialize
from berth.execution.supervisor import Supervisor
from berth.host.plugins import PlatformPlugins
from berth.host.registry import BundleRegistry
from berth.knowledge.service import KnowledgeService


class SupervisorStartError(Exception):
    """The supervisor could not start: no payload, or the bundle did not load."""


@contextlib.asynccontextmanager
async def supervising(environment: Mapping[str, str], descriptors_dir: Path) -> AsyncIterator[Supervisor]:
    """Materialize the descriptors of ``environment``, load the payload's bundle and serve its tools on the
    payload's socket for the duration of the block."""
    if PAYLOAD_VARIABLE not in environment:
        raise SupervisorStartError(f"{PAYLOAD_VARIABLE} is not set")
    payload = LaunchPayload.from_json(environment[PAYLOAD_VARIABLE])
    plugins = PlatformPlugins.discover()
    config = Configuration.load(materialize(environment, descriptors_dir), secret_providers=plugins.secret_providers())
    knowledge = KnowledgeService.for_config(config)
    knowledge.auto_refresh = False  # tools run here; the host indexes the knowledge spaces
    registry = BundleRegistry(config, known_tool_packs=set(plugins.tool_packs()), knowledge=knowledge)
    outcomes = await registry.start()
    try:
        failed = [outcome for outcome in outcomes if outcome.bundle_id == payload.bundle_id and not outcome.ok]
        if failed:
            raise SupervisorStartError(f"bundle '{payload.bundle_id}' failed to load: {failed[0].error}")
        async with registry.use(payload.bundle_id) as generation:
            context = registry.context_for(generation, payload.tenant, payload.project)
            scoped = generation.tools_in(context, plugins.tool_packs())
            supervisor = Supervisor(
                Path(payload.socket_path),
                payload.token,
                payload.executor_uid,
                ScopedToolDispatch(scoped.specs),
                call_timeout_s=payload.call_timeout_s,
            )
            await supervisor.start()
            try:
                yield supervisor
            finally:
                await supervisor.aclose()
    finally:
        await registry.close()


async def serve(environment: dict[str, str], descriptors_dir: Path) -> int:
    """Serve one run's bundle tools until SIGTERM/SIGINT; return the exit status."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        async with supervising(environment, descriptors_dir) as supervisor:
            sys.stdout.write(f"ready {supervisor.socket_path}\n")
            sys.stdout.flush()
            await stop.wait()
    except SupervisorStartError as error:
        sys.stderr.write(f"error: {error}\n")
        return 2 if PAYLOAD_VARIABLE in str(error) else 1
    return 0


def main() -> None:
    """Entry point: materialize into a private temporary folder and serve."""
    with tempfile.TemporaryDirectory(prefix="berth-supervisor-") as folder:
        descriptors_dir = Path(folder) / "descriptors"
        with contextlib.suppress(KeyboardInterrupt):
            sys.exit(asyncio.run(serve(exec_launch_variables(), descriptors_dir)))


if __name__ == "__main__":
    main()
