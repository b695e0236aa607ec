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
* **local (landlock)**: the same service and backend with ``isolation: landlock`` (the Helm chart's default: no
  sandbox built around the executor, which confines itself with Landlock and seccomp), when the kernel has Landlock
  ABI 6.

* **docker split**: the same service with the ``docker`` backend (``berth-docker``): a fresh executor container
  per run (``--network none``, read-only root, no capabilities, limits), when a Docker engine answers on
  ``DOCKER_HOST`` and has the exec image (``--docker-image``, default ``berth-exec:latest``; ``berth exec
  build-image`` makes it);
* **docker combined**: one container per run holding the supervisor (this checkout's Python, mounted read-only)
  and the executor; the supervisor loads the ``hello`` bundle from the example descriptors and serves its tools;
* **fargate (moto)**: the ``fargate`` backend (``berth-aws``) against moto's server in this process, each task
  played in Docker by :class:`berth_aws.testing.TaskPlayer`: S3 snapshot, payload secret, ``run_task``,
  ``describe_tasks`` every 50 ms, restore, cleanup. Real Fargate adds its provisioning (typically 30-60 s) and
  network round trips to AWS, which no machine here can measure.

The tool-call program calls ``hello.greet`` ten times. For the arms whose supervisor is the host
(bare, local, docker split) an in-process stand-in answers it as the bundle does; for combined and fargate the
bundle itself answers, from the descriptors the run was given.

It prints median, min and max per arm (the machine is noisy) and the ratio to bare, then where a local run's
time goes: the trivial program started ever closer to the full run, each step's median beside the one before
(interpreter start alone, the bootstrap, bubblewrap's namespaces — or instead the bootstrap's Landlock and
seccomp confinement —, the run's cgroups, the exec service's run folder and supervisor and output collection),
and what a docker combined run adds to a split one (the supervisor's own
start in the container: interpreter, imports of Berth, loading the bundle). The two arms that start a
supervisor per run (combined, fargate) are timed ``--slow-runs`` times (default 5; 1 with ``--quick``). Targets:
the local sandbox within 3x of the bare subprocess; docker split under 1.5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _machine import header

from berth.config import Configuration
from berth.default_plugins.exec.landlocked import landlock_abi, run_confinement
from berth.default_plugins.exec.local import LocalBackend, bwrap_works, package_folder
from berth.execution.limits import ExecLimits
from berth.execution.payload import SupervisorScope, supervisor_scope_of
from berth.execution.runs import ExecService
from berth.execution.sandbox import (
    EXECUTOR_BOOTSTRAP,
    EXECUTOR_FLAGS,
    PROGRAM_NAME,
    SANDBOX_PACKAGE_DIR,
    SANDBOX_PROGRAM_DIR,
    ExecBackend,
    RunFolder,
    SandboxRequest,
)
from berth.execution.supervisor import Supervisor
from berth_exec.landlock import FULL_ABI
from berth_exec.runner import launch_lines

PYTHON = "/usr/bin/python3"
REPO = Path(__file__).resolve().parents[1]
TRIVIAL = 'print("ok")\n'
TOOL_CALLS = (
    "from berth_exec import tools\nfor i in range(10):\n    tools.call('hello.greet', name=str(i))\nprint('ok')\n"
)
BARE_PRELUDE = (
    "import os, sys\nsys.path.insert(0, os.environ['BENCH_EXEC_PATH'])\nfrom berth_exec import tools\n"
    "tools.configure(os.environ['SUPERVISOR_SOCKET_PATH'], os.environ['BENCH_TOKEN'])\n"
)


class GreetTools:
    """``hello.greet``, answered in-process as the bundle does: the supervisor's round trip is what is measured."""

    @property
    def tool_ids(self) -> Collection[str]:
        return {"hello.greet"}

    async def call(self, tool_id: str, params: dict[str, Any]) -> Any:
        return f"Hello, {params['name']}!"

    async def read(self, path: str) -> str:
        return ""


@dataclass
class Arm:
    """A backend timed in the table, and what its runs need."""

    backend: ExecBackend
    scope: SupervisorScope | None = None
    """For a backend that runs the supervisor itself: the scope and descriptors it serves the bundle from."""
    slow: bool = False
    """Starts a supervisor per run: timed ``--slow-runs`` times."""


async def bare(code: str, folder: Path, with_tools: bool) -> float:
    """Run ``code`` with ``subprocess.run([python, file])``; with tools, against an in-process supervisor."""
    program = folder / "program.py"
    program.write_text((BARE_PRELUDE if with_tools else "") + code)
    environment = {"PATH": "/usr/bin:/bin"}
    supervisor = None
    if with_tools:
        token = secrets.token_urlsafe(32)
        socket_path = folder / "bare.sock"
        supervisor = Supervisor(socket_path, token, os.getuid(), GreetTools())
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


async def sandboxed(service: ExecService, arm: Arm, code: str, with_tools: bool) -> float:
    """Run ``code`` through the exec service and the arm's backend."""
    started = time.perf_counter()
    run = await service.run(
        code,
        backend=arm.backend,
        limits=ExecLimits(timeout_s=60),
        bundle_id="hello",
        dispatch=GreetTools() if with_tools and arm.scope is None else None,
        supervisor_scope=arm.scope if with_tools else None,
    )
    elapsed = time.perf_counter() - started
    assert run.envelope.ok and run.envelope.user_out_tail.strip() == "ok", run.envelope.report_text
    return elapsed


async def measure(runs: int, slow_runs: int, arms: dict[str, Arm]) -> list[tuple[str, str, list[float]]]:
    """Every (program, arm) timed ``runs`` times (slow arms ``slow_runs``), arms interleaved so that slow phases
    hit all of them."""
    service = ExecService(root=Path(tempfile.gettempdir()) / f"berth-exec-bench-{os.getpid()}")
    rows: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        timed: list[tuple[str, str, bool, Callable[[], Awaitable[float]]]] = []
        for label, code, with_tools in (("trivial", TRIVIAL, False), ("10 tool calls", TOOL_CALLS, True)):
            timed.append((label, "bare subprocess", False, lambda c=code, t=with_tools: bare(c, folder, t)))
            for name, arm in arms.items():
                run = lambda a=arm, c=code, t=with_tools: sandboxed(service, a, c, t)  # noqa: E731
                timed.append((label, name, arm.slow, run))
        for _, _, slow, run in timed:  # warm-up: caches, imports (the slow arms' first run is timed with --quick)
            if not slow or slow_runs > 1:
                await run()
        for index in range(runs):
            for label, name, slow, run in timed:
                if not slow or index < slow_runs:
                    rows.setdefault((label, name), []).append(await run())
    return [(label, name, times) for (label, name), times in rows.items()]


async def local_breakdown(runs: int) -> list[tuple[str, float, float]]:
    """``(step, median ms, added over the step it builds on)`` for the trivial program, from interpreter start alone
    to the full local run, with bubblewrap and (where the kernel has it) with Landlock; every step is timed ``runs``
    times, steps interleaved."""
    service = ExecService(root=Path(tempfile.gettempdir()) / f"berth-exec-bench-{os.getpid()}-steps")
    with tempfile.TemporaryDirectory() as scratch:
        program = Path(scratch) / "main.py"
        program.write_text(TRIVIAL)
        launch = launch_lines("bench", str(program), ExecLimits().launch_limits()).encode()
        bootstrap = EXECUTOR_BOOTSTRAP.replace(repr(SANDBOX_PACKAGE_DIR), repr(str(package_folder().parent)))
        sandbox = LocalBackend(isolation="bwrap", use_cgroups=False)
        bwrap_argv = bwrap_command(sandbox, program)
        bwrap_launch = launch_lines("bench", f"{SANDBOX_PROGRAM_DIR}/{PROGRAM_NAME}", ExecLimits().launch_limits())
        bootstrap_step = "+ executor bootstrap, the program"
        # (label, the step it adds to, timed call)
        steps: list[tuple[str, str, Callable[[], Awaitable[float]]]] = [
            (
                "interpreter start (python3 -I -c pass)",
                "",
                lambda: timed_process([PYTHON, *EXECUTOR_FLAGS, "-c", "pass"]),
            ),
            (
                bootstrap_step,
                "interpreter start (python3 -I -c pass)",
                lambda: timed_process([PYTHON, *EXECUTOR_FLAGS, "-c", bootstrap], launch),
            ),
            ("+ bubblewrap sandbox", bootstrap_step, lambda: timed_process(bwrap_argv, bwrap_launch.encode())),
            (
                "+ run folder, uid, supervisor, outputs",
                "+ bubblewrap sandbox",
                lambda: sandboxed(service, Arm(sandbox), TRIVIAL, False),
            ),
            (
                "+ cgroups (full local run)",
                "+ run folder, uid, supervisor, outputs",
                lambda: sandboxed(service, Arm(LocalBackend(isolation="bwrap")), TRIVIAL, False),
            ),
        ]
        if landlock_abi() >= FULL_ABI:
            folder = RunFolder(program.parent / "run")  # made by bwrap_command
            confined = run_confinement(folder, python=PYTHON, package=package_folder(), minimum_abi=FULL_ABI)
            limits = ExecLimits().launch_limits()
            landlock_launch = launch_lines("bench", str(folder.program), limits, confined).encode()
            plain_landlock = LocalBackend(isolation="landlock", use_cgroups=False)
            steps += [
                (
                    "+ Landlock, seccomp (not bubblewrap)",
                    bootstrap_step,
                    lambda: timed_process([PYTHON, *EXECUTOR_FLAGS, "-c", bootstrap], landlock_launch),
                ),
                (
                    "+ run folder, uid, supervisor, outputs (L)",
                    "+ Landlock, seccomp (not bubblewrap)",
                    lambda: sandboxed(service, Arm(plain_landlock), TRIVIAL, False),
                ),
                (
                    "+ cgroups (full local landlock run)",
                    "+ run folder, uid, supervisor, outputs (L)",
                    lambda: sandboxed(service, Arm(LocalBackend(isolation="landlock")), TRIVIAL, False),
                ),
            ]
        times: dict[str, list[float]] = {}
        for _, _, step in steps:
            await step()
        for _ in range(runs):
            for label, _, step in steps:
                times.setdefault(label, []).append(await step())
    medians = {label: statistics.median(times[label]) * 1000 for label, _, _ in steps}
    return [(label, medians[label], medians[label] - medians.get(base, 0.0)) for label, base, _ in steps]


def bwrap_command(backend: LocalBackend, program: Path) -> list[str]:
    """The local backend's bubblewrap argv for a run whose program folder is ``program``'s (as this uid)."""
    folder = RunFolder(program.parent / "run")
    for path in (folder.work, folder.out, folder.socket_dir, folder.logs):
        path.mkdir(parents=True, exist_ok=True)
    folder.program.parent.mkdir(parents=True, exist_ok=True)
    folder.program.write_text(program.read_text())
    request = SandboxRequest("ex_bench", "hello", folder, "bench", ExecLimits(), os.getuid(), os.getgid(), False)
    argv, _ = backend.command(request, "bwrap")
    return argv


async def timed_process(argv: list[str], stdin: bytes = b"") -> float:
    """Seconds from start to end of ``argv`` fed ``stdin`` (its output discarded; it must exit 0)."""
    started = time.perf_counter()
    done = await asyncio.to_thread(subprocess.run, argv, input=stdin, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    return elapsed


def print_breakdown(steps: list[tuple[str, float, float]], rows: list[tuple[str, str, list[float]]]) -> None:
    """The local run's steps, and what docker combined adds to split."""
    print("\nwhere a local run of the trivial program goes (medians, same run)")
    print(f"{'step':<42}{'ms':>8}{'added':>8}")
    for label, median, added in steps:
        print(f"{label:<42}{median:>8.1f}{added:>+8.1f}")
    medians = {(label, name): statistics.median(times) * 1000 for label, name, times in rows}
    bare_ms = medians[("trivial", "bare subprocess")]
    local_ms = medians[("trivial", "local (bwrap)")]
    print(f"local over bare: +{local_ms - bare_ms:.1f} ms ({local_ms / bare_ms:.2f}x); target: 3x or +25 ms")
    if ("trivial", "local (landlock)") in medians:
        landlock_ms = medians[("trivial", "local (landlock)")]
        print(f"local landlock over bwrap: {landlock_ms - local_ms:+.1f} ms ({landlock_ms / local_ms:.2f}x)")
    if ("trivial", "docker combined") in medians:
        added = medians[("trivial", "docker combined")] - medians[("trivial", "docker split")]
        print(
            f"docker combined over split: +{added:.0f} ms, the supervisor's start in the container (interpreter, "
            "Berth's imports, the bundle loaded from the run's descriptors) before the executor can start"
        )


def print_table(rows: list[tuple[str, str, list[float]]]) -> None:
    """Median, min, max in ms per arm, and local/bare per program."""
    print(f"{'program':<15}{'arm':<18}{'median ms':>10}{'min':>9}{'max':>9}{'x bare':>10}{'runs':>6}")
    medians = {(label, name): statistics.median(times) for label, name, times in rows}
    for label, name, times in rows:
        ratio = medians[(label, name)] / medians[(label, "bare subprocess")]
        print(
            f"{label:<15}{name:<18}{medians[(label, name)] * 1000:>10.1f}{min(times) * 1000:>9.1f}"
            f"{max(times) * 1000:>9.1f}{ratio:>9.2f}x{len(times):>6}"
        )
    print("targets: local (bwrap) within 3x of the bare subprocess; docker split under 1500 ms")


def docker_arms(image: str) -> dict[str, Arm]:
    """The docker split and combined arms, when berth-docker is installed and an engine with ``image`` answers."""
    try:
        from berth_docker.backend import DockerBackend
    except ImportError:
        print("docker arms skipped: berth-docker is not installed")
        return {}
    split = DockerBackend(image=image, strategy="split")
    missing = [finding for finding in split.doctor() if not finding.ok]
    if missing:
        print(f"docker arms skipped: {missing[0].check}: {missing[0].detail}")
        return {}
    combined = DockerBackend(
        image=image, strategy="combined", supervisor_python=sys.executable, mounts=supervisor_mounts()
    )
    return {"docker split": Arm(split), "docker combined": Arm(combined, example_scope(), slow=True)}


def supervisor_mounts() -> list[str]:
    """This checkout and its base interpreter, read-only at the same paths: the supervisor's Python."""
    base = Path(sys.base_prefix).resolve()
    return [f"{REPO}:{REPO}:ro", f"{base}:{base}:ro"]


def example_scope() -> SupervisorScope:
    """acme/support of the example descriptors, where the ``hello`` bundle is enabled."""
    config = Configuration.load(REPO / "descriptors")
    return supervisor_scope_of(config, "acme", "support")


@contextmanager
def fargate_arm(image: str) -> Iterator[dict[str, Arm]]:
    """The fargate arm against moto in this process, its tasks played in Docker (needs berth-aws and moto)."""
    try:
        from berth_docker.engine import client_for
        from moto.ecs.models import ecs_backends
        from moto.server import ThreadedMotoServer

        from berth_aws.fargate import FargateBackend
        from berth_aws.testing import TaskPlayer, create_exec_world
    except ImportError as error:
        print(f"fargate arm skipped: {error.name} is not installed")
        yield {}
        return
    for name, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench")):
        os.environ.setdefault(name, value)  # moto accepts any; boto3 insists on some
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    base = Path(sys.base_prefix).resolve()
    world = create_exec_world(f"http://127.0.0.1:{port}", image)
    player = TaskPlayer(
        backend=ecs_backends["123456789012"]["eu-west-1"],
        docker=client_for(None),
        mounts={str(REPO): {"bind": str(REPO), "mode": "ro"}, str(base): {"bind": str(base), "mode": "ro"}},
        credentials={"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"},
        endpoint=f"http://127.0.0.1:{port}",
    )
    player.install()
    try:
        profile = {
            **world["profile"],
            "supervisor_python": sys.executable,
            "hidden_paths": [str(REPO), str(base)],
            "executor_namespaces": False,  # as on Fargate, whose tasks cannot be granted CAP_SYS_ADMIN
        }
        yield {"fargate (moto)": Arm(FargateBackend.from_profile(profile), example_scope(), slow=True)}
    finally:
        player.uninstall()
        server.stop()


def main() -> None:
    """Parse the options, check the sandbox is here, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs per arm (default 15)")
    parser.add_argument("--slow-runs", type=int, default=5, help="timed runs of docker combined and fargate (5)")
    parser.add_argument("--quick", action="store_true", help="3 runs per arm (1 for the slow ones): a smoke test")
    parser.add_argument("--docker-image", default="berth-exec:latest", help="the exec image of the docker arms")
    options = parser.parse_args()
    if os.geteuid() != 0 or not bwrap_works() or not Path(PYTHON).is_file():
        print("skipped: the local sandbox needs root, bubblewrap and /usr/bin/python3 (see berth exec doctor)")
        return
    arms: dict[str, Arm] = {"local (bwrap)": Arm(LocalBackend(isolation="bwrap"))}
    if landlock_abi() >= FULL_ABI:
        arms["local (landlock)"] = Arm(LocalBackend(isolation="landlock"))
    arms |= docker_arms(options.docker_image)
    with contextlib.ExitStack() as stack:
        if "docker split" in arms:
            arms |= stack.enter_context(fargate_arm(options.docker_image))
        runs, slow_runs = (3, 1) if options.quick else (options.runs, options.slow_runs)
        rows = asyncio.run(measure(runs, slow_runs, arms))
        steps = asyncio.run(local_breakdown(runs))
    print_table(rows)
    print_breakdown(steps, rows)


if __name__ == "__main__":
    print(header(), flush=True)
    sys.exit(main())
