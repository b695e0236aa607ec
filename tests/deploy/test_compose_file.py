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


def test_the_third_party_images_can_be_pointed_at_a_private_registry(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["postgres"]["image"] == "${POSTGRES_IMAGE:-postgres:16}"
    assert services["redis"]["image"] == "${REDIS_IMAGE:-redis:7}"
    assert services["s3"]["image"].startswith("${S3_IMAGE:-motoserver/moto:")


def test_the_worker_count_is_the_files_so_a_later_up_keeps_it(compose: dict[str, Any]) -> None:
    """``scale:`` (read by v1 and v2), not ``deploy.replicas`` (ignored by v1 without --compatibility)."""
    worker = compose["services"]["worker"]
    assert worker["scale"] == "${BERTH_WORKERS:-2}"
    assert "deploy" not in worker


def test_the_exec_image_is_the_stacks_own_tag(compose: dict[str, Any]) -> None:
    """The descriptors name ``berth-exec:latest``; the stack overrides it with the tag it runs ``berth`` at, for
    every Berth process (an API process validates the profiles too)."""
    variable = "BERTH_PLATFORM__EXEC__PROFILES__DOCKER__IMAGE"
    assert compose["x-berth"]["image"] == "berth:${BERTH_TAG:-latest}"
    for name in BERTH_SERVICES:
        assert compose["services"][name]["environment"][variable] == "berth-exec:${BERTH_TAG:-latest}", name
    assemblies = yaml.safe_load((DEPLOY / "compose" / "descriptors" / "assembly.yaml").read_text())
    assert "docker" in assemblies["platform"]["exec"]["profiles"]


def test_the_api_follows_descriptor_edits(compose: dict[str, Any]) -> None:
    """Workers watch their descriptors by default; ``berth run`` only with ``--watch``."""
    assert "--watch" in compose["services"]["api"]["command"]
    assert "--no-watch" not in compose["services"]["worker"]["command"]


def test_real_secrets_and_variables_are_git_ignored_and_the_examples_are_not() -> None:
    repository = DEPLOY.parent
    if not (repository / ".git").exists():
        pytest.skip("not a git checkout")

    def ignored(path: str) -> bool:
        checked = subprocess.run(["git", "check-ignore", "-q", path], cwd=repository, check=False)
        return checked.returncode == 0

    assert ignored("deploy/compose/secrets/pg_dsn")
    assert ignored("deploy/.env")
    assert not ignored("deploy/compose/secrets.example/pg_dsn")


COMPOSES = {
    "v1": (["docker-compose"], "apt-get install docker-compose (.ci/run does)"),
    "v2": (["docker", "compose"], "the docker compose v2 plugin (docker-compose-plugin) is not packaged for Debian"),
}


def _compose_config(command: list[str], variables: dict[str, str]) -> subprocess.CompletedProcess[str]:
    secrets = str(DEPLOY / "compose" / "secrets.example")
    environment = {"PATH": "/usr/bin:/bin:/usr/local/bin", "BERTH_SECRETS_DIR": secrets}
    return subprocess.run(
        [*command, "-f", str(DEPLOY / "compose.yaml"), "config"],
        env={**environment, **variables},
        capture_output=True,
        text=True,
        check=False,
    )


def _require(version: str) -> list[str]:
    command, install = COMPOSES[version]
    present = shutil.which(command[0]) is not None
    if present and version == "v2":
        present = subprocess.run([*command, "version"], capture_output=True, check=False).returncode == 0
    if not present:
        reason = f"no compose {version}: {install}"
        if running_in_ci() and version == "v1":
            pytest.fail(reason)
        pytest.skip(reason)
    return command


@pytest.mark.parametrize("version", sorted(COMPOSES))
def test_compose_accepts_the_file_as_it_is_shipped(version: str) -> None:
    """Compose parses and validates it against the compose schema, variables unset, with the defaults."""
    checked = _compose_config(_require(version), {})
    assert checked.returncode == 0, checked.stderr
    resolved = yaml.safe_load(checked.stdout)
    worker = resolved["services"]["worker"]
    assert int(worker.get("scale", worker.get("deploy", {}).get("replicas", 0))) == 2
    assert resolved["services"]["postgres"]["image"] == "postgres:16"
    assert worker["environment"]["BERTH_PLATFORM__EXEC__PROFILES__DOCKER__IMAGE"] == "berth-exec:latest"


@pytest.mark.parametrize("version", sorted(COMPOSES))
def test_compose_reads_the_operators_variables(version: str) -> None:
    variables = {
        "BERTH_TAG": "0.1.0",
        "BERTH_WORKERS": "3",
        "POSTGRES_IMAGE": "registry.example.com/postgres:16",
        "REDIS_IMAGE": "registry.example.com/redis:7",
        "S3_IMAGE": "registry.example.com/moto:5.2.5",
    }
    checked = _compose_config(_require(version), variables)
    assert checked.returncode == 0, checked.stderr
    services = yaml.safe_load(checked.stdout)["services"]
    worker = services["worker"]
    assert int(worker.get("scale", worker.get("deploy", {}).get("replicas", 0))) == 3
    assert {services[name]["image"] for name in ("postgres", "redis", "s3")} == {
        variables["POSTGRES_IMAGE"],
        variables["REDIS_IMAGE"],
        variables["S3_IMAGE"],
    }
    assert {services[name]["image"] for name in BERTH_SERVICES} == {"berth:0.1.0"}
    for name in BERTH_SERVICES:
        assert services[name]["environment"]["BERTH_PLATFORM__EXEC__PROFILES__DOCKER__IMAGE"] == "berth-exec:0.1.0"
