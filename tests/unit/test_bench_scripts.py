"""Every benchmark runs as the docs tell a user to run it: ``.venv/bin/python bench/<script>.py`` from the root.

Each script has a ``--quick`` mode doing the same work at a tiny size (seconds); this runs them all, two at a time,
with the interpreter running the tests (the venv's), and checks the exit status, the table's header and the line
comparing against the baseline. A script that crashes, loses its baseline arm, forgets ``--quick`` or shadows a
package cannot land. Files whose name starts with ``_`` (``bench/_loadgen.py``) are modules the scripts import,
not scripts. A script may print ``skipped: <why>`` as its last line and exit 0 when what it measures is missing
from the machine (``exec.py``: root and bubblewrap; ``turn_instructions.py``: valgrind), as its docstring says;
the test then skips with that reason.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH = REPO_ROOT / "bench"
SCRIPTS = sorted(path.name for path in BENCH.glob("*.py") if not path.name.startswith("_"))
QUICK_TIMEOUT_S = 150  # the slowest takes about 15 s alone; a hung script fails here instead of hanging the suite
QUICK_BUDGET_S = 60  # a quick mode taking longer than this has lost its tiny sizes
SLOW_STARTS = {"http_instructions.py": 240}
"""Scripts whose quick mode starts servers under valgrind (about a minute each to start): their budget, seconds."""

# Per script: (its table's header, its line against the baseline). A new script is held to the generic pair.
TABLES: dict[str, tuple[str, str]] = {
    "api_load.py": (r"^\s+turns\s+turns/s\s+first delta p50 ms", r"^berth / bare streams per second: \d+\.\d+"),
    "context.py": (r"^strategy\s+input tokens", r"^ratio \(strict\): berth sends \d+(\.\d+)?x fewer"),
    "exec.py": (r"^program\s+arm\s+median ms", r"^trivial\s+local \(bwrap\)\s.*\d+\.\d+x\s+\d+$"),
    "knowledge.py": (
        r"^embedder\s+mode\s+recall@5\s+MRR@10\s+paraphrase r@5\s+lexical r@5\s+detail r@5$",
        r"^ratio rank_bm25 / berth lexical p50 at \d+ chunks: \d+(\.\d+)?x",
    ),
    "knowledge_code.py": (
        r"^space\s+query\s+definition\s+sqlite\s+sqlite ms$",
        r"^sqlite: definition first for \d+ of \d+ queries; MRR \d\.\d{3}$",
    ),
    "knowledge_storage.py": (
        r"^store\s+chunks\s+text MB\s+index MB\s+index÷text",
        r"^ratio sqlite index / text: \d+\.\d+x$",
    ),
    "memory.py": (
        r"^turns\s+RSS MiB\s+conversations\s+resident MiB\s+budget MiB\s+dropped\s+turns/s$",
        r"^ratio RSS at turn \d+ / RSS at turn \d+: \d+\.\d+x",
    ),
    "mcp_overhead.py": (r"^row\s+calls\s+berth/s\s+bare/s.*\sratio$", r"^stdio, shared\s.*\s\d+\.\d+$"),
    "reload.py": (r"^\s+saves\s+swap med ms", r"^ratio restart / hot reload.* median \d+(\.\d+)?x"),
    "scale.py": (
        r"^\s+turns\s+turns/s\s+first delta p50 ms",
        r"^ratio 1 API \+ 1 worker / embedded turns/s: \d+\.\d+x",
    ),
    "startup.py": (
        r"^arm\s+runs\s+median ms\s+min ms\s+max ms\s+CPU ms\s+over bare ms\s+x bare",
        r"^ratio berth --version / python -c pass: \d+\.\d+x$",
    ),
    "streaming.py": (r"^\|\s+chunk\s+\|\s+implementation", r"^\|\s+16 B \| Berth ChannelRenderer.*\d+(\.\d+)?x faster"),
    # An instruction count, not a timing: its baseline is the run with fewer turns, its result their difference.
    "turn_instructions.py": (r"^run\b.*\binstructions$", r"^per round \(\d+-round turns\)\s+[\d,]+$"),
    "http_instructions.py": (
        r"^arm\s+turns\s+instructions\s+per turn\s+÷ bare$",
        r"^berth / bare instructions per tool turn: \d+\.\dx",
    ),
    "turn_overhead.py": (
        r"^ms per round\s+Berth\s+min-max\s+create_agent\s+x Berth\s+create_agent \(no cp\)\s+x Berth"
        r"\s+create_react_agent\s+x Berth\s+create_react_agent \(no cp\)\s+x Berth$",
        r"^1 turn x 10 rounds\s.*\d+\.\d+x$",
    ),
}
GENERIC_TABLE = (r"^\W*[A-Za-z][\w /()%.-]*\s{2,}\S", r"\d+(\.\d+)?x\b|\bratio\b")


@dataclass(frozen=True)
class QuickRun:
    script: str
    returncode: int | None  # None: killed after QUICK_TIMEOUT_S
    stdout: str
    stderr: str
    seconds: float

    def report(self) -> str:
        status = "timed out" if self.returncode is None else f"exit {self.returncode}"
        return (
            f"{self.script} --quick: {status} after {self.seconds:.1f} s\n{self.stdout[-3000:]}\n{self.stderr[-3000:]}"
        )


def text_of(output: bytes | str | None) -> str:
    """What a timed-out run printed (bytes even with ``text=True``)."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def run_quick(script: str) -> QuickRun:
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, f"bench/{script}", "--quick"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=QUICK_TIMEOUT_S + SLOW_STARTS.get(script, 0),
            check=False,
        )
    except subprocess.TimeoutExpired as timeout:
        return QuickRun(script, None, text_of(timeout.output), text_of(timeout.stderr), time.monotonic() - started)
    return QuickRun(script, done.returncode, done.stdout, done.stderr, time.monotonic() - started)


@pytest.fixture(scope="module")
def quick_runs() -> dict[str, QuickRun]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        return {run.script: run for run in pool.map(run_quick, SCRIPTS)}


def test_the_bench_folder_has_its_scripts() -> None:
    assert set(TABLES) <= set(SCRIPTS), f"scripts gone from bench/: {set(TABLES) - set(SCRIPTS)}"


@pytest.mark.benchmarks  # every script for a few seconds: about a minute in all, run by its own step of .ci/run
@pytest.mark.parametrize("script", SCRIPTS)
def test_each_script_runs_in_quick_mode_and_prints_its_table(script: str, quick_runs: dict[str, QuickRun]) -> None:
    run = quick_runs[script]
    assert run.returncode == 0, run.report()
    lines = run.stdout.strip().splitlines()
    if lines and lines[-1].startswith("skipped:"):
        pytest.skip(f"{script} --quick: {lines[-1]}")
    if script == "turn_overhead.py" and "LangGraph columns skipped" in run.stdout:
        pytest.skip("turn_overhead.py --quick: langchain/langgraph (the [bench] extra) are missing, so is its baseline")
    header, ratio = TABLES.get(script, GENERIC_TABLE)
    assert re.search(header, run.stdout, re.MULTILINE), f"no table header /{header}/ in\n{run.report()}"
    assert re.search(ratio, run.stdout, re.MULTILINE), f"no line against the baseline /{ratio}/ in\n{run.report()}"
    assert run.seconds < SLOW_STARTS.get(script, QUICK_BUDGET_S), f"--quick is not quick: {run.report()}"


def test_no_bench_module_shadows_an_importable_package() -> None:
    """A script's folder comes first on ``sys.path``: a ``bench/mcp.py`` once hid the ``mcp`` package.

    Checked in a fresh interpreter started outside the repository, whose ``sys.path`` is what a user's has.
    """
    modules = sorted(p.stem for p in BENCH.glob("*.py"))
    probe = f"import importlib.util; print([m for m in {modules!r} if importlib.util.find_spec(m) is not None])"
    done = subprocess.run([sys.executable, "-c", probe], cwd="/", capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", f"bench modules shadowing importable ones: {done.stdout}"
