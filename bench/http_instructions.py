"""Benchmark: instructions per tool turn over HTTP, counted by callgrind inside each server — CPU without the noise.

``bench/api_load.py`` reads each server's CPU time per turn, which on a shared VM swings by a fifth between
windows, and this machine kind exposes no hardware counters to ``perf stat`` (``instructions: <not
supported>``). So this script runs the same servers as ``api_load.py`` (``berth run`` with the scripted tool turn,
events in the ``POST``; the bare ``StreamingResponse`` replaying one of Berth's turns; the ``create_agent`` peer
when the ``bench`` extra is installed) each under ``valgrind --tool=callgrind`` with its instrumentation off at
start, drives them with ``api_load.py``'s load generator over loopback, and counts, in the server process with
all its threads:

1. ``--warmup`` turns uncounted (imports, first-use caches, the first conversations);
2. instrumentation switched on and the counters zeroed (``callgrind_control --instr=on``, ``--zero``);
3. ``--turns`` turns by ``--users`` users (1: each turn alone — its whole cost, nothing shared with another
   turn's wake-ups, writes or group commit; more: the batching a loaded server gets);
4. the counters dumped (``callgrind_control --dump``): instructions per turn = the dump's total ÷ turns.

The count is the same to within a few tenths of a percent run after run whatever else the machine does (timers
and the kernel's scheduling move it a little: a turn that finds another's group commit in flight shares it), so
the ratio Berth ÷ bare is the issue-39 target "CPU per tool turn ≤ 3x the bare stream's" read without the noise.
User-space instructions only: system calls count their user side; the kernel's work (socket writes, ``fsync``)
is not in it (``api_load.py``'s CPU time has it). Under valgrind a server runs about 50x slower, so timers
(group commit windows, heartbeats) fire relatively sooner: read the ratio, not absolute milliseconds.

Usage: ``.venv/bin/python bench/http_instructions.py [--turns N] [--users N] [--quick]`` (about 3 minutes;
``--quick``: 5 turns each, about a minute; without valgrind it prints ``skipped:`` and exits 0 under ``--quick``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import api_load
from _machine import header
from _valgrind import valgrind_missing

STARTUP_S = 600.0
"""How long a server may take to start under valgrind (imports run about 10x slower, uninstrumented)."""


@dataclass(frozen=True)
class Count:
    """Instructions a server executed for ``turns`` turns."""

    name: str
    turns: int
    instructions: int

    @property
    def per_turn(self) -> float:
        """Instructions per turn."""
        return self.instructions / self.turns


def valgrind_wrap(out_dir: Path) -> list[str]:
    """The command prefix that runs a server under callgrind, instrumentation off, dumps under ``out_dir``."""
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--trace-children=no",
        f"--callgrind-out-file={out_dir}/callgrind.%p",
    ]


def callgrind_control(option: str, pid: int) -> None:
    """Send ``option`` (``--instr=on``, ``--zero``, ``--dump``) to the callgrind process ``pid``."""
    done = subprocess.run(["callgrind_control", option, str(pid)], capture_output=True, text=True, check=False)
    if done.returncode != 0 or "OK" not in done.stdout + done.stderr:
        raise SystemExit(f"callgrind_control {option} {pid} failed (vgdb needs ptrace):\n{done.stdout}{done.stderr}")


def dumped_total(out_dir: Path, pid: int) -> int:
    """The instruction total of the newest dump of process ``pid``."""
    dumps = sorted(out_dir.glob(f"callgrind.{pid}.*"), key=lambda path: int(path.suffix[1:]))
    if not dumps:
        raise SystemExit(f"callgrind wrote no dump for process {pid} in {out_dir}")
    found = re.search(r"^summary: (\d+)", dumps[-1].read_text(errors="replace"), re.MULTILINE)
    if found is None:
        raise SystemExit(f"no summary line in {dumps[-1]}")
    return int(found.group(1))


async def drive(server: api_load.Server, users: int, turns: int) -> None:
    """``turns`` turns by ``users`` users of ``server`` (its kind decides the request), spread evenly."""
    kind = "berth-one-request" if server.kind == "berth" else server.kind
    connected = await api_load.open_users(server.port, users, kind)
    run = api_load.Run(server.name)
    try:

        async def user_loop(user: api_load.User, share: int) -> None:
            for n in range(share):
                if await api_load.turn_of(user, kind, n) is None:
                    raise SystemExit(f"{server.name}: a turn streamed no answer delta")

        shares = [turns // users + (1 if index < turns % users else 0) for index in range(users)]
        await asyncio.gather(*(user_loop(user, share) for user, share in zip(connected, shares, strict=True)))
    finally:
        await api_load.close_users(connected, run)


def count(server: api_load.Server, out_dir: Path, *, warmup: int, turns: int, users: int) -> Count:
    """Warm ``server`` up, then count the instructions of ``turns`` turns."""
    pid = server.process.pid
    asyncio.run(drive(server, users, warmup))
    callgrind_control("--instr=on", pid)
    callgrind_control("--zero", pid)
    asyncio.run(drive(server, users, turns))
    callgrind_control("--dump", pid)
    return Count(server.name, turns, dumped_total(out_dir, pid))


def measure(args: argparse.Namespace) -> list[Count]:
    """Count each arm, one server at a time (each alone on the machine's cores)."""
    counts: list[Count] = []
    with tempfile.TemporaryDirectory(prefix="berth-http-instructions-") as tmp:
        work, dumps = Path(tmp), Path(tmp) / "dumps"
        dumps.mkdir()
        wrap = valgrind_wrap(dumps)
        plain = api_load.start_berth(work, work / "capture-var")
        try:
            frames = api_load.capture_frames(f"http://127.0.0.1:{plain.port}")
        finally:
            plain.stop()
        arms = ["berth", "bare"]
        if not args.no_peer and api_load.peer_missing() is None:
            arms.append("peer")
        for arm in arms:
            if arm == "berth":
                name = api_load.ONE_REQUEST
                server = api_load.start_berth(work, work / "var", name, wrap=wrap, timeout_s=STARTUP_S)
            elif arm == "bare":
                server = api_load.start_bare(work, frames, wrap=wrap, timeout_s=STARTUP_S)
            else:
                server = api_load.start_peer(work, "create_agent", wrap=wrap, timeout_s=STARTUP_S)
            try:
                counts.append(count(server, dumps, warmup=args.warmup, turns=args.turns, users=args.users))
            finally:
                server.stop()
            print(f"  counted {counts[-1].name}: {counts[-1].per_turn:,.0f} instructions per turn", flush=True)
    return counts


def report(counts: list[Count], users: int) -> None:
    """Print the table and the ratio against the bare stream."""
    by_name = {c.name: c for c in counts}
    bare = by_name["bare StreamingResponse"]
    print(f"instructions per tool turn in the server (user space, all threads; {users} user(s) at a time)")
    print(f"{'arm':<48}{'turns':>7}{'instructions':>17}{'per turn':>14}{'÷ bare':>9}")
    for c in counts:
        print(f"{c.name:<48}{c.turns:>7}{c.instructions:>17,}{c.per_turn:>14,.0f}{c.per_turn / bare.per_turn:>8.1f}x")
    berth = by_name[api_load.ONE_REQUEST]
    print(f"berth / bare instructions per tool turn: {berth.per_turn / bare.per_turn:.1f}x (target <= 3x)")


def main() -> None:
    """Count and print instructions per tool turn for each arm."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40, help="turns counted per arm (default 40)")
    parser.add_argument("--warmup", type=int, default=10, help="turns before counting (default 10)")
    parser.add_argument("--users", type=int, default=1, help="users at a time (default 1: every turn alone)")
    parser.add_argument("--no-peer", action="store_true", help="leave out the create_agent peer")
    parser.add_argument("--quick", action="store_true", help="5 turns per arm after 3, no peer: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.turns, args.warmup, args.no_peer = 5, 3, True
    if valgrind_missing(args.quick):
        return
    os.environ.setdefault("PYTHONHASHSEED", "0")
    report(measure(args), args.users)


if __name__ == "__main__":
    print(header(), flush=True)
    sys.exit(main())
