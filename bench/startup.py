"""Start-up: how long ``berth`` takes to answer, against a bare interpreter (``python -c pass``) in the same run.

Arms, each a fresh process per run (the console script of this venv, from the repository's root):

* ``python -c pass``: the baseline, the interpreter with this venv's ``site`` (its editable installs' finders);
* ``berth --version`` and ``berth --help``: the command line alone (subcommands are imported when they run);
* ``berth descriptors check descriptors/``: the example descriptors loaded and checked, the plugins discovered;
* ``berth run --demo`` ready: from the process's start to the first ``200`` of ``GET /readyz`` (polled every
  10 ms on a free port; the example descriptors and bundles, storage under a temporary ``--var``);
* ``berth worker`` ready: the same for a distributed worker (``--demo --health-port``) over a scratch PostgreSQL
  database (:func:`berth_postgres.testing.scratch_database`) and a ``redis-server`` of its own
  (:class:`berth.testing.redis.RedisServer`); skipped, saying why, when either service is missing.

Both servers start as a restart does: ``berth knowledge reindex`` builds the example bundles' knowledge indexes
first, so a start finds them current (a first start also indexes ``docs-assistant``'s spaces, in the background,
for seconds of CPU; ``--quick`` leaves the reindex out, so its figures include that).

It prints the median, min and max wall time of ``--runs`` runs (default 10; ``--quick``: 3), the median CPU time
(user + system) of each process, the time over the baseline and the ratio to it, against the targets of issue 34
(``--version``/``--help`` within 150 ms of the baseline, ``descriptors check`` 400 ms, each server ready in 1.5 s).
Then the top import costs of ``berth --version`` and of ``berth run --demo`` (until ready), from
``python -X importtime``: self time summed per package, with the first Berth module that imported it.

    .venv/bin/python bench/startup.py            # 10 runs of each arm
    .venv/bin/python bench/startup.py --quick    # 3 runs: a smoke test
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import platform
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from _machine import header

REPO = Path(__file__).resolve().parents[1]
DESCRIPTORS = REPO / "descriptors"
BERTH = str(Path(sys.executable).parent / "berth")
READY_TIMEOUT_S = 120.0
POLL_S = 0.01
TOP_IMPORTS = 10


@dataclass(frozen=True)
class Sample:
    """One run of an arm: wall time until done (or ready) and the CPU time the process used until then."""

    wall_s: float
    cpu_s: float


@dataclass
class Arm:
    """A command measured ``runs`` times; ``target_ms`` is issue 34's bound (over the baseline when ``over_bare``)."""

    name: str
    run: Callable[[], Sample]
    target_ms: float | None = None
    over_bare: bool = False
    samples: list[Sample] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return statistics.median(s.wall_s for s in self.samples) * 1000


def environment() -> dict[str, str]:
    """This process's environment without ``BERTH_*`` (a developer's settings would change what is measured)."""
    return {key: value for key, value in os.environ.items() if not key.startswith("BERTH_")}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def children_cpu_s() -> float:
    """User + system CPU time of every child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu_s(pid: int) -> float:
    """User + system CPU time of a running process so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_shot(argv: list[str]) -> Callable[[], Sample]:
    """A command that runs to its end (exit 0 expected): its wall time and its CPU time."""

    def run() -> Sample:
        cpu = children_cpu_s()
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=REPO, env=environment(), capture_output=True, check=False)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
        return Sample(wall, children_cpu_s() - cpu)

    return run


def ready(port: int, path: str = "/readyz") -> bool:
    """Whether ``GET path`` on 127.0.0.1:``port`` answers 200 now."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", path)
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


@contextlib.contextmanager
def started(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A server process (stderr to ``log``), stopped with SIGTERM (then SIGKILL) when the block ends."""
    with open(log, "wb") as stderr:
        process = subprocess.Popen(argv, cwd=REPO, env=environment(), stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_ready(process: subprocess.Popen[bytes], port: int, log: Path) -> float:
    """Poll ``/readyz`` until it answers 200; return when (``perf_counter``)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready(port):
        if process.poll() is not None:
            raise SystemExit(f"{process.args!r} exited {process.returncode}:\n{log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise SystemExit(f"not ready within {READY_TIMEOUT_S:g} s:\n{log.read_text()[-2000:]}")
        time.sleep(POLL_S)
    return time.perf_counter()


def time_to_ready(command: Callable[[int], list[str]], work: Path) -> Callable[[], Sample]:
    """A server started on a free port: the time from its start to ``/readyz`` 200, and its CPU time until then."""

    def run() -> Sample:
        port = free_port()
        log = work / f"server-{port}.log"
        begun = time.perf_counter()
        with started(command(port), log) as process:
            at = wait_ready(process, port, log)
            cpu = process_cpu_s(process.pid)
        return Sample(at - begun, cpu)

    return run


def reindex(descriptors: Path, var: Path | None = None) -> None:
    """Build the knowledge indexes of ``descriptors``' bundles (``berth knowledge reindex``), as a host that ran
    before has them."""
    argv = [BERTH, "knowledge", "reindex", "--descriptors", str(descriptors)]
    one_shot(argv + (["--var", str(var)] if var is not None else []))()


def run_command(var: Path) -> Callable[[int], list[str]]:
    """``berth run --demo`` on the example descriptors, storage under ``var``."""

    def command(port: int) -> list[str]:
        return [BERTH, "run", "--demo", "--descriptors", str(DESCRIPTORS), "--port", str(port), "--var", str(var)]

    return command


def worker_command(descriptors: Path) -> Callable[[int], list[str]]:
    """``berth worker --demo`` on distributed descriptors, its health port on 127.0.0.1."""

    def command(port: int) -> list[str]:
        health = ["--health-port", str(port), "--health-host", "127.0.0.1"]
        return [BERTH, "worker", "--demo", "--descriptors", str(descriptors), "--no-watch", *health]

    return command


def distributed_descriptors(root: Path, dsn: str, redis_url: str) -> Path:
    """The example descriptors with distributed storage (``dsn``, ``redis_url``, artifacts under ``root``)."""
    target = root / "descriptors"
    target.mkdir(parents=True)
    for source in DESCRIPTORS.glob("*.yaml"):
        shutil.copy(source, target / source.name)
    storage = {
        "kind": "distributed",
        "postgres": {"dsn": dsn},
        "redis": {"url": redis_url},
        "artifacts": {"kind": "local", "root": str(root / "var" / "artifacts")},
    }
    knowledge = {"root": str(root / "var" / "knowledge")}
    # the file is edited as text: a YAML round trip would turn `multi_action: off` into a boolean
    assembly, found = re.subn(
        r"^  storage: .*$",
        f"  storage: {json.dumps(storage)}\n  knowledge: {json.dumps(knowledge)}",
        (DESCRIPTORS / "assembly.yaml").read_text(),
        flags=re.MULTILINE,
    )
    if found != 1:
        raise SystemExit("descriptors/assembly.yaml has no one-line `storage:` under `platform:` to replace")
    (target / "assembly.yaml").write_text(assembly)
    bundles = yaml.safe_load((DESCRIPTORS / "bundles.yaml").read_text())
    for entry in bundles["bundles"].values():  # folder bundles: their paths are relative to the descriptors
        source = entry["source"]
        if "path" in source:
            source["path"] = str((DESCRIPTORS / source["path"]).resolve())
    (target / "bundles.yaml").write_text(yaml.safe_dump(bundles, sort_keys=False))
    return target


@contextlib.contextmanager
def distributed_services(work: Path) -> Iterator[Path | str]:
    """Distributed descriptors over a scratch database and a Redis of the bench's own, or why there are none."""
    if shutil.which("redis-server") is None and not Path("/usr/bin/redis-server").exists():
        yield "no redis-server on this machine"
        return
    try:
        from berth_postgres.testing import scratch_database

        from berth.testing.redis import RedisServer
    except ImportError as exc:
        yield f"berth-postgres is not installed ({exc})"
        return
    try:
        database = scratch_database(migrated=True)
        dsn = database.__enter__()
    except (OSError, ImportError) as exc:
        yield f"PostgreSQL does not answer ({type(exc).__name__}: {exc})"
        return
    except Exception as exc:  # asyncpg's errors (authentication, a missing server) are not OSErrors
        yield f"PostgreSQL refused a scratch database ({type(exc).__name__}: {exc})"
        return
    server = RedisServer()
    try:
        server.start()
        yield distributed_descriptors(work / "distributed", dsn, server.url)
    finally:
        server.stop()
        database.__exit__(None, None, None)


# --- import costs -------------------------------------------------------------------------------------------------


@dataclass
class Imported:
    """One line of ``-X importtime``: a module, its own time and what it imported."""

    name: str
    self_us: int
    children: list[Imported] = field(default_factory=list)


def parse_importtime(text: str) -> list[Imported]:
    """The import tree of a ``-X importtime`` log (its lines list children before their parent, indented)."""
    pending: dict[int, list[Imported]] = {}
    for line in text.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        head, _cumulative, label = line.split("|", 2)
        depth = (len(label) - len(label.lstrip()) - 1) // 2
        node = Imported(label.strip(), int(head.rsplit(":", 1)[1]), pending.pop(depth + 1, []))
        pending.setdefault(depth, []).append(node)
    return [node for depth in sorted(pending) for node in pending[depth]]


def package_of(module: str) -> str:
    """The package a module's cost is counted under: its top-level name (two names for ``berth``'s own)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "berth" else parts[0]


def cumulative_us(node: Imported) -> int:
    """The time of ``node``'s import with everything it imported."""
    return node.self_us + sum(cumulative_us(child) for child in node.children)


def import_costs(roots: list[Imported]) -> list[tuple[str, float, int, str]]:
    """(package, self ms summed, modules, the Berth module whose import of it cost most), costliest first."""
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    importers: dict[str, tuple[int, str]] = {}

    def walk(node: Imported, importer: str) -> None:
        package = package_of(node.name)
        totals[package] = totals.get(package, 0.0) + node.self_us / 1000
        counts[package] = counts.get(package, 0) + 1
        if package_of(importer) != package:
            cost = cumulative_us(node)
            if cost > importers.get(package, (-1, ""))[0]:
                importers[package] = (cost, importer)
        below = node.name if node.name.startswith("berth") else importer
        for child in node.children:
            walk(child, below)

    for root in roots:
        walk(root, "(a function)")
    ranked = sorted(totals, key=lambda package: -totals[package])
    return [(package, totals[package], counts[package], importers.get(package, (0, "-"))[1]) for package in ranked]


def importtime_of(argv: list[str], work: Path, *, until_ready: bool) -> list[Imported]:
    """The import tree of one run of ``argv`` (a server: until ``/readyz`` answers 200)."""
    command = [sys.executable, "-X", "importtime", BERTH, *argv]
    log = work / "importtime.log"
    if not until_ready:
        done = subprocess.run(command, cwd=REPO, env=environment(), capture_output=True, text=True, check=False)
        return parse_importtime(done.stderr)
    port = int(argv[argv.index("--port") + 1])
    with started(command, log) as process:
        wait_ready(process, port, log)
    return parse_importtime(log.read_text(errors="replace"))


def print_import_costs(title: str, roots: list[Imported]) -> None:
    costs = import_costs(roots)
    total = sum(ms for _, ms, _, _ in costs)
    print(f"\ntop {TOP_IMPORTS} import costs of {title} ({total:.0f} ms of imports in all; self time per package)")
    rows = [["package", "ms", "modules", "imported by (costliest)"]]
    rows += [[package, f"{ms:.1f}", str(count), importer] for package, ms, count, importer in costs[:TOP_IMPORTS]]
    print_table(rows)


# --- report -------------------------------------------------------------------------------------------------------


def print_table(rows: list[list[str]]) -> None:
    """Columns padded to their widest cell: the first left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [row[0].ljust(widths[0]), *(cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))]
        print("  ".join(cells).rstrip())


def report(arms: list[Arm], skipped: dict[str, str]) -> None:
    base = arms[0].median_ms
    rows = [["arm", "runs", "median ms", "min ms", "max ms", "CPU ms", "over bare ms", "x bare", "target ms", "met"]]
    for arm in arms:
        walls = [s.wall_s * 1000 for s in arm.samples]
        over = arm.median_ms - base
        target, met = "-", "-"
        if arm.target_ms is not None:
            target = f"{'+' if arm.over_bare else ''}{arm.target_ms:.0f}"
            met = "yes" if (over if arm.over_bare else arm.median_ms) <= arm.target_ms else "NO"
        cpu = statistics.median(s.cpu_s for s in arm.samples) * 1000
        rows.append(
            [
                arm.name,
                str(len(arm.samples)),
                f"{arm.median_ms:.0f}",
                f"{min(walls):.0f}",
                f"{max(walls):.0f}",
                f"{cpu:.0f}",
                "-" if arm is arms[0] else f"{over:.0f}",
                f"{arm.median_ms / base:.2f}x",
                target,
                met,
            ]
        )
    for name in skipped:
        rows.append([name, "0", "-", "-", "-", "-", "-", "-", "-", "skipped"])
    print_table(rows)
    print("\ntarget ms: '+N' is N ms over the bare interpreter's median; 'N' is the median itself")
    for name, reason in skipped.items():
        print(f"{name}: skipped: {reason}")
    version = next(arm for arm in arms if arm.name == "berth --version")
    print(f"ratio berth --version / python -c pass: {version.median_ms / base:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="runs of each arm (the median is reported)")
    parser.add_argument(
        "--quick", action="store_true", help="3 runs of each arm, no warm-up run nor reindex: a smoke test"
    )
    parser.add_argument("--no-imports", action="store_true", help="leave out the import-cost tables")
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs
    print(f"machine: {os.cpu_count()} cores, {platform.platform()}; Python {platform.python_version()}")
    print(f"each arm: {runs} fresh processes, interleaved; load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="berth-startup-") as tmp:
        work = Path(tmp)
        if not args.quick:
            reindex(DESCRIPTORS, work / "var")
        arms = [
            Arm("python -c pass", one_shot([sys.executable, "-c", "pass"])),
            Arm("berth --version", one_shot([BERTH, "--version"]), 150, over_bare=True),
            Arm("berth --help", one_shot([BERTH, "--help"]), 150, over_bare=True),
            Arm("berth descriptors check", one_shot([BERTH, "descriptors", "check", "descriptors/"]), 400),
            Arm("berth run --demo ready", time_to_ready(run_command(work / "var"), work), 1500),
        ]
        skipped: dict[str, str] = {}
        with distributed_services(work) as distributed:
            if isinstance(distributed, Path):
                if not args.quick:
                    reindex(distributed)
                arms.append(Arm("berth worker ready", time_to_ready(worker_command(distributed), work), 1500))
            else:
                skipped["berth worker ready"] = distributed
            for arm in [] if args.quick else arms:  # a warm-up run each: the page and bytecode caches are warm
                arm.run()
            for _ in range(runs):  # interleaved: a slow spell of a shared machine weighs on every arm alike
                for arm in arms:
                    arm.samples.append(arm.run())
        print()
        report(arms, skipped)
        if not args.no_imports:
            print_import_costs("berth --version", importtime_of(["--version"], work, until_ready=False))
            port = free_port()
            print_import_costs(
                "berth run --demo (until /readyz answers 200)",
                importtime_of(run_command(work / "var")(port)[1:], work, until_ready=True),
            )


if __name__ == "__main__":
    print(header(), flush=True)
    main()
