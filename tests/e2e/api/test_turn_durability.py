"""A turn acknowledged with 202 is never lost: ``kill -9`` of the host at random moments, then a restart.

Each trial starts ``berth run`` (a slow scripted model: each response comes after a pause, so turns are caught
queued, accepted, mid-round and committing), posts turns in several conversations, kills the process with
SIGKILL at a random moment after the last 202, and starts a new process on the same storage. Every acknowledged
turn must then be in its conversation, ``completed`` or ``interrupted`` with the user's message, and a client
resuming its event stream must get its end (``turn.failed {code: interrupted}`` or ``turn.completed``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

pytestmark = pytest.mark.usefixtures("clean_berth_env")

TRIALS = 12
TURNS_PER_TRIAL = 5  # 60 acknowledged turns in all
SCOPE = "/v1/default/default"
CALL = {"action": "call_tool", "notes": "", "tool_call": {"tool_id": "hello.greet", "params": {"name": "Ada"}}}
ANSWER = '<channel:action>{"action": "complete"}</channel:action><channel:answer>hi</channel:answer>'
SCRIPT = {
    "repeat": True,
    "responses": [
        {"delay_s": 0.15, "text": f"<channel:action>{json.dumps(CALL)}</channel:action>"},
        {"delay_s": 0.15, "text": ANSWER},
    ],
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Host:
    url: str
    process: subprocess.Popen[bytes]


def start(root: Path) -> Host:
    port = free_port()
    command = [str(Path(sys.executable).parent / "berth"), "run", "--port", str(port)]
    command += ["--descriptors", str(root / "descriptors"), "--var", str(root / "var")]
    log = (root / "berth.log").open("ab")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, (root / "berth.log").read_text()[-3000:]
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return Host(url, process)
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    process.kill()
    pytest.fail("berth run was not ready within 60 s")


def last_event(text: str) -> tuple[str, dict[str, object]]:
    """The event type and data of the last SSE frame of ``text``."""
    frame = text.strip().split("\n\n")[-1]
    fields = dict(line.split(": ", 1) for line in frame.splitlines() if not line.startswith(":"))
    return fields["event"], json.loads(fields["data"])


def descriptors(root: Path) -> None:
    folder = root / "descriptors"
    folder.mkdir(parents=True)
    (root / "script.yaml").write_text(yaml.safe_dump(SCRIPT))
    model = {"provider": "scripted", "model": str(root / "script.yaml")}
    assembly = {"platform": {"models": {"default": model}}, "tenants": {"default": {"projects": {"default": {}}}}}
    (folder / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    (folder / "bundles.yaml").write_text(yaml.safe_dump({"bundles": {"hello": {"source": {"entry_point": "hello"}}}}))
    limits = {"default": {"requests_per_minute": 100000, "burst": 1000, "concurrent_turns": 100}}
    gateway = {"auth": {"mode": "none"}, "limits": limits, "backpressure": {"max_inflight_turns_per_worker": 2}}
    (folder / "gateway.yaml").write_text(yaml.safe_dump(gateway))


def test_no_acknowledged_turn_vanishes_across_kill_9(tmp_path: Path) -> None:
    descriptors(tmp_path)
    chance = random.Random(20261124)
    acknowledged: list[tuple[str, str, str]] = []  # (conversation, turn, message)
    outcomes: dict[str, int] = {}
    for trial in range(TRIALS):
        host = start(tmp_path)
        with httpx.Client(base_url=host.url, timeout=30) as client:
            for n in range(TURNS_PER_TRIAL):
                conversation = client.post(f"{SCOPE}/conversations", json={"bundle": "hello"}).json()["id"]
                message = f"trial {trial} turn {n}"
                started = client.post(f"{SCOPE}/conversations/{conversation}/turns", json={"message": message})
                assert started.status_code == 202, started.text
                acknowledged.append((conversation, started.json()["turn_id"], message))
                time.sleep(chance.uniform(0, 0.05))
        time.sleep(chance.uniform(0, 0.8))
        os.kill(host.process.pid, signal.SIGKILL)
        host.process.wait()

    host = start(tmp_path)
    try:
        with httpx.Client(base_url=host.url, timeout=30) as client:
            for conversation, turn_id, message in acknowledged:
                detail = client.get(f"{SCOPE}/conversations/{conversation}")
                assert detail.status_code == 200, detail.text
                turns = {turn["turn_id"]: turn for turn in detail.json()["turns"]}
                assert turn_id in turns, f"turn {turn_id} ({message}) was acknowledged but is gone"
                state = turns[turn_id]["state"]
                assert state in {"completed", "interrupted"}, state
                assert turns[turn_id]["prompt"] == message
                outcomes[state] = outcomes.get(state, 0) + 1
                events = client.get(
                    f"{SCOPE}/conversations/{conversation}/turns/{turn_id}/events",
                    headers={"Last-Event-ID": f"{turn_id}:3"},
                )
                assert events.status_code == 200
                kind, data = last_event(events.text)
                if state == "interrupted":
                    assert (kind, data["code"]) == ("turn.failed", "interrupted")
                else:
                    assert (kind, data["outcome"]) == ("turn.completed", "completed")
    finally:
        host.process.terminate()
        host.process.wait(20)
    assert len(acknowledged) >= 50
    assert outcomes.get("interrupted", 0) > 0  # the kills really caught turns in flight
