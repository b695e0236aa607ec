"""More docker ``split`` runs at once than the event loop's default executor has threads, each calling a sync
bundle tool through the supervisor: a run streams its container's output and awaits its end without holding one
of those threads, so they all live together (a real Docker engine; ``docker`` marker).

The tool is a meeting point: it returns only once every run has called it, so the runs end only if all of them are
alive at the same time. The default executor is cut to two threads, standing for a host's (``os.cpu_count() + 4``
threads) with more runs than that in flight; each run starts once the one before is in its tool call, so each
thread a run held for its life would be held before the next run needs one. ``tests/integration/exec`` has the
same test for the local backend.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from berth_docker.backend import DockerBackend
from berth_docker.testing import build_test_image

from berth.execution.limits import ExecLimits
from berth.execution.runs import ExecRun, ExecService
from berth.testing.exec_meeting import MEETING_PROGRAM, MeetingPoint
from berth.testing.exec_meeting import scarce_default_executor as scarce_default_executor_of

pytestmark = [pytest.mark.docker, pytest.mark.sandbox, pytest.mark.usefixtures("clean_berth_env")]

IMAGE = "berth-exec:test"
RUNS = (os.cpu_count() or 1) + 4
DEFAULT_THREADS = 2
MEET_TIMEOUT_S = 90.0
LIMITS = ExecLimits(timeout_s=180, memory_mb=256, cpu_s=10, processes=32, file_size_mb=4)


@pytest.fixture(scope="module")
def exec_image() -> str:
    return build_test_image(IMAGE)


@pytest.fixture
async def scarce_default_executor() -> AsyncIterator[None]:
    """The running loop's default executor cut to :data:`DEFAULT_THREADS` threads."""
    async with scarce_default_executor_of(DEFAULT_THREADS):
        yield


@pytest.mark.usefixtures("scarce_default_executor")
async def test_more_split_runs_than_default_threads_all_live_at_once_and_finish(exec_image: str) -> None:
    service = ExecService(root=Path("/tmp") / f"berth-docker-test-{os.getpid()}")
    backend = DockerBackend(image=exec_image, strategy="split")
    meeting = MeetingPoint(RUNS, MEET_TIMEOUT_S)
    started = time.monotonic()
    pending: list[asyncio.Future[ExecRun]] = []
    for number in range(RUNS):
        pending.append(
            asyncio.ensure_future(
                service.run(MEETING_PROGRAM, backend=backend, limits=LIMITS, bundle_id="probe",
                            dispatch=meeting.dispatch, inputs=[("run.txt", str(number).encode())])
            )
        )  # fmt: skip
        await meeting.arrived[number].wait()  # alive and in its tool call: only now the next run starts
    runs = await asyncio.gather(*pending)
    wall_s = time.monotonic() - started
    for run in runs:
        assert run.envelope.ok, run.envelope.report_text
    assert sorted(int(run.envelope.user_out_tail) for run in runs) == list(range(RUNS))  # Barrier.wait's indexes
    print(f"{RUNS} concurrent docker split runs, default executor of {DEFAULT_THREADS} threads: {wall_s:.2f} s")
