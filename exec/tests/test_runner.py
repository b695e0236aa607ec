"""The executor bootstrap runs a program as ``python3 program`` would, without importing what the program does not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from berth_exec.runner import launch_lines

EXEC_ROOT = Path(__file__).resolve().parents[1]
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").is_file() else sys.executable
"""The executors' interpreter (a venv's would import its editable installs' finders, and ``re`` with them)."""
BOOTSTRAP = f"import sys; sys.path.insert(0, {str(EXEC_ROOT)!r}); from berth_exec.runner import main; main()"


def run_program(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` through the bootstrap in a plain subprocess (no sandbox: the bootstrap alone is tested)."""
    program = tmp_path / "main.py"
    program.write_text(code)
    launch = launch_lines("a-token", str(program), {"cpu_s": 30})
    return subprocess.run(
        [PYTHON, "-I", "-B", "-u", "-c", BOOTSTRAP],
        input=launch,
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=60,
    )


def test_the_program_is_the_main_module(tmp_path: Path) -> None:
    done = run_program(
        tmp_path,
        "import sys\nprint(__name__, __file__ == sys.argv[0], sys.modules['__main__'].__dict__ is globals())\n",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["__main__", "True", "True"]


def test_the_program_starts_without_pkgutil_typing_or_re(tmp_path: Path) -> None:
    done = run_program(tmp_path, "import sys\nprint(sorted({'pkgutil', 'typing', 're', 'runpy'} & set(sys.modules)))\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_programs_own_classes_pickle_and_spawned_processes_find_them(tmp_path: Path) -> None:
    done = run_program(
        tmp_path,
        "import multiprocessing, pickle\n"
        "class Point:\n"
        "    def __init__(self, x): self.x = x\n"
        "def double(p): return p.x * 2\n"
        "if __name__ == '__main__':\n"
        "    assert pickle.loads(pickle.dumps(Point(3))).x == 3\n"
        "    with multiprocessing.get_context('spawn').Pool(1) as pool:\n"
        "        print(pool.map(double, [Point(1), Point(2)]))\n",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[2, 4]"


def test_a_raising_program_exits_1_with_its_own_traceback(tmp_path: Path) -> None:
    done = run_program(tmp_path, "def fail():\n    raise ValueError('bad input')\nfail()\n")
    assert done.returncode == 1
    assert "ValueError: bad input" in done.stderr
    assert "berth_exec/runner.py" not in done.stderr
    assert 'main.py", line 2, in fail' in done.stderr


def test_sys_exit_code_is_the_exit_status(tmp_path: Path) -> None:
    assert run_program(tmp_path, "import sys\nsys.exit(7)\n").returncode == 7


def test_the_confinement_travels_in_the_launch_lines_and_back() -> None:
    from berth_exec.confinement import Confinement
    from berth_exec.runner import read_launch

    sent = Confinement(
        [("landlock_read", "/usr"), ("landlock_write", "/runs/ex 1/work"), ("landlock_unlisted", "/dev/shm")],
        minimum_abi=4,
        seccomp=bytes(range(16)),
        oom_score_adj=1000,
    )
    lines = launch_lines("a-token", "/runs/ex 1/program/main.py", {"cpu_s": 30}, sent).splitlines(keepends=True)
    token, program, limits, received = read_launch(lines)
    assert (token, program, limits) == ("a-token", "/runs/ex 1/program/main.py", {"cpu_s": 30})
    assert received is not None
    assert received.rules == sent.rules
    assert (received.minimum_abi, received.seccomp, received.oom_score_adj) == (4, bytes(range(16)), 1000)
    assert read_launch(launch_lines("t", "/p.py", {}).splitlines())[3] is None  # a sandbox was built around it


def test_a_confinement_that_cannot_be_applied_ends_the_bootstrap_before_the_program(tmp_path: Path) -> None:
    from berth_exec.confinement import CONFINEMENT_FAILED, FAILURE_MARK, Confinement

    program = tmp_path / "main.py"
    program.write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('ran')\n")
    launch = launch_lines(
        "t", str(program), {}, Confinement([("landlock_read", str(tmp_path / "none"))], minimum_abi=1)
    )
    done = subprocess.run(
        [PYTHON, "-I", "-B", "-u", "-c", BOOTSTRAP],
        input=launch,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == CONFINEMENT_FAILED
    assert done.stderr.startswith(FAILURE_MARK)
    assert not (tmp_path / "ran").exists()
