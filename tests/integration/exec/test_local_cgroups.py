"""The local backend's cgroup limits: the memory of all a run's processes together, and its cleanup."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from berth.default_plugins.exec.cgroups import PARENT, ROOT, RunCgroup, cgroups_writable
from berth.default_plugins.exec.local import LocalBackend
from berth.execution.limits import ExecLimits
from berth.execution.runs import ExecService

pytestmark = pytest.mark.sandbox

FOUR_PROCESSES_OF_120_MIB = """
import os, time
children = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        block = bytearray(120 * 1024 * 1024)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(0.5)
        os._exit(0)
    children.append(pid)
raise SystemExit(1 if any(os.waitpid(pid, 0)[1] for pid in children) else 0)
"""
LIMITS = ExecLimits(timeout_s=20, memory_mb=256)  # each process fits under RLIMIT_AS; four together do not


@pytest.fixture
def service() -> ExecService:
    return ExecService(root=Path("/tmp") / f"berth-exec-cgroups-{os.getpid()}")


@pytest.mark.skipif(not cgroups_writable(), reason="cgroup v1 controllers are not writable here")
async def test_processes_over_the_memory_limit_together_are_stopped(service: ExecService) -> None:
    run = await service.run(FOUR_PROCESSES_OF_120_MIB, backend=LocalBackend(), limits=LIMITS, bundle_id="probe")
    assert not run.envelope.ok
    assert run.envelope.error is not None
    assert (run.envelope.error.code, run.envelope.error.limit) == ("memory_limit", "memory_mb")
    assert not (ROOT / "memory" / PARENT / run.envelope.exec_id).exists()  # the run's own, removed after it
    again = await service.run("print('ok')", backend=LocalBackend(), limits=LIMITS, bundle_id="probe")
    assert again.envelope.ok, again.envelope.report_text  # an earlier run's out-of-memory is not this one's


async def test_without_cgroups_rlimits_alone_let_the_same_program_through(service: ExecService) -> None:
    """What the cgroup adds: per-process rlimits do not bound a run's processes together."""
    run = await service.run(
        FOUR_PROCESSES_OF_120_MIB, backend=LocalBackend(use_cgroups=False), limits=LIMITS, bundle_id="probe"
    )
    assert run.envelope.ok, run.envelope.report_text


@pytest.mark.skipif(not cgroups_writable(), reason="cgroup v1 controllers are not writable here")
def test_each_run_has_cgroups_of_its_own_even_with_the_same_uid() -> None:
    """Named by exec id, not by uid: two runs never share a pids or memory budget, whichever process started them;
    and removed after their run."""
    first = RunCgroup.prepare(LIMITS, 61000, "ex_first")
    second = RunCgroup.prepare(LIMITS, 61000, "ex_second")
    assert first is not None and second is not None
    try:
        assert set(first.folders).isdisjoint(second.folders)
        assert ROOT / "pids" / PARENT / "ex_first" in first.folders
        assert (ROOT / "pids" / PARENT / "ex_first" / "pids.max").read_text().strip() == str(LIMITS.processes)
    finally:
        first.remove()
        second.remove()
    assert not any(folder.exists() for folder in (*first.folders, *second.folders))
