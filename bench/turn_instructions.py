"""Benchmark: instructions per ReAct round, counted by valgrind — the platform's work without the machine's noise.

Wall-clock time per round (``bench/turn_overhead.py``) swings by half on a shared VM; the number of
instructions a round executes does not (the same to 0.05% run after run). This script runs its own
child twice under ``valgrind --tool=callgrind`` with a fixed hash seed: once with one warm-up turn and
one 100-round turn, once with the warm-up and ``--turns`` + 1 such turns, each on a new conversation of
the same SQLite store. The difference, divided by the extra rounds, is what a round costs: render,
stream parse, validation, the tool call, contribution and the round's append (the turn's commit is
spread over its rounds, as in ``turn_overhead.py``). System calls count only their user-space side.

Valgrind starts with its instrumentation off (``--instr-atstart=no``): Python's start-up, the imports and the
warm-up turn run about 10x faster than instrumented, and the child switches it on itself (``callgrind_control
-i on``) before its counted turns. What came before is the same in both runs, so the difference is unchanged.

Usage: ``.venv/bin/python bench/turn_instructions.py [--turns N] [--rounds N] [--quick]`` (about 15 s; needs
valgrind, whose ``callgrind_control`` attaches with ptrace). ``--quick`` counts one extra turn of 5 rounds
(about 10 s); without valgrind it prints ``skipped:`` and why, and exits 0 (without ``--quick`` that is an
error).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _machine import header
from _valgrind import valgrind_missing

HERE = Path(__file__).resolve().parent


def run_turns(turns: int, rounds: int) -> None:
    """The child: a warm-up turn, then ``turns`` turns of ``rounds`` rounds, each on a new conversation."""
    import turn_overhead as overhead  # the sibling script (this folder is first on sys.path)

    async def main() -> None:
        with tempfile.TemporaryDirectory(prefix="berth-instructions-") as tmp:
            async with overhead.BerthStack(Path(tmp), 64) as stack:
                await stack.turn(stack.new_conversation(), 1, 10)
                instrument()
                for _ in range(turns):
                    await stack.turn(stack.new_conversation(), 1, rounds)

    asyncio.run(main())


def instrument() -> None:
    """Switch on callgrind's instrumentation of this process (the child, started with it off)."""
    command = ["callgrind_control", "--instr=on", str(os.getpid())]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed (valgrind's vgdb needs ptrace):\n{done.stdout}{done.stderr}")


def count_instructions(turns: int, rounds: int) -> int:
    """Run the child under callgrind; return the instructions it executed."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        str(turns),
        "--rounds",
        str(rounds),
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"valgrind printed no instruction count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    """Print the instructions per round of a ``--rounds``-round turn."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3, help="extra turns counted (default 3)")
    parser.add_argument("--rounds", type=int, default=100, help="rounds per turn (default 100)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="1 extra turn of 5 rounds: a smoke test of the script")
    args = parser.parse_args()
    if args.quick:
        args.turns, args.rounds = 1, 5
    if args.child is not None:
        run_turns(args.child, args.rounds)
        return
    if valgrind_missing(args.quick):
        return
    with ThreadPoolExecutor(max_workers=2) as pool:
        base, more = pool.map(lambda turns: count_instructions(turns, args.rounds), (1, 1 + args.turns))
    per_round = (more - base) / (args.turns * args.rounds)
    print(f"{'run (counted after the warm-up turn)':<38}{'instructions':>16}")
    print(f"{'1 turn':<38}{base:>16,}")
    print(f"{f'{1 + args.turns} turns':<38}{more:>16,}")
    print(f"{f'per round ({args.rounds}-round turns)':<38}{per_round:>16,.0f}")


if __name__ == "__main__":
    print(header(), flush=True)
    main()
