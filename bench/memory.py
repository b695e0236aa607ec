"""Memory over a long run: the resident set size (RSS) of a ``berth run --demo`` server as turns go by.

The server is a real process (``berth run --demo`` over descriptors with the hello bundle, embedded storage, auth
none, admission on with limits above the load; :mod:`_servers` starts it and always ends its process group); the
load generator (:mod:`_loadgen`, raw HTTP/1.1 keep-alive connections) runs in this one. ``--users`` simulated users
each run turns back to back (``POST …/turns`` with ``Accept: text/event-stream``, the stream read to its end), and
start a new conversation every ``--turns-per-conversation`` turns, as people do: so the server keeps meeting
conversations it has not seen, and the idle ones pile up unless something bounds them. Each turn is the demo
model's hello-bundle turn: it calls ``hello.greet``, then answers in chunks.

Every ``--every`` turns (2,000; ``--quick``: 100) the load pauses (each user finishes its turn) and the script reads
the server's ``VmRSS`` (``/proc/<pid>/status``) and its ``/metrics``: the idle conversations it keeps in memory
(``berth_resident_conversations``), what they hold by its estimate and its budget
(``platform.resident_conversations.max_mb``, set with ``--max-mb``; the server's default when not given), and how
many it dropped for the budget. It prints one row per checkpoint, then the ratio RSS(last) / RSS(first checkpoint
after 0): the target of issue 39 is RSS flat within 10% from turn 2,000 to turn 10,000 (ratio ≤ 1.10).

What the ratio shows depends on when the budget fills: RSS grows with the conversations kept until what they hold
reaches the budget, then stays flat (the least recently used are dropped, and read back from the store if their
user comes back). With this workload and the default budget (256 MiB) that takes longer than 10,000 turns; with
``--max-mb 32`` it is full before turn 2,000 (docs/configuration.md has the measured figures of both).

    .venv/bin/python bench/memory.py                       # 10,000 turns, RSS every 2,000 (minutes)
    .venv/bin/python bench/memory.py --max-mb 32           # the same with a budget the run fills early
    .venv/bin/python bench/memory.py --quick               # 400 turns, every 100, 2 MiB: a smoke test
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml
from _loadgen import Connection, first_answer_delta
from _machine import header
from _servers import free_port, launch, stop

GATEWAY = {
    "auth": {"mode": "none"},
    "limits": {"default": {"requests_per_minute": 6_000_000, "burst": 100_000, "concurrent_turns": 1_000}},
    "backpressure": {"max_inflight_turns_per_worker": 512, "queue_max": 1_000},
}
TARGET_RATIO = 1.10
MIB = 1024 * 1024


def rss_mib(pid: int) -> float:
    """The resident set size of process ``pid``, in MiB (``VmRSS`` of ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for process {pid}")


@dataclass(frozen=True)
class Resident:
    """What the server's ``/metrics`` says of the conversations it keeps in memory."""

    conversations: float
    held_mib: float
    budget_mib: float
    dropped: float
    """Each NaN when the server does not report it (a Berth before these series)."""


def resident(base: str) -> Resident:
    """Read the ``berth_resident_conversations*`` series from the server's ``/metrics``."""
    text = httpx.get(f"{base}/metrics", timeout=30).text

    def value(name: str) -> float:
        found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
        return float(found.group(1)) if found else float("nan")

    return Resident(
        conversations=value("berth_resident_conversations"),
        held_mib=value("berth_resident_conversations_bytes") / MIB,
        budget_mib=value("berth_resident_conversations_budget_bytes") / MIB,
        dropped=value("berth_resident_conversations_dropped_total"),
    )


def write_descriptors(folder: Path) -> Path:
    """Descriptors with the hello bundle, auth none and limits above the offered load."""
    descriptors = folder / "descriptors"
    descriptors.mkdir()
    (descriptors / "assembly.yaml").write_text(yaml.safe_dump({"platform": {"storage": {"kind": "embedded"}}}))
    (descriptors / "bundles.yaml").write_text(
        yaml.safe_dump({"bundles": {"hello": {"source": {"entry_point": "hello"}}}})
    )
    (descriptors / "gateway.yaml").write_text(yaml.safe_dump(GATEWAY))
    return descriptors


class User:
    """One simulated user: a keep-alive connection, and the conversation it is in."""

    def __init__(self, port: int, turns_per_conversation: int) -> None:
        self.connection = Connection("127.0.0.1", port)
        self.turns_per_conversation = turns_per_conversation
        self.conversation = ""
        self.turns_in_conversation = 0

    async def turn(self, n: int) -> None:
        """One turn, in a new conversation when the current one has had its turns."""
        if not self.conversation or self.turns_in_conversation >= self.turns_per_conversation:
            headers = await self.connection.request("POST", "/v1/default/default/conversations", {})
            self.conversation = json.loads(await self.connection.body(headers))["id"]
            self.turns_in_conversation = 0
        headers = await self.connection.request(
            "POST",
            f"/v1/default/default/conversations/{self.conversation}/turns",
            {"message": f"hello, this is question {n}"},
            accept="text/event-stream",
        )
        await first_answer_delta(self.connection, headers)  # the whole stream; raises on turn.failed
        self.turns_in_conversation += 1


async def run_turns(users: list[User], first: int, count: int) -> None:
    """Run turns ``first`` to ``first + count - 1``, each user taking the next one when its last has ended."""
    next_turn = first
    end = first + count

    async def user_loop(user: User) -> None:
        nonlocal next_turn
        while next_turn < end:
            n = next_turn
            next_turn += 1
            await user.turn(n)

    await asyncio.gather(*(user_loop(user) for user in users))


def row(cells: list[str], widths: list[int]) -> str:
    """Cells right-aligned in columns (the first left-aligned)."""
    return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))


async def measure(args: argparse.Namespace, port: int, pid: int) -> list[tuple[int, float, Resident, float]]:
    """Run the turns; return ``(turns, RSS MiB, resident, turns/s since the last checkpoint)`` per checkpoint."""
    base = f"http://127.0.0.1:{port}"
    users = [User(port, args.turns_per_conversation) for _ in range(args.users)]
    for user in users:
        await user.connection.open()
    widths = [6, 8, 13, 12, 10, 8, 7]
    print(row(["turns", "RSS MiB", "conversations", "resident MiB", "budget MiB", "dropped", "turns/s"], widths))
    points = []
    done = 0
    rate = float("nan")
    while True:
        point = (done, rss_mib(pid), resident(base), rate)
        points.append(point)
        kept = point[2]
        print(
            row(
                [
                    str(done),
                    f"{point[1]:.1f}",
                    f"{kept.conversations:.0f}",
                    f"{kept.held_mib:.1f}",
                    f"{kept.budget_mib:g}",
                    f"{kept.dropped:.0f}",
                    "-" if done == 0 else f"{rate:.1f}",
                ],
                widths,
            ),
            flush=True,
        )
        if done >= args.turns:
            break
        count = min(args.every, args.turns - done)
        started = time.perf_counter()
        await run_turns(users, done, count)
        rate = count / (time.perf_counter() - started)
        done += count
    for user in users:
        await user.connection.close()
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=10_000, help="turns in all (default 10,000)")
    parser.add_argument("--every", type=int, default=2_000, help="turns between two RSS readings (default 2,000)")
    parser.add_argument("--users", type=int, default=20, help="users running turns at once (default 20)")
    parser.add_argument(
        "--turns-per-conversation", type=int, default=10, help="turns a user has in one conversation (default 10)"
    )
    parser.add_argument(
        "--max-mb", type=float, default=None, help="platform.resident_conversations.max_mb (default: the server's)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="400 turns, RSS every 100, a 2 MiB budget (unless given): a smoke test"
    )
    args = parser.parse_args()
    if args.quick:
        args.turns, args.every, args.users = 400, 100, 10
        args.max_mb = 2 if args.max_mb is None else args.max_mb
    print(header(), flush=True)
    print(
        f"workload: {args.turns} hello-bundle tool turns of `berth run --demo`, {args.users} users at once, a new "
        f"conversation every {args.turns_per_conversation} turns; resident budget "
        f"{'server default' if args.max_mb is None else f'{args.max_mb:g} MiB'}\n",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="berth-bench-memory-") as scratch:
        folder = Path(scratch)
        descriptors = write_descriptors(folder)
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("BERTH_")}
        if args.max_mb is not None:
            env["BERTH_PLATFORM__RESIDENT_CONVERSATIONS__MAX_MB"] = f"{args.max_mb:g}"
        command = [str(Path(sys.executable).parent / "berth"), "run", "--demo", "--descriptors", str(descriptors)]
        command += ["--port", str(port), "--var", str(folder / "var")]
        server = launch(command, f"http://127.0.0.1:{port}/readyz", env=env, timeout_s=120)
        try:
            points = asyncio.run(measure(args, port, server.pid))
        finally:
            stop(server)
    first = next((p for p in points if p[0] > 0), points[-1])
    last = points[-1]
    ratio = last[1] / first[1]
    growth_kib = (last[1] - first[1]) * 1024 / max(last[0] - first[0], 1)
    print(
        f"\nratio RSS at turn {last[0]} / RSS at turn {first[0]}: {ratio:.2f}x "
        f"({growth_kib:+.1f} KiB per turn; target <= {TARGET_RATIO:.2f}x)"
    )
    full = next((p for p in points if p[2].dropped > 0), None)  # NaN (not reported) compares False
    if full is None:
        print("the resident budget did not fill: RSS grows with the conversations kept until it does")
    elif full is not last:
        print(f"ratio RSS at turn {last[0]} / RSS at turn {full[0]} (budget full from there): {last[1] / full[1]:.2f}x")


if __name__ == "__main__":
    main()
