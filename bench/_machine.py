"""The machine a benchmark ran on, printed at the top of every bench script's output.

A module the bench scripts import, not a script (hence the underscore).

A figure without its machine cannot be compared with another: every script prints :func:`header` first — the CPU
model, the cores this process may run on (and the machine's), the Python version and a calibration, the time of a
pure-Python loop of 10 million additions (about 1 s on the machine the per-round targets assume; a figure
measured elsewhere scales roughly by it).
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

__all__ = ["calibration_s", "cpu_model", "header"]

CALIBRATION_ADDITIONS = 10_000_000


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; the platform's processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def calibration_s() -> float:
    """Seconds of CPU time this process takes for a loop of 10 million integer additions (best of two)."""
    best = float("inf")
    for _ in range(2):
        started = time.process_time()
        total = 0
        for n in range(CALIBRATION_ADDITIONS):
            total += n
        best = min(best, time.process_time() - started)
    return best


def header() -> str:
    """The machine, Python and calibration, as lines to print before a script's results."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"machine: {cpu_model()}, {usable} of {os.cpu_count()} cores usable; {platform.platform()}\n"
        f"python: {platform.python_implementation()} {platform.python_version()}\n"
        f"calibration: 10M-addition loop {calibration_s():.2f} s CPU (the per-round targets assume ~1 s)\n"
    )
