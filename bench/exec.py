"""Start-to-result latency of isolated execution against a bare subprocess, both measured in this run.

Run: ``.venv/bin/python bench/exec.py`` (about half a minute; ``--quick`` for a few seconds). Needs root and
bubblewrap for the local sandbox (``berth exec doctor`` says what is missing); without them it prints why and
exits 0.

Two programs, each timed from "run this code" to "the result is in hand":

* **trivial**: ``print("ok")``;
* **10 tool calls**: ten calls of a bundle tool (``t.echo``) through ``berth_exec.tools`` to the supervisor.

Arms:

* **bare subprocess** (the baseline): ``subprocess.run([/usr/bin/python3, file])`` with no isolation. For the
  tool-call program it is given the supervisor's socket and token directly, so it makes the same ten round trips
  over the same Unix socket to the same in-process supervisor;
* **local (bwrap)**: :class:`berth.execution.runs.ExecService` with the ``local`` backend: run folder, supervisor,
  bubblewrap sandbox with its own uid, limits, output collection, envelope.

* **docker split**: the same service with the ``docker`` backend (``berth-docker``): a fresh executor container
  per run (``--network none``, read-only root, no capabilities, limits), when a Docker engine answers on
  ``DOCKER_HOST`` and has the exec image (``--docker-image``, default ``berth-exec:latest``; ``berth exec
  build-image`` makes it).

It prints median, min and max per arm (the machine is noisy) and the ratio to bare. Targets: the local sandbox
within 3x of the bare subprocess; docker split under 1.5 s. The Fargate backend joins this table when it lands.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

from berth.default_plugins.exec.local import LocalBackend, bwrap_works, package_folder
from berth.execution.limits import ExecLimits
from berth.execution.runs import ExecService
from berth.execution.sandbox import ExecBackend
from berth.execution.supervisor import Supervisor

PYTHON = "/usr/bin/python3"
TRIVIAL = 'print("ok")\n'
TOOL_CALLS = "from berth_exec import tools\nfor i in range(10):\n    tools.call('t.echo', i=i)\nprint('ok')\n"
BARE_PRELUDE = (
    "import os, sys\nsys.path.insert(0, os.environ['BENCH_EXEC_PATH'])\nfrom berth_exec import tools\n"
    "tools.configure(os.environ['SUPERVISOR_SOCKET_PATH'], os.environ['BENCH_TOKEN'])\n"
)


class EchoTools:
    """One tool, ``t.echo``, answering with its params: the supervisor's round trip is what is measured."""

    @property
    def tool_ids(self) -> Collection[str]:
        return {"t.echo"}

    async def call(self, tool_id: str, params: dict[str, Any]) -> Any:
        return params

    async def read(self, path: str) -> str:
        return ""


async def bare(code: str, folder: Path, with_tools: bool) -> float:
    """Run ``code`` with ``subprocess.run([python, file])``; with tools, against an in-process supervisor."""
    program = folder / "program.py"
    program.write_text((BARE_PRELUDE if with_tools else "") + code)
    environment = {"PATH": "/usr/bin:/bin"}
    supervisor = None
    if with_tools:
        token = secrets.token_urlsafe(32)
        socket_path = folder / "bare.sock"
        supervisor = Supervisor(socket_path, token, os.getuid(), EchoTools())
        await supervisor.start()
        environment |= {
            "SUPERVISOR_SOCKET_PATH": str(socket_path),
            "BENCH_TOKEN": token,
            "BENCH_EXEC_PATH": str(package_folder().parent),
        }
    started = time.perf_counter()
    done = await asyncio.to_thread(
        subprocess.run, [PYTHON, str(program)], capture_output=True, env=environment, check=False
    )
    elapsed = time.perf_counter() - started
    if supervisor is not None:
        await supervisor.aclose()
    assert done.returncode == 0 and done.stdout.strip() == b"ok", done.stderr
    return elapsed


async def sandboxed(service: ExecService, backend: ExecBackend, code: str, with_tools: bool) -> float:
    """Run ``code`` through the exec service and ``backend``."""
    started = time.perf_counter()
    run = await service.run(
        code,
        backend=backend,
        limits=ExecLimits(timeout_s=30),
        bundle_id="bench",
        dispatch=EchoTools() if with_tools else None,
    )
    elapsed = time.perf_counter() - started
    assert run.envelope.ok and run.envelope.user_out_tail.strip() == "ok", run.envelope.report_text
    return elapsed


async def measure(runs: int, backends: dict[str, ExecBackend]) -> list[tuple[str, str, list[float]]]:
    """Every (program, arm) timed ``runs`` times, arms interleaved so that slow phases hit all of them."""
    service = ExecService(root=Path(tempfile.gettempdir()) / f"berth-exec-bench-{os.getpid()}")
    rows: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        arms: list[tuple[str, str, Callable[[], Awaitable[float]]]] = []
        for label, code, with_tools in (("trivial", TRIVIAL, False), ("10 tool calls", TOOL_CALLS, True)):
            arms.append((label, "bare subprocess", lambda c=code, t=with_tools: bare(c, folder, t)))
            for name, backend in backends.items():
                arms.append((label, name, lambda b=backend, c=code, t=with_tools: sandboxed(service, b, c, t)))
        for _, _, arm in arms:  # warm-up: caches, imports
            await arm()
        for _ in range(runs):
            for label, name, arm in arms:
                rows.setdefault((label, name), []).append(await arm())
    return [(label, name, times) for (label, name), times in rows.items()]


def print_table(rows: list[tuple[str, str, list[float]]]) -> None:
    """Median, min, max in ms per arm, and local/bare per program."""
    print(f"{'program':<15}{'arm':<18}{'median ms':>10}{'min':>9}{'max':>9}{'x bare':>10}")
    medians = {(label, name): statistics.median(times) for label, name, times in rows}
    for label, name, times in rows:
        ratio = medians[(label, name)] / medians[(label, "bare subprocess")]
        print(
            f"{label:<15}{name:<18}{medians[(label, name)] * 1000:>10.1f}{min(times) * 1000:>9.1f}"
            f"{max(times) * 1000:>9.1f}{ratio:>9.2f}x"
        )
    print("targets: local (bwrap) within 3x of the bare subprocess; docker split under 1500 ms")


def docker_backend(image: str) -> ExecBackend | None:
    """The docker split backend, when berth-docker is installed and an engine with ``image`` answers."""
    try:
        from berth_docker.backend import DockerBackend
    except ImportError:
        print("docker arm skipped: berth-docker is not installed")
        return None
    backend = DockerBackend(image=image, strategy="split")
    missing = [finding for finding in backend.doctor() if not finding.ok]
    if missing:
        print(f"docker arm skipped: {missing[0].check}: {missing[0].detail}")
        return None
    return backend


def main() -> None:
    """Parse the options, check the sandbox is here, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs per arm (default 15)")
    parser.add_argument("--quick", action="store_true", help="3 runs per arm: a smoke test of the script")
    parser.add_argument("--docker-image", default="berth-exec:latest", help="the exec image of the docker arm")
    options = parser.parse_args()
    if os.geteuid() != 0 or not bwrap_works() or not Path(PYTHON).is_file():
        print("skipped: the local sandbox needs root, bubblewrap and /usr/bin/python3 (see berth exec doctor)")
        return
    backends: dict[str, ExecBackend] = {"local (bwrap)": LocalBackend(isolation="bwrap")}
    docker = docker_backend(options.docker_image)
    if docker is not None:
        backends["docker split"] = docker
    rows = asyncio.run(measure(3 if options.quick else options.runs, backends))
    print_table(rows)


if __name__ == "__main__":
    sys.exit(main())
