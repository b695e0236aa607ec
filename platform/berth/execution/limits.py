"""The limits of one run, taken from its exec profile, and how to tell which one ended it."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Final

MIB: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ExecLimits:
    """Wall time, memory (address space), CPU seconds, processes, size of any one file, output kept, and the disk
    ``work/`` and ``out/`` share."""

    timeout_s: float = 60.0
    memory_mb: int = 1024
    cpu_s: int = 60
    processes: int = 128
    file_size_mb: int = 64
    output_tail_bytes: int = 8192
    shared_memory_mb: int = 16
    disk_mb: int = 512
    """What ``work/`` and ``out/`` may hold together (a tmpfs per run where mounting is permitted)."""

    def launch_limits(self) -> dict[str, int]:
        """The rlimits the executor bootstrap applies to itself before the program runs."""
        return {
            "memory_bytes": self.memory_mb * MIB,
            "cpu_s": self.cpu_s,
            "processes": self.processes,
            "file_size_bytes": self.file_size_mb * MIB,
        }


@dataclass(frozen=True, slots=True)
class LimitHit:
    """The limit that ended a run: an error code for the envelope and a sentence for the model."""

    code: str
    limit: str
    message: str


def limit_from_outcome(
    limits: ExecLimits,
    *,
    timed_out: bool,
    exit_code: int | None,
    killed_by: int | None,
    stderr_tail: str,
    out_of_memory: bool = False,
    process_limit_hit: bool = False,
    disk_full: bool = False,
) -> LimitHit | None:
    """Which limit (if any) ended a run, from how it ended and the end of its stderr."""
    if timed_out:
        return LimitHit("timeout", "timeout_s", f"the program ran over its wall time of {limits.timeout_s:g} s")
    if out_of_memory:
        return LimitHit(
            "memory_limit", "memory_mb", f"the program's processes went over their {limits.memory_mb} MiB together"
        )
    if killed_by == signal.SIGXCPU or (killed_by == signal.SIGKILL and "SIGXCPU" in stderr_tail):
        return LimitHit("cpu_limit", "cpu_s", f"the program used its {limits.cpu_s} s of CPU time")
    if disk_full:
        return LimitHit(
            "disk_limit", "disk_mb", f"the program filled its {limits.disk_mb} MiB of disk (work/ and out/ together)"
        )
    if "No space left on device" in stderr_tail:  # the quota, or a disk the host cannot check (a fargate task's)
        return LimitHit("disk_limit", "disk_mb", "the program ran out of disk space (No space left on device)")
    if killed_by == signal.SIGXFSZ or "File too large" in stderr_tail:
        return LimitHit(
            "file_size_limit", "file_size_mb", f"the program wrote a file (or output) over {limits.file_size_mb} MiB"
        )
    if "MemoryError" in stderr_tail or "Cannot allocate memory" in stderr_tail or killed_by == signal.SIGKILL:
        return LimitHit("memory_limit", "memory_mb", f"the program ran out of its {limits.memory_mb} MiB of memory")
    if process_limit_hit or "Resource temporarily unavailable" in stderr_tail or "BlockingIOError" in stderr_tail:
        return LimitHit("process_limit", "processes", f"the program hit its limit of {limits.processes} processes")
    return None
