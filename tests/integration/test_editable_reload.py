"""A bundle author's loop, as the scaffold's README tells it: ``berth bundles new``, ``pip install -e``,
``berth run --demo --reload``, edit ``tools.py`` and save — the running host reloads the bundle."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from pip_tools import overlay_venv, pip

pytestmark = pytest.mark.usefixtures("clean_berth_env")

BERTH = str(Path(sys.executable).parent / "berth")
SCOPE = "/v1/default/default"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def venv_bin(tmp_path: Path) -> Path:
    """The ``bin`` folder of a venv of the test's own over this one (``pip_tools.overlay_venv``): what the test
    installs there, other tests (and the project's venv) never see."""
    return overlay_venv(tmp_path / "venv")


@pytest.fixture
def tidewatch(tmp_path: Path, venv_bin: Path) -> Path:
    """``berth bundles new tidewatch`` then ``pip install -e tidewatch`` into the test's venv."""
    made = subprocess.run(
        [BERTH, "bundles", "new", "tidewatch", "--dir", str(tmp_path)], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    pip("install", "--no-deps", "--no-build-isolation", "-e", str(tmp_path / "tidewatch"), python=venv_bin / "python")
    return tmp_path / "tidewatch"


def generation(client: httpx.Client) -> dict[str, Any]:
    rows = client.get("/v1/admin/bundles").json()["bundles"]
    return next(row for row in rows if row["id"] == "tidewatch")


def answer(client: httpx.Client, message: str) -> str:
    conversation = client.post(f"{SCOPE}/conversations", json={"bundle": "tidewatch"}).json()["id"]
    with client.stream(
        "POST",
        f"{SCOPE}/conversations/{conversation}/turns",
        json={"message": message, "bundle": "tidewatch"},
        headers={"Accept": "text/event-stream"},
    ) as stream:
        return "".join(stream.iter_text())


@contextmanager
def berth_run_demo_reload(
    venv_bin: Path, workdir: Path, log_path: Path, *options: str, ready: str = "/readyz"
) -> Iterator[httpx.Client]:
    """``berth run --demo --reload`` of the venv in ``venv_bin`` in ``workdir`` on a free port; a client once
    ``ready`` answers 200."""
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [venv_bin / "berth", "run", "--demo", "--reload", "--port", str(port), *options],
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                deadline = time.monotonic() + 60
                while True:
                    assert process.poll() is None, log_path.read_text()[-3000:]
                    try:
                        if client.get(ready).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    assert time.monotonic() < deadline, "berth run did not get ready"
                    time.sleep(0.1)
                yield client
        finally:
            process.terminate()
            process.wait(20)


def edit_until_generation(client: httpx.Client, number: int, edit: Callable[[], object]) -> dict[str, Any]:
    """Make ``edit`` (again every second: a watcher may start scanning after the first) until tidewatch
    serves generation ``number``; return its row."""
    deadline = time.monotonic() + 30
    while True:
        edit()
        for _ in range(10):
            row = next((r for r in client.get("/v1/admin/bundles").json()["bundles"] if r["id"] == "tidewatch"), {})
            if (row.get("generation") or 0) >= number:
                return row
            time.sleep(0.1)
        assert time.monotonic() < deadline, f"tidewatch never served generation {number}: {row}"


def test_saving_tools_py_reloads_an_editable_bundle(tidewatch: Path, venv_bin: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "empty"  # no descriptors: the embedded defaults serve every installed bundle
    workdir.mkdir()
    with berth_run_demo_reload(venv_bin, workdir, tmp_path / "berth.log") as client:
        assert generation(client)["generation"] == 1
        assert "`tidewatch.echo` answered: tides at dawn" in answer(client, "tides at dawn")

        tools = tidewatch / "tidewatch_bundle" / "tools.py"
        tools.write_text(tools.read_text().replace("    return text\n", "    return text.upper()\n"))
        deadline = time.monotonic() + 30
        while generation(client)["generation"] < 2:
            assert time.monotonic() < deadline, f"no reload: {generation(client)}"
            time.sleep(0.1)
        assert generation(client)["state"] == "loaded"
        assert "`tidewatch.echo` answered: TIDES AT DAWN" in answer(client, "tides at dawn")


def test_an_editable_bundle_enabled_while_the_host_runs_is_watched_too(
    tidewatch: Path, venv_bin: Path, tmp_path: Path
) -> None:
    descriptors = tmp_path / "descriptors"
    descriptors.mkdir()
    bundles_yaml = descriptors / "bundles.yaml"
    bundles_yaml.write_text("bundles: {}\n")
    enabled = yaml.safe_dump({"bundles": {"tidewatch": {"source": {"entry_point": "tidewatch"}}}})
    tools = tidewatch / "tidewatch_bundle" / "tools.py"
    edited = tools.read_text().replace("    return text\n", "    return text.upper()\n")
    # no bundle yet, so never "ready": the host is up once it is healthy
    serving = berth_run_demo_reload(
        venv_bin, descriptors, tmp_path / "berth.log", "--descriptors", str(descriptors), ready="/healthz"
    )
    with serving as client:
        assert edit_until_generation(client, 1, lambda: bundles_yaml.write_text(enabled))["state"] == "loaded"
        time.sleep(0.5)  # an edit before the watcher takes up the new folder is not seen: the loop repeats it
        assert edit_until_generation(client, 2, lambda: tools.write_text(edited))["state"] == "loaded"
        assert "`tidewatch.echo` answered: TIDES AT DAWN" in answer(client, "tides at dawn")
