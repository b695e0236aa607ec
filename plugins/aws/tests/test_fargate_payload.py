"""What a fargate run's launch payload (its Secrets Manager secret, against moto's server) carries of the
platform's secrets: only those the run's bundle declares (``descriptor_payload_scope: active_bundle``)."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from berth.config import Configuration
from berth.execution.limits import ExecLimits
from berth.execution.payload import supervisor_scope_of
from berth.execution.runs import remote_supervisor_environment
from berth.execution.sandbox import RunFolder, SandboxRequest, executor_options
from berth_aws.fargate import FargateBackend, RunLocation
from berth_aws.testing import create_exec_world

pytestmark = [pytest.mark.aws, pytest.mark.usefixtures("clean_berth_env")]

REPO = Path(__file__).resolve().parents[3]
MODEL_KEY = "sk-ant-platform-key-4242"


@pytest.fixture
def descriptors(tmp_path: Path) -> Path:
    """The example set, its model API key a literal the models section refers to (``secret:anthropic_api_key``)."""
    folder = tmp_path / "descriptors"
    shutil.copytree(REPO / "descriptors", folder, ignore=shutil.ignore_patterns("schema"))
    (folder / "secrets.yaml").write_text(f"anthropic_api_key: 'literal:{MODEL_KEY}'\n")
    return folder


def stored_payload(descriptors: Path, moto_endpoint: str, tmp_path: Path) -> str:
    """The payload secret the backend stores for a run of hello in acme/support, as Secrets Manager holds it."""
    world = create_exec_world(moto_endpoint, "berth-exec:test", region="eu-west-1")
    backend = FargateBackend.from_profile(world["profile"])
    limits = ExecLimits(timeout_s=60)
    scope = supervisor_scope_of(Configuration.load(descriptors), "acme", "support")
    environment = remote_supervisor_environment(
        scope, "ex_payload", "the-token", "hello", 61000, limits, executor_options(backend)
    )
    folder = RunFolder(tmp_path / "run")
    request = SandboxRequest("ex_payload", "hello", folder, "the-token", limits, 61000, 61000, True, environment)
    location = RunLocation(backend.bucket, backend.prefix, request.exec_id)
    arn = backend.put_payload(request, location)
    clients: dict[str, Any] = world["clients"]
    try:
        return str(clients["secretsmanager"].get_secret_value(SecretId=arn)["SecretString"])
    finally:
        backend.clean_up(location)


def test_the_payload_of_a_bundle_that_does_not_declare_the_model_key_holds_no_model_key(
    descriptors: Path, moto_endpoint: str, aws_credentials: None, tmp_path: Path
) -> None:
    assert MODEL_KEY not in decoded(stored_payload(descriptors, moto_endpoint, tmp_path))


def test_the_payload_of_a_bundle_that_declares_the_model_key_holds_it(
    descriptors: Path, moto_endpoint: str, aws_credentials: None, tmp_path: Path
) -> None:
    bundles = yaml.safe_load((descriptors / "bundles.yaml").read_text())
    bundles["bundles"]["hello"]["secrets"] = ["anthropic_api_key"]
    (descriptors / "bundles.yaml").write_text(yaml.safe_dump(bundles))
    assert MODEL_KEY in decoded(stored_payload(descriptors, moto_endpoint, tmp_path))


def decoded(payload: str) -> str:
    """The payload document with its base64 descriptor variables decoded after it."""
    environment = json.loads(payload)["environment"]
    texts = [base64.b64decode(value).decode("utf-8") for name, value in environment.items() if name.endswith("_B64")]
    return "\n".join([payload, *texts])
