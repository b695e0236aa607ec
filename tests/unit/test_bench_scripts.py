"""Every benchmark runs as the docs tell a user to run it: ``.venv/bin/python bench/<script>.py`` from the root.

Each script has a ``--quick`` mode doing the same work at a tiny size; this runs them all (two at a time), so a
script that crashes, loses its baseline arm or shadows a package cannot land. Modules whose name starts with ``_``
are helpers the scripts import, not scripts.
"""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH = REPO_ROOT / "bench"
SCRIPTS = sorted(path for path in BENCH.glob("*.py") if not path.name.startswith("_"))
TABLE_ROW = re.compile(r"\d.*\s.*\d")


def run_quick(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, f"bench/{script.name}", "--quick"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.fixture(scope="module")
def quick_runs() -> dict[str, subprocess.CompletedProcess[str]]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip((s.name for s in SCRIPTS), pool.map(run_quick, SCRIPTS), strict=True))


def test_the_bench_folder_has_scripts() -> None:
    assert {"turn_overhead.py", "api_load.py", "exec.py"} <= {s.name for s in SCRIPTS}


@pytest.mark.parametrize("script", [s.name for s in SCRIPTS])
def test_each_script_runs_in_quick_mode_and_prints_its_table(
    script: str, quick_runs: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    done = quick_runs[script]
    assert done.returncode == 0, f"{script} --quick failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    lines = done.stdout.strip().splitlines()
    skipped = lines and lines[-1].startswith("skipped:")
    assert skipped or len([line for line in lines if TABLE_ROW.search(line)]) >= 2, done.stdout


def test_no_bench_module_shadows_an_importable_package() -> None:
    """A script's folder comes first on ``sys.path``: a ``bench/mcp.py`` once hid the ``mcp`` package.

    Checked in a fresh interpreter started outside the repository, whose ``sys.path`` is what a user's has.
    """
    modules = sorted(p.stem for p in BENCH.glob("*.py"))
    probe = f"import importlib.util; print([m for m in {modules!r} if importlib.util.find_spec(m) is not None])"
    done = subprocess.run([sys.executable, "-c", probe], cwd="/", capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", f"bench modules shadowing importable ones: {done.stdout}"
