"""What the instruction-counting benches need from the machine: valgrind's callgrind and its control tool."""

from __future__ import annotations

import shutil


def valgrind_missing(quick: bool) -> bool:
    """True when valgrind or ``callgrind_control`` is missing: under ``quick`` (a smoke test) it prints
    ``skipped: <why>`` for the caller to return; otherwise it exits with why."""
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if not missing:
        return False
    why = f"{' and '.join(missing)} not found (apt-get install valgrind); it counts the instructions"
    if quick:
        print(f"skipped: {why}")
        return True
    raise SystemExit(why)
