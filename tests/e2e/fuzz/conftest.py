"""A real ``berth run --demo`` host for the fuzzing tests, shared by every module of this folder."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
USER = {"Authorization": "Bearer acme-web-dev-key"}
ADMIN = {"Authorization": "Bearer ops-admin-dev-key"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="package")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``berth run --demo`` over a copy of the example descriptors, rate limits lifted (the fuzzer is quick)."""
    root = tmp_path_factory.mktemp("fuzz-host")
    descriptors = root / "descriptors"
    shutil.copytree(REPO_ROOT / "descriptors", descriptors, ignore=shutil.ignore_patterns("schema", "var"))
    gateway = (descriptors / "gateway.yaml").read_text()
    unlimited = gateway[: gateway.index("limits:")] + gateway[gateway.index("attachments:") :]
    (descriptors / "gateway.yaml").write_text(unlimited)
    port = _free_port()
    command = [str(Path(sys.executable).parent / "berth"), "run", "--demo", "--port", str(port)]
    command += ["--descriptors", str(descriptors), "--var", str(root / "var")]
    with (root / "berth.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _ready(url):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"berth run did not start:\n{(root / 'berth.log').read_text()}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


KNOWN_FILE = "Отчёт.txt"
"""An attachment of the known turn, named outside Latin-1: its download's headers must carry the name."""


@pytest.fixture(scope="package")
def known_ids(host: str) -> dict[str, str]:
    """Path parameters of things that exist: the key's scope, a conversation, its finished turn and a file of it
    (``file_path``, the files route's ``path``)."""
    created = httpx.post(f"{host}/v1/acme/support/conversations", json={"bundle": "hello"}, headers=USER)
    assert created.status_code == 201, created.text
    conversation = created.json()["id"]
    turns = f"{host}/v1/acme/support/conversations/{conversation}/turns"
    with httpx.stream(
        "POST",
        turns,
        data={"message": "hi"},
        files={"file": (KNOWN_FILE, b"a report", "text/plain")},
        headers={**USER, "Accept": "text/event-stream"},
        timeout=30,
    ) as stream:
        assert "event: turn.completed" in stream.read().decode()
    turn = httpx.get(f"{host}/v1/acme/support/conversations/{conversation}", headers=USER).json()["turns"][0]
    return {
        "tenant": "acme",
        "project": "support",
        "conversation_id": conversation,
        "turn_id": turn["turn_id"],
        "bundle_id": "hello",
        "file_path": f"fi:{turn['turn_id']}.attachments/{KNOWN_FILE}",
    }
