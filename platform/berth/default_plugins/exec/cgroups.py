"""cgroup v1 limits for one local run: memory (all its processes together), processes and CPU share.

Rlimits bound each process; a run of 32 processes could still hold 32 times its memory. Where the cgroup v1
controllers are writable (``/sys/fs/cgroup/{memory,pids,cpu}``), each run has a cgroup of its own in each, named
by its exec id (``berth-exec/<exec_id>``, never shared with another run, whichever host process started it), set
to its ``memory.limit_in_bytes`` (and the same for memory+swap), ``pids.max`` and a CPU quota of one core. The run's
first process joins them before it starts bubblewrap (:meth:`RunCgroup.wrap`), so everything the program starts is
charged to the run. After the run, whatever is left in them is killed and they are removed (:meth:`RunCgroup.remove`);
the host's exec sweep removes the empty ones a dead host left (:func:`remove_empty_cgroups`).
Where they are not writable (cgroup v2 only, a read-only ``/sys``), runs go on with rlimits alone and
``berth exec doctor`` says so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from berth.execution.limits import MIB, ExecLimits

ROOT: Final = Path("/sys/fs/cgroup")
CONTROLLERS: Final = ("memory", "pids", "cpu")
PARENT: Final = "berth-exec"
CPU_PERIOD_US: Final = 100_000
EMPTY_WAIT_S: Final = 5.0
"""How long the end of a run waits for its cgroups to empty before leaving them to the sweep."""
EMPTY_POLL_S: Final = 0.01
JOIN_SCRIPT: Final = (
    'for f in $BERTH_CGROUP_PROCS; do echo $$ > "$f" || exit 125; done; unset BERTH_CGROUP_PROCS; exec "$@"'
)
"""Run as the executor's uid: join each cgroup (its ``cgroup.procs`` is chowned to that uid), then exec."""


def cgroups_writable() -> bool:
    """Whether this process can make cgroups in every controller a run uses."""
    return all(os.access(ROOT / controller, os.W_OK) for controller in CONTROLLERS)


@dataclass(frozen=True, slots=True)
class RunCgroup:
    """The cgroups of one run, one per controller."""

    folders: tuple[Path, ...]
    oom_kills_before: int = 0
    refused_forks_before: int = 0

    @classmethod
    def prepare(cls, limits: ExecLimits, uid: int, exec_id: str) -> RunCgroup | None:
        """The cgroups of run ``exec_id`` (executor ``uid``) set to ``limits`` (``None`` when cgroups are not
        writable)."""
        if not cgroups_writable() or not exec_id or "/" in exec_id or exec_id.startswith("."):
            return None
        folders = tuple(ROOT / controller / PARENT / exec_id for controller in CONTROLLERS)
        try:
            for folder in folders:
                if not folder.is_dir():
                    folder.mkdir(parents=True, exist_ok=True)
                    os.chown(folder / "cgroup.procs", uid, -1)
            memory, pids, cpu = folders
            limit = str(limits.memory_mb * MIB)
            (memory / "memory.limit_in_bytes").write_text(limit)
            with contextlib.suppress(OSError):  # absent when the kernel accounts no swap
                (memory / "memory.memsw.limit_in_bytes").write_text(limit)
            (pids / "pids.max").write_text(str(limits.processes))
            (cpu / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (cpu / "cpu.cfs_quota_us").write_text(str(CPU_PERIOD_US))
        except OSError:
            RunCgroup(folders).remove()
            return None
        return cls(folders, _oom_kills(folders[0]), _refused_forks(folders[1]))

    def wrap(self, argv: list[str]) -> tuple[list[str], dict[str, str]]:
        """``argv`` started by a shell that first moves itself into the run's cgroups, and the variable it reads."""
        procs = " ".join(str(folder / "cgroup.procs") for folder in self.folders)
        script = (
            'for f in $BERTH_CGROUP_PROCS; do echo $$ > "$f" || exit 125; done; unset BERTH_CGROUP_PROCS; exec "$@"'
        )
        return ["/bin/sh", "-c", script, "berth-exec", *argv], {"BERTH_CGROUP_PROCS": procs}

    def out_of_memory(self) -> bool:
        """Whether the kernel killed a process of the run for going over its memory limit (since :meth:`prepare`)."""
        return _oom_kills(self.folders[0]) > self.oom_kills_before

    def process_limit_hit(self) -> bool:
        """Whether the kernel refused a fork or clone of the run for going over ``pids.max`` (since :meth:`prepare`),
        even when the program caught the error and went on."""
        return _refused_forks(self.folders[1]) > self.refused_forks_before

    def remove(self) -> None:
        """Kill whatever of the run is left in its cgroups, then remove them."""
        for folder in self.folders:
            _kill_members(folder)
            with contextlib.suppress(OSError):
                folder.rmdir()


def _kill_members(folder: Path, within_s: float = EMPTY_WAIT_S) -> None:
    """SIGKILL every process still in the cgroup ``folder`` and wait (up to ``within_s``) for it to empty: the
    processes of a killed pid namespace take a moment to be gone, and a cgroup holding one cannot be removed."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            pids = [int(line) for line in (folder / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(EMPTY_POLL_S)  # cgroup v1 has no event for "emptied"


EMPTY_GRACE_S: Final = 60.0
"""A run cgroup younger than this is left alone by the sweep even when empty: its run may not have joined yet."""


def remove_empty_cgroups(grace_s: float = EMPTY_GRACE_S) -> int:
    """Remove the run cgroups under ``berth-exec`` that hold no process and are older than ``grace_s`` (a dead
    host's runs); return how many."""
    removed = 0
    now = time.time()
    for controller in CONTROLLERS:
        parent = ROOT / controller / PARENT
        try:
            children = [child for child in parent.iterdir() if child.is_dir()]
        except OSError:
            continue
        for child in children:
            try:
                if now - child.stat().st_mtime < grace_s:
                    continue
                child.rmdir()  # the kernel refuses while a process is in it
            except OSError:
                continue
            removed += 1
    return removed


def _oom_kills(memory: Path) -> int:
    """How many processes the kernel has killed in a memory cgroup for going over its limit."""
    try:
        control = (memory / "memory.oom_control").read_text()
    except OSError:
        return 0
    counts = [int(line.split()[1]) for line in control.splitlines() if line.startswith("oom_kill ")]
    return counts[0] if counts else 0


def _refused_forks(pids: Path) -> int:
    """How many forks the kernel has refused in a pids cgroup for going over its ``pids.max`` (``pids.events``)."""
    try:
        events = (pids / "pids.events").read_text()
    except OSError:
        return 0
    counts = [int(line.split()[1]) for line in events.splitlines() if line.startswith("max ")]
    return counts[0] if counts else 0
