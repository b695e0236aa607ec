"""``berth exec run`` and ``berth exec doctor`` as a user runs them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from berth.default_plugins.exec.landlocked import landlock_abi
from berth_exec.landlock import FULL_ABI

pytestmark = pytest.mark.usefixtures("clean_berth_env")


def berth(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    executable = Path(sys.executable).parent / "berth"
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        [str(executable), *args], capture_output=True, text=True, cwd=cwd, env=environment, check=False, timeout=120
    )


@pytest.mark.sandbox
def test_run_serves_the_bundles_tools_in_scope_and_keeps_the_outputs(tmp_path: Path, repo_root: Path) -> None:
    program = tmp_path / "greet.py"
    program.write_text(
        "import os\nfrom berth_exec import tools\n"
        "greeting = tools.call('hello.greet', name='Ann')\n"
        "open(os.path.join(os.environ['OUTPUT_DIR'], 'greeting.txt'), 'w').write(greeting)\n"
        "print(greeting)\n"
    )
    result = berth(
        "exec", "run", str(program), "--descriptors", str(repo_root / "descriptors"),
        "--bundle", "hello", "--tenant", "acme", "--project", "support", "--out", "kept",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    envelope = json.loads(result.stdout)
    assert envelope["ok"] is True
    assert envelope["user_out_tail"] == "Hello, Ann!\n"
    assert envelope["backend"] == "local"
    assert (tmp_path / "kept" / "greeting.txt").read_text() == "Hello, Ann!"
    assert (
        tmp_path / "kept" / "executed_programs" / envelope["exec_id"] / "main.py"
    ).read_text() == program.read_text()


@pytest.mark.sandbox
def test_a_failing_program_exits_1_with_the_reason_in_the_envelope(tmp_path: Path) -> None:
    program = tmp_path / "boom.py"
    program.write_text("raise ValueError('no such column: price')\n")
    result = berth("exec", "run", str(program), cwd=tmp_path)
    assert result.returncode == 1
    envelope = json.loads(result.stdout)
    assert envelope["error"]["code"] == "nonzero_exit"
    assert "ValueError: no such column: price" in envelope["runtime_err_tail"]
    assert "berth_exec" not in envelope["runtime_err_tail"]  # the traceback starts at the program


def test_an_unknown_profile_is_a_clear_error(tmp_path: Path) -> None:
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    result = berth("exec", "run", str(program), "--profile", "gpu", cwd=tmp_path)
    assert result.returncode != 0
    assert "exec profile 'gpu' is not configured (known: sandbox)" in result.stderr


def test_bundle_without_a_scope_is_refused(tmp_path: Path) -> None:
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    result = berth("exec", "run", str(program), "--bundle", "hello", cwd=tmp_path)
    assert result.returncode == 2
    assert "--bundle needs --tenant and --project" in result.stderr


@pytest.mark.sandbox
def test_doctor_reports_each_profiles_isolation(tmp_path: Path) -> None:
    result = berth("exec", "doctor", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "sandbox  local    isolation" in result.stdout
    assert "bwrap (requested auto)" in result.stdout
    assert "every check is met" in result.stderr


@pytest.mark.skipif(landlock_abi() < FULL_ABI, reason=f"needs Landlock ABI {FULL_ABI} (Linux 6.12+)")
def test_doctor_reads_the_descriptors_of_berth_descriptors_and_says_landlock_is_in_force(
    tmp_path: Path, example_descriptors: Path
) -> None:
    """As in the chart's pod: no --descriptors, the folder from BERTH_DESCRIPTORS, a landlock profile."""
    descriptors = _with_exec_lines(
        example_descriptors, "    profiles:", "      confined: {backend: local, isolation: landlock}"
    )
    result = berth("exec", "doctor", cwd=tmp_path, env={"BERTH_DESCRIPTORS": str(descriptors)})
    rows = [line for line in result.stdout.splitlines() if line.startswith("confined ")]
    assert any("isolation" in row and "landlock (requested landlock): Landlock and seccomp" in row for row in rows)
    assert any(" Landlock " in row for row in rows), result.stdout


def _with_exec_lines(descriptors: Path, after: str, *lines: str) -> Path:
    """``descriptors`` with ``lines`` added to ``assembly.yaml`` right after the line ``after`` (a text edit: a YAML
    round trip would turn ``off`` into ``false``)."""
    assembly = descriptors / "assembly.yaml"
    text = assembly.read_text()
    assert after + "\n" in text
    assembly.write_text(text.replace(after + "\n", after + "\n" + "".join(line + "\n" for line in lines), 1))
    return descriptors


def test_doctor_exits_1_when_a_check_is_not_met(tmp_path: Path, example_descriptors: Path) -> None:
    descriptors = _with_exec_lines(
        example_descriptors, "    profiles:", "      nopython: {backend: local, python: /nonexistent/python3}"
    )
    result = berth("exec", "doctor", "--descriptors", str(descriptors), cwd=tmp_path)
    assert "nopython  local    python in the sandbox" in result.stdout, result.stdout
    assert "check(s) not met" in result.stderr
    assert result.returncode == 1


@pytest.mark.sandbox
def test_run_keeps_its_run_folders_under_runs_root(tmp_path: Path, example_descriptors: Path) -> None:
    # not under tmp_path: the executor's uid must traverse the folders above it (pytest's are 0700)
    runs_root = Path("/tmp") / f"berth-runs-root-{uuid.uuid4().hex[:8]}"
    descriptors = _with_exec_lines(example_descriptors, "  exec:", f"    runs_root: {runs_root}")
    program = tmp_path / "p.py"
    program.write_text("print('hi')\n")
    result = berth("exec", "run", str(program), "--descriptors", str(descriptors), cwd=tmp_path)
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        assert runs_root.is_dir()  # the service made it for the run (and removed the run's own folder after)
    finally:
        shutil.rmtree(runs_root, ignore_errors=True)
