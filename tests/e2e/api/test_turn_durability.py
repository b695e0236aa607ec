"""A turn acknowledged with 202 is never lost: ``kill -9`` of the host at random moments, then a restart.

Each trial starts ``berth run`` (a slow scripted model: each response comes after a pause, and the worker runs
two turns at a time, so turns are caught queued, accepted, mid-round and committing), posts turns in several
conversations, kills the process with SIGKILL at a random moment after the last 202, and starts a new process
on the same storage. Every acknowledged turn must then be in its conversation, ``completed`` or
``interrupted`` with the user's message; a client resuming its event stream must get its end
(``turn.failed {code: interrupted}`` or ``turn.completed``); and the next turn of each conversation whose turn
was interrupted must run normally, after it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
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
ROUND_S = 0.15
SCRIPT = {
    "repeat": True,
    "responses": [
        {"delay_s": ROUND_S, "text": f"<channel:action>{json.dumps(CALL)}</channel:action>"},
        {"delay_s": ROUND_S, "text": ANSWER},
    ],
}
KILL_WITHIN_S = 0.8
"""The kill comes at a random moment this long after the last 202: the five turns of a trial, two at a time, take
about three turns' time (a turn is two model calls of ``ROUND_S``), so some are done, some running, some queued."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Host:
    url: str
    process: subprocess.Popen[bytes]


@dataclass(frozen=True)
class Acknowledged:
    conversation: str
    turn_id: str
    message: str


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


def sse(text: str) -> list[tuple[str, dict[str, object]]]:
    """(event, data) of every frame of an SSE body."""
    frames = []
    for frame in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in frame.splitlines() if not line.startswith(":"))
        if "event" in fields:
            frames.append((fields["event"], json.loads(fields["data"])))
    return frames


def descriptors(root: Path) -> None:
    folder = root / "descriptors"
    folder.mkdir(parents=True)
    (root / "script.yaml").write_text(yaml.safe_dump(SCRIPT))
    model = {"provider": "scripted", "model": str(root / "script.yaml")}
    platform = {"models": {"default": model}, "react": {"conversation_titles": False}}  # titles would take replies
    assembly = {"platform": platform, "tenants": {"default": {"projects": {"default": {}}}}}
    (folder / "assembly.yaml").write_text(yaml.safe_dump(assembly))
    (folder / "bundles.yaml").write_text(yaml.safe_dump({"bundles": {"hello": {"source": {"entry_point": "hello"}}}}))
    limits = {"default": {"requests_per_minute": 100000, "burst": 1000, "concurrent_turns": 100}}
    gateway = {"auth": {"mode": "none"}, "limits": limits, "backpressure": {"max_inflight_turns_per_worker": 2}}
    (folder / "gateway.yaml").write_text(yaml.safe_dump(gateway))


def stage_when_killed(database: Path, turn_id: str) -> str:
    """How far an interrupted turn had got, from its log: never begun (only the message), begun, or mid-turn."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        paths = [p for (p,) in connection.execute("SELECT path FROM turn_log WHERE turn_id=?", (turn_id,))]
        rounds = connection.execute(
            "SELECT COUNT(DISTINCT round) FROM turn_log"
            " WHERE turn_id=? AND round > 0 AND path NOT LIKE '%.turn.status'",
            (turn_id,),
        ).fetchone()[0]
    if not any(path.endswith(".turn.header") for path in paths):
        return "accepted, never begun"
    return "begun, no round done" if rounds == 0 else "mid-turn, rounds done"


@pytest.mark.fault  # forty seconds of real processes killed: the fault step of .ci/run runs it
def test_no_acknowledged_turn_vanishes_across_kill_9(tmp_path: Path) -> None:
    descriptors(tmp_path)
    chance = random.Random(20261124)
    acknowledged: list[Acknowledged] = []
    began = time.monotonic()
    for trial in range(TRIALS):
        host = start(tmp_path)
        with httpx.Client(base_url=host.url, timeout=30) as client:
            for n in range(TURNS_PER_TRIAL):
                conversation = client.post(f"{SCOPE}/conversations", json={"bundle": "hello"}).json()["id"]
                message = f"trial {trial} turn {n}"
                started = client.post(f"{SCOPE}/conversations/{conversation}/turns", json={"message": message})
                assert started.status_code == 202, started.text
                acknowledged.append(Acknowledged(conversation, started.json()["turn_id"], message))
                time.sleep(chance.uniform(0, 0.05))
        time.sleep(chance.uniform(0, KILL_WITHIN_S))
        os.kill(host.process.pid, signal.SIGKILL)
        host.process.wait()

    host = start(tmp_path)
    states: dict[str, str] = {}
    try:
        with httpx.Client(base_url=host.url, timeout=30) as client:
            for turn in acknowledged:
                detail = client.get(f"{SCOPE}/conversations/{turn.conversation}")
                assert detail.status_code == 200, detail.text
                turns = {t["turn_id"]: t for t in detail.json()["turns"]}
                assert turn.turn_id in turns, f"turn {turn.turn_id} ({turn.message}) was acknowledged but is gone"
                state = states[turn.turn_id] = turns[turn.turn_id]["state"]
                assert state in {"completed", "interrupted"}, state
                assert turns[turn.turn_id]["prompt"] == turn.message
                events = client.get(
                    f"{SCOPE}/conversations/{turn.conversation}/turns/{turn.turn_id}/events",
                    headers={"Last-Event-ID": f"{turn.turn_id}:3"},
                )
                assert events.status_code == 200, events.text
                (kind, data), *_ = sse(events.text)
                if state == "interrupted":
                    assert (kind, data["code"]) == ("turn.failed", "interrupted")
                else:
                    assert (kind, data["outcome"]) == ("turn.completed", "completed")

            def next_turn(turn: Acknowledged) -> None:
                url = f"{SCOPE}/conversations/{turn.conversation}/turns"
                answered = client.post(url, json={"message": "again"}, headers={"Accept": "text/event-stream"})
                assert sse(answered.text)[-1][0] == "turn.completed", answered.text[-500:]
                detail = client.get(f"{SCOPE}/conversations/{turn.conversation}").json()
                assert [(t["state"], t["prompt"]) for t in detail["turns"]] == [
                    ("interrupted", turn.message),
                    ("completed", "again"),
                ]

            interrupted = [turn for turn in acknowledged if states[turn.turn_id] == "interrupted"]
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(next_turn, interrupted))
    finally:
        host.process.terminate()
        host.process.wait(20)
    stages = Counter(stage_when_killed(tmp_path / "var" / "berth.sqlite3", turn.turn_id) for turn in interrupted)
    print(
        f"\n{len(acknowledged)} acknowledged turns over {TRIALS} kills in {time.monotonic() - began:.1f} s: "
        f"{len(acknowledged) - len(interrupted)} completed, {len(interrupted)} interrupted ({dict(stages)})"
    )
    assert len(acknowledged) >= 50
    assert interrupted and len(interrupted) < len(acknowledged), "the kills caught turns in flight, and not all"
    assert stages["accepted, never begun"] > 0, "a queued turn was caught: stored before its 202 all the same"
