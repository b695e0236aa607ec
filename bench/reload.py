"""Hot reload of a bundle under load against a full process restart, both measured in this run.

Run: ``.venv/bin/python bench/reload.py`` (about a minute on two cores). The ``hello`` example bundle
is copied to a temporary folder and used as a folder bundle; each save changes one character of the
``hello.greet`` greeting (``Hello r001`` → ``Hello r002`` …, so the file keeps its size, like fixing a
typo), and for every save the script measures

* **hot reload** — a :class:`~berth.host.runtime.HostRuntime` in this process with ``watch: true``
  (the same runtime ``berth worker`` runs), while ``--callers`` tasks call ``hello.greet`` back to
  back through ``registry.use("hello")``. *swap* is save → the registry reports the new generation
  serving (a reload listener); *serving* is save → the first call that returns the new greeting.
  Every exception a caller sees is a failed call;
* **full restart** — the baseline: a host process (``HostRuntime`` with ``watch=False`` plus one
  call, started with ``python -c``) is stopped with SIGTERM right after the save and a new one is
  started. *swap* is save → the new process has loaded its bundles; *serving* is save → it returns
  the new greeting from its first call.

It prints a table (median and nearest-rank p95 per column) and the restart/reload ratio. A restart
has no process serving between SIGTERM and the new process's first call, so every call that arrives
then fails; the restart row's calls are therefore *estimated*: the hot-reload phase's measured call
rate times the downtime (failed) and times the restart phase's duration (total).

Python's bytecode cache is on by default, as in a plain ``python``; ``--no-bytecode-cache`` runs as
under ``PYTHONDONTWRITEBYTECODE=1``. A save whose reload swaps in a generation that still returns the
old greeting is counted as *stale* and left out of the timings.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from _machine import header

from berth.host.generation import BundleGeneration
from berth.host.registry import BundleRegistry, ReloadOutcome
from berth.host.runtime import HostRuntime
from berth.testing import write_descriptors

BUNDLE_ID = "hello"
TOOL_ID = "hello.greet"
PARAMS = {"name": "x"}
SOURCE = Path(__file__).resolve().parents[1] / "bundles" / "hello" / "hello_bundle"
GREETING = '"en": "Hello"'
WATCHER_START_TIMEOUT_S = 5.0

# The restart baseline's host process: the start-up path of ``berth worker`` (HostRuntime) and one call.
HOST_PROCESS = """
import asyncio, signal, sys
from pathlib import Path
from berth.host.runtime import HostRuntime

async def main() -> None:
    runtime = HostRuntime.for_descriptors(Path(sys.argv[1]), watch=False)
    outcomes = await runtime.start()
    failed = [str(outcome.error) for outcome in outcomes if not outcome.ok]
    if failed:
        print("error", *failed, flush=True)
        sys.exit(1)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("loaded", flush=True)
    async with runtime.registry.use(sys.argv[2]) as generation:
        result = await generation.catalog.get(sys.argv[3]).spec.invoke({"name": "x"})
    print("serving", result, flush=True)
    await stop.wait()
    await runtime.stop()

asyncio.run(main())
"""

TrialState = Literal["served", "stale", "missed"]


@dataclass(frozen=True)
class Trial:
    """One save: how long until the new code was swapped in and served, or why it never was."""

    state: TrialState
    swap_s: float | None
    serving_s: float | None
    downtime_s: float = 0.0


@dataclass
class ArmResult:
    """The trials of one way to pick up a change, with the calls made meanwhile."""

    name: str
    trials: list[Trial]
    calls: int
    failed_calls: int
    calls_estimated: bool
    phase_s: float
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class GreetingEditor:
    """Saves versions of ``greetings.py`` whose greeting carries a version number of fixed width."""

    def __init__(self, greetings: Path) -> None:
        self._path = greetings
        self._original = greetings.read_text()
        if GREETING not in self._original:
            raise RuntimeError(f"{greetings} no longer contains {GREETING}; update bench/reload.py")

    def save(self, version: int) -> float:
        """Write version ``version`` and return the time (``perf_counter``) right after the write."""
        self._path.write_text(self._original.replace(GREETING, f'"en": "Hello r{version:03d}"'))
        return time.perf_counter()

    @staticmethod
    def expected(version: int) -> str:
        """What ``hello.greet`` returns for ``PARAMS`` once version ``version`` serves."""
        return f"Hello r{version:03d}, {PARAMS['name']}!"


class CallLoad:
    """``callers`` tasks calling ``hello.greet`` back to back, each call pinned to its generation."""

    def __init__(self, registry: BundleRegistry, callers: int) -> None:
        self._registry = registry
        self._callers = callers
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._wanted: str | None = None
        self._seen = asyncio.Event()
        self.seen_at = 0.0
        self.calls = 0
        self.failures: list[str] = []
        self.latencies: list[float] = []

    def start(self) -> None:
        """Start the callers."""
        self._tasks = [asyncio.create_task(self._call_forever()) for _ in range(self._callers)]

    async def stop(self) -> None:
        """Let every caller finish its current call, then end."""
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def wait_for(self, result: str, timeout_s: float) -> float | None:
        """The ``perf_counter`` time the first call returned ``result``, or None after ``timeout_s``."""
        self._wanted = result
        self._seen.clear()
        try:
            await asyncio.wait_for(self._seen.wait(), timeout_s)
        except TimeoutError:
            return None
        finally:
            self._wanted = None
        return self.seen_at

    async def _call_forever(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                async with self._registry.use(BUNDLE_ID) as generation:
                    result = await call_greet(generation)
            except Exception as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
                continue
            finished = time.perf_counter()
            self.calls += 1
            self.latencies.append(finished - started)
            if result == self._wanted and not self._seen.is_set():
                self.seen_at = finished
                self._seen.set()


async def call_greet(generation: BundleGeneration) -> object:
    """Call ``hello.greet`` on ``generation`` the way the runtime does (params validated)."""
    entry = generation.catalog.get(TOOL_ID)
    if entry is None or entry.spec is None:
        raise LookupError(f"generation {generation.number} of {BUNDLE_ID} has no function tool {TOOL_ID}")
    return await entry.spec.invoke(PARAMS)


def prepare_bundle(root: Path, *, watch: bool) -> tuple[Path, GreetingEditor]:
    """Copy the ``hello`` bundle under ``root`` and write descriptors naming it as a folder bundle."""
    package = root / "hello_bundle"
    shutil.copytree(SOURCE, package, ignore=shutil.ignore_patterns("__pycache__"))
    descriptors = write_descriptors(
        root / "descriptors", {BUNDLE_ID: {"source": {"path": str(package)}, "watch": watch}}
    )
    return descriptors, GreetingEditor(package / "greetings.py")


async def measure_hot_reload(root: Path, reloads: int, callers: int, pause_s: float, timeout_s: float) -> ArmResult:
    """Save ``reloads`` times while a watching host in this process serves ``callers`` concurrent callers."""
    descriptors, editor = prepare_bundle(root, watch=True)
    runtime = HostRuntime.for_descriptors(descriptors, watch=True)
    outcomes = await runtime.start()
    if not all(outcome.ok for outcome in outcomes):
        raise RuntimeError(f"hello did not load: {[str(outcome.error) for outcome in outcomes]}")
    assert runtime.registry is not None
    registry = runtime.registry
    swaps: list[tuple[float, ReloadOutcome]] = []
    registry.add_listener(lambda outcome: swaps.append((time.perf_counter(), outcome)))
    load = CallLoad(registry, callers)
    load.start()
    try:
        await _until_watching(editor, load)
        swaps.clear()
        calls_before, failures_before = load.calls, len(load.failures)
        phase_started = time.perf_counter()
        trials = []
        for version in range(1, reloads + 1):
            saved = editor.save(version)
            seen = await load.wait_for(editor.expected(version), timeout_s)
            swapped = next((at - saved for at, outcome in swaps if at > saved and outcome.ok), None)
            if seen is not None:
                trials.append(Trial("served", swapped, seen - saved))
            else:
                trials.append(Trial("missed" if swapped is None else "stale", swapped, None))
            await asyncio.sleep(pause_s)
        phase_s = time.perf_counter() - phase_started
    finally:
        await load.stop()
        pinned = len(registry.retired_generations)
        await runtime.stop()
    failed_reloads = [outcome for _, outcome in swaps if not outcome.ok]
    calls = load.calls - calls_before
    result = ArmResult(
        name="hot reload (watch)",
        trials=trials,
        calls=calls + len(load.failures) - failures_before,
        failed_calls=len(load.failures) - failures_before,
        calls_estimated=False,
        phase_s=phase_s,
        failures=load.failures[failures_before:],
    )
    result.notes.append(
        f"hot reload: {calls / phase_s:,.0f} calls/s from {callers} callers, call latency median "
        f"{statistics.median(load.latencies) * 1000:.2f} ms; {len(swaps)} reload transactions for {reloads} saves "
        f"({len(failed_reloads)} failed); {pinned} replaced generations still pinned at the end"
    )
    for outcome in failed_reloads[:3]:
        result.notes.append(f"  failed reload: {outcome.error}")
    return result


async def _until_watching(editor: GreetingEditor, load: CallLoad) -> None:
    """Save a warm-up version until a call serves it: then watchfiles is surely watching."""
    deadline = time.perf_counter() + WATCHER_START_TIMEOUT_S
    while time.perf_counter() < deadline:
        editor.save(0)
        if await load.wait_for(editor.expected(0), 0.5) is not None:
            return
    raise RuntimeError(f"no reload within {WATCHER_START_TIMEOUT_S:g} s of saving: is the watcher running?")


class HostProcess:
    """One restart-baseline host process (``HOST_PROCESS``) and what it printed."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        self.loaded_at = 0.0
        self.serving_at = 0.0
        self.result = ""

    @classmethod
    async def start(cls, descriptors: Path, environment: dict[str, str]) -> HostProcess:
        """Spawn a host process over ``descriptors``."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            HOST_PROCESS,
            str(descriptors),
            BUNDLE_ID,
            TOOL_ID,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=environment,
        )
        return cls(process)

    async def until_serving(self) -> None:
        """Read the process's output until its first call returned; raise if it died first."""
        assert self._process.stdout is not None
        while line := (await self._process.stdout.readline()).decode():
            now = time.perf_counter()
            if line.startswith("loaded"):
                self.loaded_at = now
            elif line.startswith("serving "):
                self.serving_at = now
                self.result = line.removeprefix("serving ").rstrip("\n")
                return
        assert self._process.stderr is not None
        errors = (await self._process.stderr.read()).decode()
        raise RuntimeError(f"host process exited before serving ({await self._process.wait()}):\n{line}{errors}")

    async def stop(self) -> None:
        """SIGTERM the process (unless it already exited) and wait until it has exited."""
        if self._process.returncode is None:
            self._process.send_signal(signal.SIGTERM)
        await self._process.wait()


async def measure_restart(root: Path, reloads: int, pause_s: float, environment: dict[str, str]) -> ArmResult:
    """Save ``reloads`` times, each time stopping the serving host process and starting a fresh one."""
    descriptors, editor = prepare_bundle(root, watch=False)
    editor.save(0)
    host = await HostProcess.start(descriptors, environment)
    trials = []
    stops = []
    try:
        await host.until_serving()
        phase_started = time.perf_counter()
        for version in range(1, reloads + 1):
            saved = editor.save(version)
            await host.stop()
            stopped = time.perf_counter()
            host = await HostProcess.start(descriptors, environment)
            await host.until_serving()
            stops.append(stopped - saved)
            if host.result == editor.expected(version):
                served: float | None = host.serving_at - saved
                state: TrialState = "served"
            else:
                served, state = None, "stale"
            # Serving stops when SIGTERM is sent, just after the save, and resumes with the first call.
            trials.append(Trial(state, host.loaded_at - saved, served, downtime_s=host.serving_at - saved))
            await asyncio.sleep(pause_s)
        phase_s = time.perf_counter() - phase_started
    finally:
        await host.stop()
    result = ArmResult(
        name="full restart", trials=trials, calls=0, failed_calls=0, calls_estimated=True, phase_s=phase_s
    )
    result.notes.append(
        f"full restart: stopping the old process took {statistics.median(stops) * 1000:.0f} ms (median), "
        f"the rest is starting a new one; restart phase {phase_s:.1f} s"
    )
    return result


def estimate_restart_calls(restart: ArmResult, hot: ArmResult) -> None:
    """Fill in the restart arm's calls: the hot phase's call rate over the downtime (failed) and over the
    whole restart phase (offered)."""
    calls_per_s = hot.calls / hot.phase_s
    restart.failed_calls = round(calls_per_s * sum(trial.downtime_s for trial in restart.trials))
    restart.calls = round(calls_per_s * restart.phase_s)


def p95(values: Sequence[float]) -> float:
    """The nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[math.ceil(0.95 * len(ordered)) - 1]


def _ms(values: Sequence[float]) -> tuple[str, str]:
    if not values:
        return "-", "-"
    return f"{statistics.median(values) * 1000:.0f}", f"{p95(values) * 1000:.0f}"


def print_table(arms: Sequence[ArmResult]) -> None:
    """Print one row per arm: timings of the saves that served, stale saves, failed and total calls."""
    header = [
        "",
        "saves",
        "swap med ms",
        "swap p95 ms",
        "serve med ms",
        "serve p95 ms",
        "stale",
        "failed calls",
        "calls",
    ]
    rows = [header]
    for arm in arms:
        swaps = [t.swap_s for t in arm.trials if t.state == "served" and t.swap_s is not None]
        serving = [t.serving_s for t in arm.trials if t.serving_s is not None]
        mark = "~" if arm.calls_estimated else ""
        not_served = sum(t.state != "served" for t in arm.trials)
        rows.append(
            [
                arm.name,
                str(len(arm.trials)),
                *_ms(swaps),
                *_ms(serving),
                str(not_served),
                f"{mark}{arm.failed_calls:,}",
                f"{mark}{arm.calls:,}",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print(
            "  ".join([row[0].ljust(widths[0]), *(cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True))])
        )


def print_ratio(reload: ArmResult, restart: ArmResult) -> None:
    """Print restart ÷ hot reload for the median and p95 of save → serving."""
    hot = [t.serving_s for t in reload.trials if t.serving_s is not None]
    cold = [t.serving_s for t in restart.trials if t.serving_s is not None]
    if not hot or not cold:
        print("\nratio: not available (an arm served no save)")
        return
    median_ratio = statistics.median(cold) / statistics.median(hot)
    p95_ratio = p95(cold) / p95(hot)
    print(f"\nratio restart / hot reload, save → serving: median {median_ratio:.1f}x, p95 {p95_ratio:.1f}x")


async def run(reloads: int, callers: int, pause_s: float, timeout_s: float, bytecode_cache: bool) -> None:
    """Measure both arms in one run and print the report."""
    environment = dict(os.environ)
    if bytecode_cache:
        environment.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        environment["PYTHONDONTWRITEBYTECODE"] = "1"
    print(
        f"machine: {os.cpu_count()} cores, {platform.platform()}; Python {platform.python_version()}; "
        f"bytecode cache {'on' if bytecode_cache else 'off'}"
    )
    print(f"{reloads} saves of hello_bundle/greetings.py per arm, {callers} concurrent callers during hot reload\n")
    with tempfile.TemporaryDirectory(prefix="berth-bench-reload-") as temporary:
        root = Path(temporary)
        hot = await measure_hot_reload(root / "hot", reloads, callers, pause_s, timeout_s)
        restart = await measure_restart(root / "restart", reloads, pause_s, environment)
    estimate_restart_calls(restart, hot)
    print_table([hot, restart])
    print_ratio(hot, restart)
    print()
    print("swap: save → new generation serving (hot: reload listener; restart: new process has loaded bundles)")
    print("serve: save → first call returning the new greeting; stale: saves whose new code was never served")
    print("~ restart calls are estimated: every call in the downtime (SIGTERM → first call of the new process)")
    print("  fails; rate = the hot phase's measured call rate. Hot-reload calls are counted, not estimated.")
    for arm in (hot, restart):
        for note in arm.notes:
            print(note)
        for trial_number, trial in enumerate(arm.trials, start=1):
            if trial.state != "served":
                print(f"  {arm.name}: save {trial_number} {trial.state} (swap {_fmt_s(trial.swap_s)})")
    if hot.failures:
        print(f"\nFAILED CALLS during hot reload: {len(hot.failures)}; first: {hot.failures[0]}")


def _fmt_s(value: float | None) -> str:
    return "never" if value is None else f"{value * 1000:.0f} ms after the save"


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the options and run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reloads", type=int, default=20, help="saves per arm (default: 20)")
    parser.add_argument("--callers", type=int, default=8, help="concurrent callers during hot reload (default: 8)")
    parser.add_argument("--pause-ms", type=float, default=250, help="pause after each served save (default: 250)")
    parser.add_argument("--timeout-s", type=float, default=3.0, help="wait this long for a save to serve (default: 3)")
    parser.add_argument(
        "--bytecode-cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="let Python write __pycache__ as it does by default (--no-bytecode-cache: PYTHONDONTWRITEBYTECODE=1)",
    )
    parser.add_argument("--quick", action="store_true", help="3 saves per arm, 2 callers: a smoke test of the script")
    args = parser.parse_args(argv)
    if args.quick:
        args.reloads, args.callers, args.pause_ms = 3, 2, 50
    sys.dont_write_bytecode = not args.bytecode_cache
    asyncio.run(run(args.reloads, args.callers, args.pause_ms / 1000, args.timeout_s, args.bytecode_cache))


if __name__ == "__main__":
    print(header(), flush=True)
    main()
