"""Two Berth servers from two source trees, alternate windows under the same load: server CPU per tool turn.

A lever is read as the ratio of two servers measured in the same run, not against a figure from another run (the
machine is shared, single windows vary by ±20%). Each tree (``--old``, ``--new``: a checkout's root, e.g. two git
worktrees) gets its own ``berth run`` process, with ``PYTHONPATH`` set to that tree's ``platform``, ``exec``,
``plugins/*`` and ``bundles/*``, and the same descriptors, scripted tool turn and load as ``bench/api_load.py``
(events in the ``POST``'s response, admission on). The servers then take alternate windows (which goes first
alternates too):

* **throughput**: ``--conversations`` users run turns back to back for ``--duration`` seconds; turns/s and the
  server's CPU time per turn (``/proc/<pid>/stat``, all threads) and its ``fsync`` calls per turn (:mod:`_fsyncs`);
* **latency** (``--rate``, default: 75% of the old server's median saturation): open-loop arrivals at that rate,
  the same for both; the CPU and ``fsync`` calls per turn, p50/p99 first answer delta.

The table gives medians with min-max over ``--windows`` windows and new ÷ old of the medians.

    .venv/bin/python bench/api_ab.py --old /work/base --new /work/branch --windows 5 [--tmpfs] [--no-latency] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from _machine import header
from _servers import free_port, launch
from api_load import ROOT, TMPFS, Run, Server, latency, percentile, throughput, write_descriptors

KIND = "berth-one-request"


def source_path(tree: Path) -> str:
    """``PYTHONPATH`` for a checkout: the platform, exec, every plugin and every bundle."""
    parts = [tree / "platform", tree / "exec"]
    parts += sorted(p for p in (tree / "plugins").iterdir() if p.is_dir())
    parts += sorted(p for p in (tree / "bundles").iterdir() if p.is_dir())
    return os.pathsep.join(str(p) for p in parts)


def start(name: str, tree: Path, descriptors: Path, var: Path) -> Server:
    """``berth run`` importing Berth from ``tree``."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")}
    env["PYTHONPATH"] = source_path(tree)
    command = [str(Path(sys.executable).parent / "berth"), "run", "--descriptors", str(descriptors)]
    command += ["--port", str(port), "--var", str(var)]
    return Server(name, "berth", launch(command, f"http://127.0.0.1:{port}/readyz", env=env), port)


@dataclass
class Arm:
    """One server's windows."""

    server: Server
    saturation: list[Run] = field(default_factory=list)
    loaded: list[Run] = field(default_factory=list)


def spread(values: list[float], digits: int = 2) -> str:
    """``median (min-max)``."""
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def p99_ms(run: Run) -> float:
    """The window's p99 first answer delta, in ms."""
    return 1000 * percentile(sorted(run.first_delta_s), 0.99) if run.first_delta_s else float("nan")


def p50_ms(run: Run) -> float:
    """The window's median first answer delta, in ms."""
    return 1000 * statistics.median(run.first_delta_s) if run.first_delta_s else float("nan")


def report(old: Arm, new: Arm, rate: float, args: argparse.Namespace) -> None:
    """Medians (min-max) per arm and new ÷ old."""
    rows: list[tuple[str, str, str, str]] = []

    def add(
        label: str, runs_old: list[Run], runs_new: list[Run], metric: Callable[[Run], float], digits: int = 2
    ) -> None:
        a = [metric(r) for r in runs_old]
        b = [metric(r) for r in runs_new]
        rows.append((label, spread(a, digits), spread(b, digits), f"{statistics.median(b) / statistics.median(a):.3f}"))

    def cpu(r: Run) -> float:
        return r.cpu_ms_per_turn

    def tps(r: Run) -> float:
        return r.per_second

    def fsyncs(r: Run) -> float:
        return r.fsyncs / r.turns if r.fsyncs is not None and r.turns else float("nan")

    print(f"throughput: {args.conversations} users, turns back to back, {args.duration:g} s windows")
    add("server CPU ms/turn", old.saturation, new.saturation, cpu)
    add("turns/s", old.saturation, new.saturation, tps, 1)
    add("fsyncs/turn", old.saturation, new.saturation, fsyncs)
    if old.loaded:
        print_rows(rows)
        rows.clear()
        print(f"\nlatency: {rate:.1f} turns/s offered to both (open loop), {args.duration:g} s windows")
        add("server CPU ms/turn", old.loaded, new.loaded, cpu)
        add("fsyncs/turn", old.loaded, new.loaded, fsyncs)
        add("first delta p50 ms", old.loaded, new.loaded, p50_ms, 1)
        add("first delta p99 ms", old.loaded, new.loaded, p99_ms, 1)
    print_rows(rows)
    errors = sum(r.errors for arm in (old, new) for r in (*arm.saturation, *arm.loaded))

    def cpu_ratio(runs_old: list[Run], runs_new: list[Run]) -> str:
        return f"{statistics.median(map(cpu, runs_new)) / statistics.median(map(cpu, runs_old)):.3f}"

    line = f"ratio new / old server CPU per turn: {cpu_ratio(old.saturation, new.saturation)} (saturation)"
    if old.loaded:
        line += f", {cpu_ratio(old.loaded, new.loaded)} (latency run)"
    print(line)
    print(f"errors: {errors}")
    if errors:
        raise SystemExit(1)


def print_rows(rows: list[tuple[str, str, str, str]]) -> None:
    """An aligned table with a header."""
    table = [("", "old", "new", "new / old"), *rows]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    for row in table:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", type=Path, default=ROOT, help="the baseline checkout's root (default: this one)")
    parser.add_argument("--new", type=Path, default=ROOT, help="the changed checkout's root (default: this one)")
    parser.add_argument("--windows", type=int, default=5, help="windows per server and measurement")
    parser.add_argument("--conversations", type=int, default=200, help="simulated users (connections)")
    parser.add_argument("--duration", type=float, default=6.0, help="seconds of each window")
    parser.add_argument("--rate", type=float, default=None, help="latency arrivals/s (default: 75%% of old's)")
    parser.add_argument("--no-latency", action="store_true", help="throughput windows only")
    parser.add_argument("--tmpfs", action="store_true", help="the servers' data on /dev/shm")
    parser.add_argument("--quick", action="store_true", help="10 users, 2 windows of 1 s: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.conversations, args.duration, args.windows = 10, 1.0, 2
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory(dir=TMPFS if args.tmpfs else None) as data:
        descriptors = write_descriptors(Path(tmp))
        old = Arm(start("old", args.old, descriptors, Path(data) / "old"))
        new = Arm(start("new", args.new, descriptors, Path(data) / "new"))
        try:
            for i in range(args.windows):
                for arm in (old, new) if i % 2 == 0 else (new, old):
                    s = arm.server
                    arm.saturation.append(
                        asyncio.run(
                            throughput(
                                s.name, s.port, s.process.pid, args.conversations, 0, KIND, duration_s=args.duration
                            )
                        )
                    )
            rate = args.rate or 0.75 * statistics.median(r.per_second for r in old.saturation)
            if not args.no_latency:
                arrivals = max(1, round(rate * args.duration))
                for i in range(args.windows):
                    for arm in (old, new) if i % 2 == 0 else (new, old):
                        s = arm.server
                        arm.loaded.append(
                            asyncio.run(
                                latency(s.name, s.port, s.process.pid, args.conversations, rate, arrivals, KIND)
                            )
                        )
        finally:
            old.server.stop()
            new.server.stop()
    print(f"old: {args.old}  new: {args.new}  data: {'tmpfs' if args.tmpfs else 'disk'}")
    report(old, new, rate, args)


if __name__ == "__main__":
    print(header(), flush=True)
    main()
