"""The ``berth`` CLI: version, descriptors check/show/schema, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

import berth
from berth.cli import cli
from berth.cli.descriptors import descriptor_schemas
from berth.cli.errors import run_guarded
from berth.config.yamlsource import parse_yaml_text

pytestmark = pytest.mark.usefixtures("clean_berth_env")


def berth_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    executable = Path(sys.executable).parent / "berth"
    return subprocess.run(
        [str(executable), *args], capture_output=True, text=True, cwd=cwd, env=env, check=False, timeout=60
    )


def test_version_prints_the_installed_version() -> None:
    result = berth_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"berth, version {berth.__version__}"


def test_check_passes_on_the_example_descriptors(repo_root: Path) -> None:
    result = berth_cli("descriptors", "check", str(repo_root / "descriptors"))
    assert result.returncode == 0, result.stderr
    assert "2 tenant(s), 3 project(s), 3 bundle(s)" in result.stdout


def test_check_with_no_descriptors_uses_the_embedded_defaults(tmp_path: Path) -> None:
    result = berth_cli("descriptors", "check", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "embedded defaults" in result.stdout


def test_descriptors_dir_comes_from_the_environment_when_not_given(tmp_path: Path, repo_root: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "BERTH_DESCRIPTORS": str(repo_root / "descriptors")}
    result = berth_cli("descriptors", "check", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert "3 bundle(s)" in result.stdout


def test_bad_descriptors_exit_2_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "bundles.yaml").write_text("bundles:\n  hello: {source: {entrypoint: hello}}\n")
    result = berth_cli("descriptors", "check", str(tmp_path))
    assert result.returncode == 2
    assert "bundles.yaml:2 bundles.hello.source.entrypoint: unknown key 'entrypoint'" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_command_is_a_usage_error() -> None:
    assert run_guarded(cli, ["descriptors", "frobnicate"]) == 2


def test_project_without_tenant_is_a_usage_error(repo_root: Path) -> None:
    assert run_guarded(cli, ["descriptors", "show", str(repo_root / "descriptors"), "--project", "support"]) == 2


def test_unknown_scope_is_a_config_error(repo_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_guarded(cli, ["descriptors", "show", str(repo_root / "descriptors"), "--tenant", "initech"])
    assert code == 2
    assert "error [unknown_scope]: tenant 'initech' is not declared" in capsys.readouterr().err


def test_show_resolves_one_scope(repo_root: Path) -> None:
    result = CliRunner().invoke(
        cli, ["descriptors", "show", str(repo_root / "descriptors"), "--tenant", "acme", "--project", "support"]
    )
    assert result.exit_code == 0, result.output
    view = yaml.safe_load(result.output)
    assert view["scope"] == "acme/support"
    assert view["settings"]["react"]["max_iterations"] == 20
    assert view["bundles"]["default"] == "docs"
    assert view["bundles"]["props"]["docs"]["greeting"] == "Hi from ACME support"
    assert view["limits"]["requests_per_minute"] == 600


def test_show_as_json_is_valid_json(repo_root: Path) -> None:
    result = CliRunner().invoke(cli, ["descriptors", "show", str(repo_root / "descriptors"), "--format", "json"])
    assert json.loads(result.output)["tenants"]["globex"]["projects"]["research"]["title"] == "Globex research"


def test_schema_writes_one_file_per_descriptor(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["descriptors", "schema", str(tmp_path)])
    assert result.exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "assembly.schema.json",
        "bundles.schema.json",
        "bundles.secrets.schema.json",
        "gateway.schema.json",
        "secrets.schema.json",
    ]


def test_committed_schemas_are_up_to_date(repo_root: Path) -> None:
    for file_name, schema in descriptor_schemas().items():
        committed = repo_root / "descriptors" / "schema" / file_name.replace(".yaml", ".schema.json")
        assert json.loads(committed.read_text()) == json.loads(json.dumps(schema)), (
            f"{committed} is stale: run `berth descriptors schema descriptors/schema`"
        )


def test_example_descriptors_validate_against_their_schemas(repo_root: Path) -> None:
    for file_name, schema in descriptor_schemas().items():
        path = repo_root / "descriptors" / file_name
        jsonschema.validate(parse_yaml_text(path.read_text(), file_name).data, schema)


def test_run_refuses_to_start_without_the_models_key(repo_root: Path, tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    result = berth_cli("run", "--descriptors", str(repo_root / "descriptors"), "--var", str(tmp_path / "var"), env=env)
    assert result.returncode == 2
    assert "ANTHROPIC_API_KEY" in result.stderr
    assert "berth run --demo" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_refuses_open_auth_off_loopback(tmp_path: Path) -> None:
    result = berth_cli("run", "--demo", "--host", "0.0.0.0", "--var", str(tmp_path / "var"), cwd=tmp_path)
    assert result.returncode == 2
    assert "auth mode 'none' may only listen on loopback" in result.stderr


def test_embedded_defaults_serve_every_installed_bundle(tmp_path: Path) -> None:
    result = berth_cli("descriptors", "show", "--format", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    bundles = json.loads(result.stdout)["bundles"]["bundles"]
    assert {"hello", "docs", "ops-copilot"} <= set(bundles)
    assert bundles["hello"]["source"]["entry_point"] == "hello"


def test_chat_in_process_streams_answers_of_consecutive_turns(tmp_path: Path) -> None:
    result = berth_cli("chat", "--in-process", "--demo", "--bundle", "hello", "-m", "hi", "-m", "again", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("`hello.greet` answered: Hello, friend!") == 2
    assert "[Greeting (Wikipedia)](https://en.wikipedia.org/wiki/Greeting)" in result.stdout
    assert "  1. What can this bundle do?" in result.stdout  # numbered: typing 1 sends it
    assert result.stderr.count("✓ hello.greet") == 2  # each tool line marked ok when its result comes
