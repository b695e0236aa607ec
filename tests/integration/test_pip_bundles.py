"""Pip-installed bundles: a scaffolded bundle installs and loads unchanged; an upgrade reloads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pip_tools import overlay_venv, pip

from berth.config import Configuration
from berth.host.registry import BundleRegistry
from berth.host.scaffold import scaffold_bundle

pytestmark = pytest.mark.usefixtures("clean_berth_env")

BERTH = str(Path(sys.executable).parent / "berth")


@pytest.fixture
def scaffolded(tmp_path: Path) -> tuple[Path, Path]:
    """The scaffolded project and the ``bin`` folder of the venv it is ``pip install -e``'d into (a venv of the
    test's own over this one: the project's venv is not changed, other tests never see the bundle)."""
    project = scaffold_bundle("scaffold-probe", tmp_path)
    bin_folder = overlay_venv(tmp_path / "venv")
    pip("install", "--no-deps", "--no-build-isolation", "-e", str(project), python=bin_folder / "python")
    return project, bin_folder


def test_a_scaffolded_bundle_installs_and_loads_unchanged(scaffolded: tuple[Path, Path], tmp_path: Path) -> None:
    project, bin_folder = scaffolded
    descriptors = tmp_path / "descriptors"
    descriptors.mkdir()
    entry = {"source": {"entry_point": "scaffold-probe"}}
    (descriptors / "bundles.yaml").write_text(yaml.safe_dump({"bundles": {"scaffold-probe": entry}}))
    listed = subprocess.run(
        [bin_folder / "berth", "bundles", "list", "--descriptors", str(descriptors)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith("scaffold-probe")]
    assert row.split()[1:5] == ["0.1.0", "entry_point:scaffold-probe", "1", "loaded"]
    tests = subprocess.run(
        [bin_folder / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", str(project / "tests")],
        capture_output=True,
        text=True,
        cwd=project,
        timeout=120,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "1 passed" in tests.stdout


def test_new_refuses_an_invalid_name_and_an_existing_folder(tmp_path: Path) -> None:
    result = subprocess.run(
        [BERTH, "bundles", "new", "Bad_Name", "--dir", str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "is not a bundle id" in result.stderr
    (tmp_path / "taken").mkdir()
    result = subprocess.run([BERTH, "bundles", "new", "taken", "--dir", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 2
    assert "already exists" in result.stderr


UPGRADE_BUNDLE = """
from berth import BundleInfo, hookimpl, tool
from .impl import answer

@hookimpl
def berth_bundle():
    return BundleInfo(id="upgrade-probe", version="{version}")

@hookimpl
def berth_tools(ctx):
    return [answer]
"""
UPGRADE_IMPL = '''
from berth import tool

@tool
def answer() -> str:
    """Say which release serves."""
    return "release {version}"
'''


def write_release(project: Path, version: str) -> None:
    package = project / "upgrade_probe"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(UPGRADE_BUNDLE.replace("{version}", version))
    (package / "impl.py").write_text(UPGRADE_IMPL.replace("{version}", version))
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=70"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "berth-bundle-upgrade-probe"\nversion = "{version}"\n'
        '[project.entry-points."berth.bundles"]\n"upgrade-probe" = "upgrade_probe"\n'
        '[tool.setuptools]\npackages = ["upgrade_probe"]\n'
    )


async def test_an_upgraded_package_reloads_while_the_old_generation_keeps_its_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, target = tmp_path / "project", tmp_path / "site"
    write_release(project, "1.0")
    pip("install", "--no-deps", "--no-build-isolation", "--target", str(target), str(project))
    monkeypatch.syspath_prepend(str(target))
    descriptors = tmp_path / "descriptors"
    descriptors.mkdir()
    entry = {"source": {"entry_point": "upgrade-probe"}}
    (descriptors / "bundles.yaml").write_text(yaml.safe_dump({"bundles": {"upgrade-probe": entry}}))
    registry = BundleRegistry(Configuration.load(descriptors))
    try:
        (outcome,) = await registry.start()
        assert outcome.ok, outcome.error
        async with registry.use("upgrade-probe") as old:
            write_release(project, "2.0")
            pip("install", "--no-deps", "--no-build-isolation", "--upgrade", "--target", str(target), str(project))
            reloaded = await registry.reload("upgrade-probe")
            assert reloaded.ok, reloaded.error
            new = registry.current("upgrade-probe")
            assert (old.info.version, new.info.version) == ("1.0", "2.0")
            old_entry, new_entry = old.catalog.get("upgrade-probe.answer"), new.catalog.get("upgrade-probe.answer")
            assert old_entry is not None
            assert old_entry.spec is not None
            assert new_entry is not None
            assert new_entry.spec is not None
            assert await old_entry.spec.invoke({}) == "release 1.0"
            assert await new_entry.spec.invoke({}) == "release 2.0"
    finally:
        await registry.close()
        for name in [m for m in sys.modules if m == "upgrade_probe" or m.startswith("upgrade_probe.")]:
            del sys.modules[name]
