"""What a host killed mid-run leaves (its run folder, its run's cgroups) is removed by the next host's start and by
the exec sweep; a live run's folder, whichever process runs it, is kept (issue 40, item 4)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.config.models.assembly import ExecConfig
from berth.default_plugins.exec.cgroups import PARENT, ROOT, RunCgroup, cgroups_writable
from berth.default_plugins.exec.local import LocalBackend
from berth.execution.limits import ExecLimits
from berth.execution.profiles import Execution
from berth.execution.runs import ExecService
from berth.execution.sweep import ExecSweep

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("clean_berth_env")]

WAITS_FOR_THE_TEST = """
import os
work = os.environ["WORKDIR"]
os.mkfifo(os.path.join(work, "stop"))
open(os.path.join(work, "ready"), "w").close()
with open(os.path.join(work, "stop")) as stop:  # blocks until the test writes (or the run is killed)
    stop.read()
print("stopped")
"""


def berth_exec_run(program: Path, descriptors: Path) -> subprocess.Popen[str]:
    executable = Path(sys.executable).parent / "berth"
    return subprocess.Popen(
        [str(executable), "exec", "run", str(program), "--descriptors", str(descriptors), "--out", "kept"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=program.parent,
    )


def run_folder_of(process: subprocess.Popen[str], root: Path, known: set[Path], within_s: float = 60) -> Path:
    """The run folder ``process``'s program has made ready (the first under ``root`` not in ``known``)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        found = [path.parent.parent for path in root.glob("*/work/ready") if path.parent.parent not in known]
        if found:
            return found[0]
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)  # polls a condition the sandboxed program sets; no fixed wait
    raise AssertionError(f"no ready run under {root} within {within_s} s")


@pytest.fixture
def descriptors(tmp_path: Path, runs_root: Path) -> Path:
    folder = tmp_path / "descriptors"
    folder.mkdir()
    (folder / "assembly.yaml").write_text(
        f"platform:\n  exec:\n    runs_root: {runs_root}\n"  # the machine's uid lock folder, as other tests
    )
    return folder


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "waits.py"
    path.write_text(WAITS_FOR_THE_TEST)
    return path


@pytest.fixture
def killed_and_live(
    program: Path, descriptors: Path, runs_root: Path
) -> Iterator[tuple[Path, Path, subprocess.Popen[str]]]:
    """A run whose host was SIGKILLed mid-run (its folder), and a live run in another process (folder, host)."""
    killed = berth_exec_run(program, descriptors)
    live: subprocess.Popen[str] | None = None
    killed_folder: Path | None = None
    live_folder: Path | None = None
    try:
        killed_folder = run_folder_of(killed, runs_root, set())
        live = berth_exec_run(program, descriptors)
        live_folder = run_folder_of(live, runs_root, {killed_folder})
        assert _owner_pid(killed_folder) == killed.pid
        killed.kill()  # SIGKILL mid-run: no finally of the host runs
        killed.wait()
        assert killed_folder.is_dir()  # left behind
        yield killed_folder, live_folder, live
    finally:
        for process in (killed, live):
            if process is not None:
                process.kill()
                process.wait()
        for folder in ROOT.glob(f"*/{PARENT}/ex_*"):  # the killed runs' cgroups: a sweep would take them in a minute
            if folder.name in {path.name for path in (killed_folder, live_folder) if path is not None}:
                with contextlib.suppress(OSError):
                    folder.rmdir()


def _owner_pid(folder: Path) -> int:
    """The pid a run folder's owner lock names (the host process that made it)."""
    return int((folder / "owner.lock").read_text().split()[0])


def _finish(live_folder: Path, host: subprocess.Popen[str]) -> None:
    with open(live_folder / "work" / "stop", "w") as stop:
        stop.write("x")
    stdout, stderr = host.communicate(timeout=120)
    envelope = json.loads(stdout)
    assert envelope["ok"], envelope["report_text"] + stderr
    assert envelope["user_out_tail"] == "stopped\n"


async def test_the_exec_sweep_removes_a_killed_hosts_run_folder_and_keeps_a_live_one(
    killed_and_live: tuple[Path, Path, subprocess.Popen[str]], runs_root: Path
) -> None:
    killed_folder, live_folder, live_host = killed_and_live
    execution = Execution({"local": LocalBackend.from_profile}, service=ExecService(root=runs_root))
    sweep = ExecSweep(execution, lambda: ExecConfig())

    swept = await sweep.sweep_once()

    assert swept.folders == 1
    assert not killed_folder.exists()
    assert live_folder.is_dir()
    _finish(live_folder, live_host)  # the live run was not disturbed
    assert not live_folder.exists()  # and its own host removed its folder


def test_a_hosts_start_removes_a_killed_hosts_run_folder(
    killed_and_live: tuple[Path, Path, subprocess.Popen[str]], tmp_path: Path, descriptors: Path
) -> None:
    killed_folder, live_folder, live_host = killed_and_live
    quick = tmp_path / "quick.py"
    quick.write_text("print('ok')\n")

    done = subprocess.run(
        [str(Path(sys.executable).parent / "berth"), "exec", "run", str(quick), "--descriptors", str(descriptors)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert not killed_folder.exists()
    assert live_folder.is_dir()
    _finish(live_folder, live_host)


@pytest.mark.skipif(not cgroups_writable(), reason="cgroup v1 controllers are not writable here")
def test_the_local_backends_sweep_removes_empty_run_cgroups_past_their_grace() -> None:
    left = RunCgroup.prepare(ExecLimits(), 61000, "ex_left_by_a_dead_host")
    assert left is not None
    try:
        assert LocalBackend().reap_stale() == 0  # a cgroup just made may be a run about to join it
        assert all(folder.is_dir() for folder in left.folders)
        old = time.time() - 3600
        for folder in left.folders:
            os.utime(folder, (old, old))
        assert LocalBackend().reap_stale() >= 3
        assert not any(folder.exists() for folder in left.folders)
    finally:
        left.remove()


def _mount_points_under(folder: Path) -> set[str]:
    """The mount points at or under ``folder`` in this process's mount namespace (the host's)."""
    return {line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()} & {
        str(folder / name) for name in ("disk", "work", "out")
    }


async def test_the_exec_sweep_unmounts_a_killed_hosts_run_disk_and_keeps_a_live_ones(
    killed_and_live: tuple[Path, Path, subprocess.Popen[str]], runs_root: Path
) -> None:
    killed_folder, live_folder, live_host = killed_and_live
    mounted = {str(killed_folder / name) for name in ("disk", "work", "out")}
    assert _mount_points_under(killed_folder) == mounted  # the killed host never unmounted its run's quota tmpfs
    execution = Execution({"local": LocalBackend.from_profile}, service=ExecService(root=runs_root))

    await ExecSweep(execution, lambda: ExecConfig()).sweep_once()

    assert _mount_points_under(killed_folder) == set()
    assert not killed_folder.exists()
    assert _mount_points_under(live_folder) == {str(live_folder / name) for name in ("disk", "work", "out")}
    _finish(live_folder, live_host)
    assert _mount_points_under(live_folder) == set()
