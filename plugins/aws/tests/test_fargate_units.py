"""The fargate backend's pure parts: the snapshot archives (a hostile archive writes nothing outside its folder;
packing never follows a link) and the mapping of ECS task states to the envelope's terms."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from berth_aws.archive import ArchiveError, Budget, checked_name, pack, unpack
from berth_aws.ecs import end_of, run_failure

TOPS = {"out": Budget(max_bytes=1024, max_files=3), "logs": Budget(max_bytes=1024, max_files=3)}


def test_pack_then_unpack_gives_the_same_files(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "charts").mkdir(parents=True)
    (source / "charts" / "a.png").write_bytes(b"\x89PNG")
    (source / "b.txt").write_text("b")
    archive = tmp_path / "x.zip"
    assert pack(archive, {"out": source}) == 2
    written = unpack(archive, tmp_path / "dest", TOPS)
    assert written == {"out": 2, "logs": 0}
    assert (tmp_path / "dest" / "out" / "charts" / "a.png").read_bytes() == b"\x89PNG"


def test_pack_never_follows_a_planted_link(tmp_path: Path) -> None:
    secret = tmp_path / "descriptors.yaml"
    secret.write_text("api_key: s3cret")
    out = tmp_path / "out"
    (out / "dir").mkdir(parents=True)
    (out / "leak.txt").symlink_to(secret)
    (out / "linked-dir").symlink_to(tmp_path)
    (out / "dir" / "ok.txt").write_text("ok")
    os.mkfifo(out / "pipe")
    archive = tmp_path / "x.zip"
    pack(archive, {"out": out})
    with zipfile.ZipFile(archive) as opened:
        assert opened.namelist() == ["out/dir/ok.txt"]


@pytest.mark.parametrize(
    "name", ["/etc/passwd", "out/../../x", "../out/x", "out", "other/x", "out//x", "out/./x", "out\\..\\x"]
)
def test_names_outside_the_known_folders_are_refused(name: str) -> None:
    with pytest.raises(ArchiveError):
        checked_name(name, TOPS)


@given(st.lists(st.sampled_from(["out", "logs", "..", ".", "", "a", "b.txt", "/", "\\"]), min_size=1, max_size=6))
def test_an_accepted_name_stays_under_its_top_folder(parts: list[str]) -> None:
    name = "/".join(parts)
    try:
        top, relative = checked_name(name, TOPS)
    except ArchiveError:
        return
    root = Path("/dest")
    target = (root / top / relative).resolve()
    assert target.is_relative_to(root / top) and target != root / top


def test_an_archive_over_its_budget_stops(tmp_path: Path) -> None:
    archive = tmp_path / "big.zip"
    with zipfile.ZipFile(archive, "w") as opened:
        opened.writestr("out/a", b"x" * 2000)
    with pytest.raises(ArchiveError, match="more than 1024 bytes"):
        unpack(archive, tmp_path / "dest", TOPS)
    with zipfile.ZipFile(archive, "w") as opened:
        for index in range(4):
            opened.writestr(f"logs/{index}", b"x")
    with pytest.raises(ArchiveError, match="more than 3 files"):
        unpack(archive, tmp_path / "dest2", TOPS)


def stopped(stop_code: str, reason: str = "", exit_code: int | None = 0, container_reason: str = "") -> dict:
    container = {"name": "exec", "lastStatus": "STOPPED", "reason": container_reason}
    if exit_code is not None:
        container["exitCode"] = exit_code
    return {"lastStatus": "STOPPED", "stopCode": stop_code, "stoppedReason": reason, "containers": [container]}


def test_ecs_stops_map_to_the_envelopes_terms() -> None:
    assert end_of(stopped("EssentialContainerExited", exit_code=3), "exec", stopped_by_berth=False).exit_code == 3
    pull = end_of(stopped("TaskFailedToStart", "CannotPullContainerError: x", None), "exec", stopped_by_berth=False)
    assert pull.failure == "the task's image could not be pulled: CannotPullContainerError: x"
    eni = end_of(stopped("TaskFailedToStart", "ResourceInitializationError: eni"), "exec", stopped_by_berth=False)
    assert eni.failure is not None and eni.failure.startswith("the task's resources could not be set up")
    spot = end_of(stopped("SpotInterruption", "Your Spot Task was interrupted."), "exec", stopped_by_berth=False)
    assert spot.stopped == "SpotInterruption: Your Spot Task was interrupted."
    ours = end_of(stopped("UserInitiated", "berth: exec timeout", 143), "exec", stopped_by_berth=True)
    assert ours.stopped is None and ours.exit_code == 143
    oom = stopped("EssentialContainerExited", exit_code=137, container_reason="OutOfMemoryError: Container killed")
    assert end_of(oom, "exec", stopped_by_berth=False).out_of_memory


def test_run_task_failures_say_whether_capacity_was_missing() -> None:
    assert run_failure({"tasks": [{"taskArn": "t"}], "failures": []}) is None
    capacity = run_failure({"tasks": [], "failures": [{"reason": "RESOURCE:MEMORY"}]})
    assert capacity == "no capacity to start the task: RESOURCE:MEMORY"
    missing = run_failure({"tasks": [], "failures": [{"reason": "MISSING", "detail": "subnet-1"}]})
    assert missing == "ECS did not start the task: MISSING (subnet-1)"
    assert run_failure({"tasks": [], "failures": []}) == "ECS started no task and gave no reason"
