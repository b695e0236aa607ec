"""``deploy/compose.yaml`` as operators get it: its descriptors pass the check, every secret it names has an example
file, and the Berth services carry the hardening and the mounts the exec backend needs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from berth.cli import cli
from berth.config.environment import running_in_ci

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BERTH_SERVICES = ("migrate", "api", "worker", "bucket")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / "compose.yaml").read_text()))


def test_the_stack_descriptors_pass_the_check() -> None:
    result = CliRunner().invoke(cli, ["descriptors", "check", str(DEPLOY / "compose" / "descriptors")])
    assert result.exit_code == 0, result.output
    assert "1 tenant(s)" in result.output


def test_every_secret_has_an_example_file_and_is_named_by_a_file_reference(compose: dict[str, Any]) -> None:
    example = DEPLOY / "compose" / "secrets.example"
    for name, secret in compose["secrets"].items():
        assert secret["file"] == f"${{BERTH_SECRETS_DIR:-./compose/secrets}}/{name}"
        assert (example / name).is_file(), name
    references = yaml.safe_load((DEPLOY / "compose" / "descriptors" / "secrets.yaml").read_text())
    for name, reference in references.items():
        assert reference == f"file:/run/secrets/{name}"
        assert name in compose["services"]["api"]["secrets"]


@pytest.mark.parametrize("name", BERTH_SERVICES)
def test_berth_services_run_hardened_with_descriptors_read_only(compose: dict[str, Any], name: str) -> None:
    service = compose["services"][name]
    assert service["image"].startswith("berth:")
    assert service["read_only"] is True
    assert service["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in service["security_opt"]
    assert "${BERTH_DESCRIPTORS_DIR:-./compose/descriptors}:/etc/berth/descriptors:ro" in service["volumes"]


def test_the_worker_shares_its_run_folders_at_the_same_path_and_reaches_the_engine(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    runs = worker["environment"]["BERTH_PLATFORM__EXEC__RUNS_ROOT"]
    assert f"{runs}:{runs}" in worker["volumes"]
    assert any(volume.endswith(":/var/run/docker.sock") for volume in worker["volumes"])
    assert "--health-port" in worker["command"]
    assert worker["environment"]["BERTH_HEALTHCHECK_URL"].endswith(":8001/readyz")
    assert "worker" not in compose["services"]["api"]["command"]
    for service in ("api", "worker"):
        assert compose["services"][service]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}


def test_compose_accepts_the_file_as_it_is_shipped() -> None:
    """Debian's docker-compose (1.29) parses and validates it against the compose schema, variables unset."""
    if shutil.which("docker-compose") is None:
        reason = "no docker-compose: apt-get install docker-compose (.ci/run does)"
        if running_in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    environment = {"PATH": "/usr/bin:/bin", "BERTH_SECRETS_DIR": str(DEPLOY / "compose" / "secrets.example")}
    checked = subprocess.run(
        ["docker-compose", "-f", str(DEPLOY / "compose.yaml"), "config", "--quiet"],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
