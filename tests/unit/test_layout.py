"""The repository layout contract (SPEC §1) and the rule that only berth.config reads the environment."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import berth
import berth.exec
import berth.plugins


def test_folders_map_to_one_berth_namespace(repo_root: Path) -> None:
    assert Path(berth.__file__).parent == repo_root / "platform"
    assert Path(berth.plugins.__file__).parent == repo_root / "plugins"
    assert Path(berth.exec.__file__).parent == repo_root / "exec"


def test_platform_folder_never_shadows_the_standard_library(repo_root: Path) -> None:
    probe = "import platform, sys; print(platform.__file__); print(platform.python_version())"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=repo_root, capture_output=True, text=True, check=True, timeout=60
    )
    module_file, version = result.stdout.split()
    assert not module_file.startswith(str(repo_root))
    assert version == ".".join(map(str, sys.version_info[:3]))


ENVIRON_READ = re.compile(r"os\.environ|os\.getenv|getenv\(|environ\.get")


def test_no_code_outside_berth_config_reads_the_environment(repo_root: Path) -> None:
    offenders = []
    for folder in ("platform", "plugins", "exec"):
        for path in (repo_root / folder).rglob("*.py"):
            if path.is_relative_to(repo_root / "platform" / "config"):
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if ENVIRON_READ.search(line):
                    offenders.append(f"{path.relative_to(repo_root)}:{number}: {line.strip()}")
    assert offenders == []
