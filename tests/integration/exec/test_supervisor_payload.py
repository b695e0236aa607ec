"""The supervisor's descriptors, filtered per ``descriptor_payload_scope``, and the supervisor as its own process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.config import Configuration
from berth.config.errors import ConfigError, DescriptorError
from berth.execution.payload import (
    LaunchPayload,
    PayloadScope,
    filter_descriptors,
    materialize,
    payload_environment,
)
from berth_exec.tools import SupervisorClient, ToolCallError

pytestmark = pytest.mark.usefixtures("clean_berth_env")


@pytest.fixture
def descriptors(example_descriptors: Path) -> Path:
    """The example set plus a second tenant's bundle secrets and a second bundle's, to leave out."""
    (example_descriptors / "bundles.secrets.yaml").write_text(
        yaml.safe_dump(
            {
                "bundles": {
                    "hello": {"greeting_key": "literal:hello-shared-1111"},
                    "docs": {"search_api_key": "literal:docs-shared-2222"},
                },
                "tenants": {
                    "acme/support": {
                        "hello": {"greeting_key": "literal:hello-acme-3333"},
                        "docs": {"search_api_key": "literal:docs-acme-4444"},
                    },
                    "globex/research": {"docs": {"search_api_key": "literal:docs-globex-5555"}},
                },
            }
        )
    )
    return example_descriptors


def documents_of(folder: Path) -> dict[str, Any]:
    config = Configuration.load(folder)
    return {name: document.data for name, document in config.descriptors.documents.items()}


def materialized(descriptors: Path, folder: Path, scope: PayloadScope) -> tuple[Path, str]:
    """The supervisor's descriptor folder for hello in acme/support, and all its text."""
    chosen = filter_descriptors(
        documents_of(descriptors), tenant="acme", project="support", bundle_id="hello", scope=scope
    )
    payload = LaunchPayload("ex_1", "token", "acme", "support", "hello", 61000, "/run/berth/supervisor.sock")
    materialize(payload_environment(payload, chosen), folder)
    return folder, "\n".join(path.read_text() for path in sorted(folder.iterdir()))


def test_active_bundle_scope_leaves_out_other_bundles_tenants_and_keys(descriptors: Path, tmp_path: Path) -> None:
    folder, text = materialized(descriptors, tmp_path / "materialized", "active_bundle")
    for absent in ("docs-shared-2222", "docs-acme-4444", "docs-globex-5555", "globex", "ops-copilot", "internal",
                   "sha256", "docs"):  # fmt: skip
        assert absent not in text, absent
    assert "hello-shared-1111" in text and "hello-acme-3333" in text
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    config = Configuration.load(folder)  # what the supervisor loads is a valid descriptor set
    assert list(config.descriptors.bundles.bundles) == ["hello"]
    assert list(config.descriptors.assembly.tenants) == ["acme"]
    assert list(config.descriptors.assembly.tenants["acme"].projects) == ["support"]
    assert config.secrets("acme", "support", "hello")("b:greeting_key").reveal() == "hello-acme-3333"


def test_a_platform_secret_leaves_the_host_only_with_a_bundle_that_declares_it(
    descriptors: Path, tmp_path: Path
) -> None:
    """The models section refers to ``secret:anthropic_api_key``: hello does not declare it, so its supervisor gets
    the name (the descriptors still validate) but not the source; once declared, it gets the source."""
    (descriptors / "secrets.yaml").write_text("anthropic_api_key: 'literal:sk-ant-model-key-6666'\nother: x-7777\n")
    folder, text = materialized(descriptors, tmp_path / "withheld", "active_bundle")
    assert "sk-ant-model-key-6666" not in text and "x-7777" not in text and "other" not in text
    config = Configuration.load(folder)
    with pytest.raises(ConfigError) as withheld:
        config.secrets("acme", "support", "hello")("anthropic_api_key")
    assert withheld.value.code == "secret_withheld"

    bundles = yaml.safe_load((descriptors / "bundles.yaml").read_text())
    bundles["bundles"]["hello"]["secrets"] = ["anthropic_api_key"]
    (descriptors / "bundles.yaml").write_text(yaml.safe_dump(bundles))
    folder, text = materialized(descriptors, tmp_path / "declared", "active_bundle")
    assert "x-7777" not in text
    config = Configuration.load(folder)
    assert config.secrets("acme", "support", "hello")("anthropic_api_key").reveal() == "sk-ant-model-key-6666"


def test_a_bundle_cannot_declare_a_secret_secrets_yaml_lacks(descriptors: Path) -> None:
    bundles = yaml.safe_load((descriptors / "bundles.yaml").read_text())
    bundles["bundles"]["hello"]["secrets"] = ["no_such_secret"]
    (descriptors / "bundles.yaml").write_text(yaml.safe_dump(bundles))
    with pytest.raises(DescriptorError) as refused:
        Configuration.load(descriptors)
    assert "secret 'no_such_secret' is not declared in secrets.yaml" in str(refused.value)


def test_full_scope_gives_everything(descriptors: Path, tmp_path: Path) -> None:
    _, text = materialized(descriptors, tmp_path / "materialized", "full")
    for present in ("docs-shared-2222", "docs-globex-5555", "globex", "ops-copilot", "sha256"):
        assert present in text, present


def test_the_supervisor_process_serves_the_bundle_in_scope(descriptors: Path, tmp_path: Path) -> None:
    chosen = filter_descriptors(
        documents_of(descriptors),
        tenant="acme",
        project="support",
        bundle_id="hello",
        scope="active_bundle",
        base_dir=descriptors,
    )
    socket_path = tmp_path / "supervisor.sock"
    payload = LaunchPayload("ex_1", "the-run-token", "acme", "support", "hello", os.getuid(), str(socket_path))
    environment = {**os.environ, **payload_environment(payload, chosen)}
    process = subprocess.Popen(
        [sys.executable, "-m", "berth.execution.supervisor_process"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == f"ready {socket_path}"
        client = SupervisorClient(str(socket_path), "the-run-token")
        assert client.request({"op": "call", "tool_id": "hello.greet", "params": {"name": "Ann"}}) == "Hello, Ann!"
        with pytest.raises(ToolCallError) as refused:
            client.request({"op": "call", "tool_id": "docs.search", "params": {"query": "x"}})
        assert refused.value.code == "tool_not_allowed"
        client.close()
        with pytest.raises(ToolCallError) as forged:
            SupervisorClient(str(socket_path), "forged").request({"op": "call", "tool_id": "hello.greet", "params": {}})
        assert forged.value.code == "unauthorized"
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0, stderr
    assert not socket_path.exists()


def test_a_supervisor_without_a_payload_says_so() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "berth.execution.supervisor_process"],
        env={key: value for key, value in os.environ.items() if not key.startswith("BERTH_")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "BERTH_EXEC_PAYLOAD is not set" in result.stderr
