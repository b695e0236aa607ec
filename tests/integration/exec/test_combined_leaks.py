"""What a docker ``combined`` run lets out of the host, and into the program's view: no platform secret its bundle
did not declare (not in the container's environment, not anywhere the program can read), and no line of the
supervisor's log in the program's stderr (a real Docker engine; ``docker`` marker)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from berth_docker.backend import DockerBackend
from berth_docker.engine import CONTAINER_LABEL, client_for

from berth.config import Configuration
from berth.execution.limits import ExecLimits
from berth.execution.payload import supervisor_scope_of
from berth.execution.reaping import remove_run_folder
from berth.execution.runs import ExecService

pytestmark = [pytest.mark.docker, pytest.mark.sandbox, pytest.mark.usefixtures("clean_berth_env")]

MODEL_KEY = "sk-ant-platform-key-9999"
LIMITS = ExecLimits(timeout_s=60, memory_mb=512, cpu_s=30, processes=32)

SNOOP = textwrap.dedent(
    """
    import json, os, time
    from berth_exec import tools
    from berth_exec.tools import SupervisorClient, ToolCallError

    go = os.path.join(os.environ["WORKDIR"], "go")
    while not os.path.exists(go):  # the test inspects the running container first
        time.sleep(0.05)
    texts = {"environ": json.dumps(dict(os.environ))}
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        for part in ("environ", "cmdline"):
            try:
                texts[f"/proc/{pid}/{part}"] = open(f"/proc/{pid}/{part}", "rb").read().decode(errors="replace")
            except OSError as error:
                texts[f"/proc/{pid}/{part}"] = type(error).__name__
    for top in ("/", "/proc/1/root"):
        for folder, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if os.path.join(folder, d) not in ("/proc", "/sys", "/usr", "/dev")]
            for name in files:
                try:
                    with open(os.path.join(folder, name), "rb") as file:
                        texts[os.path.join(folder, name)] = file.read(1 << 20).decode(errors="replace")
                except OSError:
                    pass
    try:
        SupervisorClient(os.environ["SUPERVISOR_SOCKET_PATH"], "forged").request(
            {"op": "call", "tool_id": "hello.greet", "params": {}})
    except ToolCallError as error:
        refused = error.code
    print("the program's own line", file=__import__("sys").stderr)
    with open(os.path.join(os.environ["OUTPUT_DIR"], "seen.json"), "w") as seen:
        json.dump(texts, seen)
    print(json.dumps({"greeting": tools.call("hello.greet", name="Ann"), "refused": refused}))
    """
)


def decoded(values: list[str]) -> str:
    """``values`` and, where one is base64, what it decodes to (the descriptors travel base64-encoded)."""
    parts = list(values)
    for value in values:
        for candidate in (value, value.partition("=")[2]):
            with contextlib.suppress(binascii.Error, ValueError):
                parts.append(base64.b64decode(candidate, validate=True).decode(errors="replace"))
    return "\n".join(parts)


async def watch_container(exec_id: str) -> dict[str, Any]:
    """The run's container as the engine shows it (``docker inspect``), once it is created."""
    client = client_for(None)
    events = client.events(filters={"label": f"{CONTAINER_LABEL}={exec_id}", "event": "start"}, decode=True)
    try:
        started = await asyncio.to_thread(lambda: next(iter(events)))
    finally:
        events.close()
    return dict(client.api.inspect_container(started["id"]))


async def test_no_platform_secret_reaches_a_combined_run_whose_bundle_did_not_declare_it(
    example_descriptors: Path, exec_image: str, combined_supervisor: dict[str, Any], tmp_path: Path
) -> None:
    (example_descriptors / "secrets.yaml").write_text(f"anthropic_api_key: 'literal:{MODEL_KEY}'\n")
    scope = supervisor_scope_of(Configuration.load(example_descriptors), "acme", "support")
    service = ExecService(root=tmp_path / "runs", keep_folders=True)
    backend = DockerBackend(image=exec_image, strategy="combined", **combined_supervisor)
    exec_id = f"ex_leaks{os.getpid()}"
    watching = asyncio.ensure_future(watch_container(exec_id))
    running = asyncio.ensure_future(
        service.run(SNOOP, backend=backend, limits=LIMITS, bundle_id="hello", exec_id=exec_id, supervisor_scope=scope)
    )
    container = await asyncio.wait_for(watching, 120)
    config = container["Config"]
    engine_view = decoded([*(config.get("Env") or []), *(config.get("Cmd") or [])])
    (service.root / exec_id / "work" / "go").write_text("")
    try:
        result = await asyncio.wait_for(running, 120)
        log = service.root / exec_id / "logs" / "supervisor.log"
        supervisor_log = log.read_text() if log.exists() else ""
    finally:
        remove_run_folder(service.root / exec_id)  # kept to read the supervisor's log: its quota mounts go too

    assert MODEL_KEY not in engine_view  # `docker inspect` of the running container
    envelope = result.envelope
    assert envelope.ok, envelope.report_text
    assert json.loads(envelope.user_out_tail) == {"greeting": "Hello, Ann!", "refused": "unauthorized"}
    texts = json.loads(next(output.data for output in result.outputs if output.relative == "seen.json"))
    assert {"environ", "/proc/1/environ", "/workspace/program/main.py"} <= set(texts)  # it did look
    assert MODEL_KEY not in decoded(list(texts.values()))
    assert envelope.runtime_err_tail == "the program's own line\n"
    assert "exec supervisor" in supervisor_log and "token" in supervisor_log  # the refusal is logged, apart
