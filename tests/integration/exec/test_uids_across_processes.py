"""Two host processes at once (two ``berth exec run``): their runs never share a uid, a cgroup or a process
budget, so a fork bomb in one does not throttle the other (issue 40, item 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.execution.uids import DEFAULT_LOCK_DIR, UidLease

pytestmark = [pytest.mark.sandbox, pytest.mark.usefixtures("clean_berth_env")]

PIDS = 32
FORK_BOMB = """
import os
read_end, write_end = os.pipe()
children = 0
while children < 1000:
    try:
        pid = os.fork()
    except OSError:
        break  # the run's process budget is spent
    if pid == 0:
        os.close(write_end)
        os.read(read_end, 1)  # held until the parent ends
        os._exit(0)
    children += 1
work = os.environ["WORKDIR"]
os.mkfifo(os.path.join(work, "stop"))
with open(os.path.join(work, "ready.tmp"), "w") as handle:
    handle.write(f"{os.getuid()} {children}")
os.rename(os.path.join(work, "ready.tmp"), os.path.join(work, "ready"))
with open(os.path.join(work, "stop")) as stop:  # blocks until the test writes
    stop.read()
"""
FORKS_A_FEW = """
import os
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
print(os.getuid())
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


def wait_for_file(pattern: str, root: Path, process: subprocess.Popen[str], within_s: float = 60) -> Path:
    """The first file under ``root`` matching ``pattern``, once the program made it (fails if ``process`` ends)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        found = sorted(root.glob(pattern))
        if found:
            return found[0]
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)  # polls a condition the sandboxed program sets; no fixed wait
    raise AssertionError(f"no {pattern} under {root} within {within_s} s")


@pytest.fixture
def descriptors(tmp_path: Path, runs_root: Path) -> Path:
    folder = tmp_path / "descriptors"
    folder.mkdir()
    (folder / "assembly.yaml").write_text(
        "platform:\n  exec:\n"  # the machine's uid lock folder: the runs of other tests lease from it too
        f"    runs_root: {runs_root}\n"
        f"    profiles:\n      sandbox: {{backend: local, timeout_s: 60, pids: {PIDS}}}\n"
    )
    return folder


@pytest.fixture
def bomb(tmp_path: Path, descriptors: Path, runs_root: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    program = tmp_path / "a" / "bomb.py"
    program.parent.mkdir()
    program.write_text(FORK_BOMB)
    process = berth_exec_run(program, descriptors)
    try:
        yield process, wait_for_file("*/work/ready", runs_root, process)
    finally:
        process.kill()
        process.wait()


def test_a_fork_bomb_in_one_process_does_not_throttle_a_run_of_another(
    tmp_path: Path, descriptors: Path, bomb: tuple[subprocess.Popen[str], Path]
) -> None:
    bomber, ready = bomb
    bomb_uid, bomb_children = (int(part) for part in ready.read_text().split())
    assert bomb_children >= PIDS - 8  # it holds (nearly) its whole process budget

    program = tmp_path / "b" / "few.py"
    program.parent.mkdir()
    program.write_text(FORKS_A_FEW)
    other = berth_exec_run(program, descriptors)
    stdout, stderr = other.communicate(timeout=120)
    envelope = json.loads(stdout)
    assert envelope["ok"], envelope["report_text"] + stderr
    assert int(envelope["user_out_tail"]) != bomb_uid
    other_uid = int(envelope["user_out_tail"])

    with open(ready.parent / "stop", "w") as stop:  # the bomb's run ends, reporting the limit it ran into
        stop.write("x")
    stdout, stderr = bomber.communicate(timeout=120)
    bombed = json.loads(stdout)
    assert not bombed["ok"], stderr
    assert bombed["error"]["code"] == "process_limit", bombed
    assert {f"uid-{bomb_uid}", f"uid-{other_uid}"} <= {path.name for path in DEFAULT_LOCK_DIR.iterdir()}


def test_a_uid_held_by_a_process_is_not_handed_out_by_another(tmp_path: Path) -> None:
    """The lease is the kernel's: a process holding uid 61000's lock makes another process take 61001, and the
    lock is gone with the process (SIGKILL included)."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from berth.execution.uids import UidLease\n"
            f"lease = UidLease(Path({str(tmp_path)!r}))\n"
            "print(lease.try_acquire(), flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "61000"
        here = UidLease(tmp_path)
        assert here.try_acquire() == 61001
    finally:
        holder.kill()
        holder.wait()
    assert UidLease(tmp_path).try_acquire() == 61000  # the dead holder's lock went with it
