"""What each strategy asks the engine for, read off the container spec (no engine needed); the tests with the
``docker`` marker prove the engine enforces it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from berth_docker.backend import DEADLINE_GRACE_S, DockerBackend, outcome_of, parse_mount, run_labels
from berth_docker.engine import CONTAINER_LABEL, DEADLINE_LABEL, ContainerEnd, EngineError

from berth.config.models.assembly import DockerExecProfile, ExecConfig
from berth.execution.limits import ExecLimits
from berth.execution.payload import read_supervisor_input
from berth.execution.profiles import Execution
from berth.execution.runs import ExecService
from berth.execution.sandbox import RunFolder, SandboxRequest
from berth.execution.sweep import ExecSweep


def request(tmp_path: Path, *, tools: bool) -> SandboxRequest:
    limits = ExecLimits(memory_mb=256, processes=32)
    return SandboxRequest("ex_1", "hello", RunFolder(tmp_path), "tok", limits, 61001, 61001, tools)


def test_split_locks_the_executor_down_and_binds_only_the_run(tmp_path: Path) -> None:
    spec = DockerBackend(image="img").container_spec(request(tmp_path, tools=True))
    config = spec.host_config
    assert config["network_mode"] == "none" and config["read_only"] is True
    assert config["cap_drop"] == ["ALL"] and "cap_add" not in config
    assert config["security_opt"] == ["no-new-privileges"]
    assert config["mem_limit"] == config["memswap_limit"] == 256 << 20 and config["pids_limit"] == 32
    assert spec.user == "61001:61001" and spec.environment == {}
    assert {bind["bind"]: bind["mode"] for bind in spec.binds.values()} == {
        "/workspace/program": "ro",
        "/workspace/work": "rw",
        "/workspace/out": "rw",
        "/run/berth": "ro",
    }
    assert "tok" not in " ".join(spec.command)  # the token goes in on stdin


def test_combined_hides_its_mounts_and_runs_only_the_capabilities_it_needs(tmp_path: Path) -> None:
    backend = DockerBackend(strategy="combined", mounts=["/srv/berth:/opt/berth-host"])
    spec = backend.combined_spec(request(tmp_path, tools=False))
    assert backend.runs_supervisor and backend.hidden_paths == ("/opt/berth-host",)
    assert spec.host_config["cap_drop"] == ["ALL"]
    assert spec.host_config["cap_add"] == ["SYS_ADMIN", "SETUID", "SETGID"]
    assert spec.binds["/srv/berth"] == {"bind": "/opt/berth-host", "mode": "ro"}
    assert spec.environment == {}  # the payload goes in on stdin: `docker inspect` shows no part of it
    environment, launch = read_supervisor_input(backend.container_input(request(tmp_path, tools=False), b"launch"))
    assert '"hidden_paths": ["/opt/berth-host"]' in environment["BERTH_EXEC_PAYLOAD"] and launch == b"launch"
    assert spec.binds[str(tmp_path / "logs")] == {"bind": "/run/berth-logs", "mode": "rw"}
    assert spec.command[-2:] == ["--supervisor-log", "/run/berth-logs/supervisor.log"]


def test_the_doctor_names_the_capabilities_the_combined_container_is_granted(tmp_path: Path) -> None:
    backend = DockerBackend(strategy="combined")
    granted = backend.combined_spec(request(tmp_path, tools=False)).host_config["cap_add"]
    summary = backend.isolation_summary()
    assert "no capabilities" not in summary.split("executor")[0]
    assert all(f"CAP_{capability}" in summary for capability in granted), summary
    assert "no capabilities" in DockerBackend(strategy="split").isolation_summary()


@pytest.mark.parametrize("text", ["", "/a", "/a:", ":/b", "/a:/b:rx", "/a:/b:ro:x"])
def test_a_malformed_mount_is_refused_with_its_text(text: str) -> None:
    with pytest.raises(ValueError, match="is not source:target"):
        parse_mount(text)


def test_engine_kills_and_oom_read_as_the_limits_that_caused_them() -> None:
    assert outcome_of(ContainerEnd(137, True, False), False, 1.0, "d").out_of_memory
    assert outcome_of(ContainerEnd(152, False, False), False, 1.0, "d").killed_by == 24  # SIGXCPU
    assert outcome_of(ContainerEnd(137, False, True), False, 1.0, "d").killed_by == 25  # output flood: SIGXFSZ
    timed_out = outcome_of(ContainerEnd(137, True, False), True, 1.0, "d")
    assert timed_out.timed_out and not timed_out.out_of_memory


def test_every_run_container_carries_the_deadline_past_which_a_sweep_removes_it(tmp_path: Path) -> None:
    run = request(tmp_path, tools=False)
    labels = run_labels(run, now=1_000_000.0)
    assert labels[CONTAINER_LABEL] == "ex_1"
    assert float(labels[DEADLINE_LABEL]) == 1_000_000 + run.limits.timeout_s + DEADLINE_GRACE_S
    for spec in (DockerBackend().container_spec(run), DockerBackend(strategy="combined").combined_spec(run)):
        assert DEADLINE_LABEL in spec.labels


def test_sweeping_with_the_engine_down_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match=r"no-engine\.sock"):
        DockerBackend(docker_host=f"unix://{tmp_path}/no-engine.sock").reap_stale()


async def test_an_exec_sweep_goes_on_past_an_engine_it_cannot_reach(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    execution = Execution({"docker": DockerBackend.from_profile}, service=ExecService(root=tmp_path / "runs"))
    unreachable = DockerExecProfile(backend="docker", docker_host=f"unix://{tmp_path}/no-engine.sock")
    config = ExecConfig(default_profile="docker", profiles={"docker": unreachable})
    sweep = ExecSweep(execution, lambda: config)

    with caplog.at_level(logging.WARNING, logger="berth.execution.sweep"):
        first = await sweep.sweep_once()
        second = await sweep.sweep_once()

    assert first.leftovers == second.leftovers == {}
    assert sweep.rounds == 2
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1, warnings  # once per reason, not every round
    assert "profile 'docker'" in warnings[0] and "no-engine.sock" in warnings[0]
