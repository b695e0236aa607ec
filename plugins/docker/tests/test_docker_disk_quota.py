"""The run's disk quota holds in a docker split container too: the container binds the host's ``work/`` and
``out/``, which are the run's quota tmpfs, so a program writing past ``disk_mb`` ends with ``disk_limit`` (a real
Docker engine; ``docker`` marker). The bubblewrap run and the sweep are in ``tests/integration/exec``."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from berth_docker.backend import DockerBackend
from berth_docker.engine import CONTAINER_LABEL, client_for
from berth_docker.testing import build_test_image

from berth.execution.limits import MIB, ExecLimits
from berth.execution.runs import ExecService

pytestmark = pytest.mark.usefixtures("clean_berth_env")

IMAGE = "berth-exec:test"

WRITES_100_MIB = """
import os
chunk = b"x" * (1024 * 1024)
with open(os.path.join(os.environ["OUTPUT_DIR"], "summary.txt"), "w") as summary:
    summary.write("written before the quota was reached")
written = 0
try:
    for part in range(10):  # 10 parts of 5 MiB in work/ and as many in out/: 100 MiB
        for folder in (os.environ["WORKDIR"], os.environ["OUTPUT_DIR"]):
            with open(os.path.join(folder, f"part{part}.bin"), "wb", buffering=0) as sink:
                for _ in range(5):
                    written += sink.write(chunk)
except OSError as error:
    print(f"stopped by {error.strerror} after {written} bytes")
"""


def mounts_under(root: Path) -> list[str]:
    """The lines of /proc/self/mounts whose mount point is under ``root``."""
    return [line for line in Path("/proc/self/mounts").read_text().splitlines() if f" {root}/" in line]


@pytest.fixture(scope="module")
def exec_image() -> str:
    return build_test_image(IMAGE)


@pytest.fixture
def service() -> Iterator[ExecService]:
    root = Path("/tmp") / f"berth-docker-quota-test-{os.getpid()}"
    yield ExecService(root=root)
    subprocess.run(["rm", "-rf", str(root)], check=False)


@pytest.mark.docker
@pytest.mark.sandbox
async def test_a_split_container_writing_past_its_disk_quota_ends_with_disk_limit(
    service: ExecService, exec_image: str
) -> None:
    run = await service.run(
        WRITES_100_MIB,
        backend=DockerBackend(image=exec_image, strategy="split"),
        limits=ExecLimits(timeout_s=60, disk_mb=32),
        bundle_id="b",
    )

    envelope = run.envelope
    assert envelope.error is not None and not envelope.ok  # it caught ENOSPC and exited 0: still not ok
    assert (envelope.error.code, envelope.error.limit) == ("disk_limit", "disk_mb"), envelope.report_text
    written = int(envelope.user_out_tail.split("stopped by No space left on device after ")[1].split()[0])
    assert 16 * MIB < written <= 32 * MIB  # stopped at the quota, not on the host's disk
    outputs = {output.relative: output.data for output in run.outputs}
    assert outputs["summary.txt"] == b"written before the quota was reached"
    assert "part0.bin" in outputs
    assert mounts_under(service.root) == []
    assert not client_for(None).containers.list(all=True, filters={"label": f"{CONTAINER_LABEL}={envelope.exec_id}"})
