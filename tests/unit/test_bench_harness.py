"""The bench harness itself (``bench/_loadgen.py``, ``_servers.py``, ``_fsyncs.py``, ``_machine.py``): a harness that
fails on a slow machine or leaks a server flatters one side, so each piece is checked against real processes.
"""

from __future__ import annotations

import asyncio
import os
import platform
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.append(str(BENCH))  # after everything else: a bench module never shadows a package

from _fsyncs import FsyncCounter  # noqa: E402
from _loadgen import Connection  # noqa: E402
from _machine import header  # noqa: E402
from _servers import ServerDidNotStart, free_port, launch, stop  # noqa: E402

KEEP_ALIVE_S = 1
SHORT_KEEP_ALIVE_APP = textwrap.dedent(
    """
    import sys
    import uvicorn

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error", timeout_keep_alive=int(sys.argv[2]))
    """
)


@pytest.fixture
def short_keep_alive_server(tmp_path: Path) -> Iterator[int]:
    """A real uvicorn server that closes a keep-alive connection after 1 s idle; yields its port."""
    (tmp_path / "app.py").write_text(SHORT_KEEP_ALIVE_APP)
    port = free_port()
    process = launch(
        [sys.executable, str(tmp_path / "app.py"), str(port), str(KEEP_ALIVE_S)], f"http://127.0.0.1:{port}/"
    )
    try:
        yield port
    finally:
        stop(process)


async def test_the_load_generator_reopens_a_connection_the_server_closed_while_idle(
    short_keep_alive_server: int,
) -> None:
    connections = [Connection("127.0.0.1", short_keep_alive_server) for _ in range(5)]
    for connection in connections:
        await connection.open()
        assert await connection.body(await connection.request("POST", "/setup", {"n": 1})) == b"ok"
    for connection in connections:
        # The idle gap: wait until the server has closed the connection (its end of stream), longer than its timeout.
        assert connection._reader is not None
        assert await asyncio.wait_for(connection._reader.read(), timeout=60) == b""
    bodies = [await connection.body(await connection.request("POST", "/turn", {"n": 2})) for connection in connections]
    assert bodies == [b"ok"] * 5
    assert [connection.reconnects for connection in connections] == [1] * 5
    # The fresh connection is kept: the next request goes on it without reconnecting.
    assert await connections[0].body(await connections[0].request("GET", "/again")) == b"ok"
    assert connections[0].reconnects == 1
    for connection in connections:
        await connection.close()


def gone(pid: int) -> bool:
    """The process has exited (no ``/proc`` entry, or a zombie nobody reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_a_server_that_never_becomes_ready_is_killed_with_its_children_and_reported(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    never_ready = ["sh", "-c", f"sleep 600 & echo $! > {pid_file}; echo $$ > {pid_file}.leader; wait"]
    nobody = free_port()
    with pytest.raises(ServerDidNotStart, match=rf"did not answer http://127.0.0.1:{nobody}/ready in 5 s; killed"):
        launch(never_ready, f"http://127.0.0.1:{nobody}/ready", timeout_s=5)
    child, leader = int(pid_file.read_text()), int((tmp_path / "child.pid.leader").read_text())
    deadline = time.monotonic() + 30
    while not (gone(child) and gone(leader)) and time.monotonic() < deadline:
        time.sleep(0.05)  # a killed process is removed asynchronously; waiting for it, not timing it
    assert gone(leader), "the server process outlived its failed start"
    assert gone(child), "a process the server started outlived its failed start"


def test_a_server_that_exits_at_start_is_reported() -> None:
    with pytest.raises(ServerDidNotStart, match="exited with 3"):
        launch([sys.executable, "-c", "raise SystemExit(3)"], f"http://127.0.0.1:{free_port()}/ready")


SYNCER = textwrap.dedent(
    """
    import os, sys
    with open(sys.argv[1], "w") as file:
        for line in sys.stdin:
            for _ in range(int(line)):
                file.write("x"); file.flush(); os.fdatasync(file.fileno())
            os.fsync(file.fileno())
            print("done", flush=True)
    """
)


def test_the_fsync_counter_counts_exactly_the_calls_in_its_window(tmp_path: Path) -> None:
    syncer = subprocess.Popen(
        [sys.executable, "-c", SYNCER, str(tmp_path / "data")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert syncer.stdin is not None and syncer.stdout is not None

    def syncs(count: int) -> None:
        syncer.stdin.write(f"{count}\n")  # type: ignore[union-attr]
        syncer.stdin.flush()  # type: ignore[union-attr]
        assert syncer.stdout.readline() == "done\n"  # type: ignore[union-attr]

    try:
        syncs(4)  # before the window: not counted
        counter = FsyncCounter(syncer.pid)
        counter.start()
        syncs(6)  # 6 fdatasync + 1 fsync
        counted = counter.stop()
        syncs(3)  # after it
    finally:
        syncer.stdin.close()
        syncer.wait(30)
    if counted is None:
        pytest.skip(f"no fsync counting on this machine: {counter.why_not}")
    assert counted == 7


def test_the_header_names_the_machine_python_and_calibration() -> None:
    text = header()
    assert f"{os.cpu_count()} cores" in text
    assert f"python: {platform.python_implementation()} {platform.python_version()}" in text
    assert "calibration: 10M-addition loop" in text
