"""Redis servers that tests start themselves, so a test never empties a database it did not create.

* :class:`RedisServer` — a ``redis-server`` on a free loopback port that a test can stop, kill and restart, with or
  without an append-only file (to lose its data on a restart, or keep it).
* :func:`test_redis_url` — the URL of this test process's own Redis, started on first use and stopped when the
  process exits. Every pytest process (each ``xdist`` worker, each developer's run) gets its own, so parallel runs
  never share (or flush) one another's keys, and the machine's Redis on port 6379 is never written.
"""

from __future__ import annotations

import atexit
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["RedisServer", "free_port", "test_redis_url"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A ``redis-server`` of a test's own on 127.0.0.1.

    :param appendonly: keep an append-only file in ``data_dir`` (fsync every second), so a restart keeps the
        data; without it a restart loses everything, as the machine's Redis does.
    """

    def __init__(self, *, port: int | None = None, appendonly: bool = False, data_dir: Path | None = None) -> None:
        self.port = port or free_port()
        self.appendonly = appendonly
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="berth-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> None:
        """Start the server and wait until it answers ``PING``."""
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        persistence = ["--appendonly", "no"]
        if self.appendonly:
            persistence = ["--appendonly", "yes", "--appendfsync", "everysec"]
        self.process = subprocess.Popen(  # noqa: S603 - the machine's redis-server, our own arguments
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--dir",
                str(self.data_dir),
                *persistence,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server on port {self.port} exited with {self.process.returncode}")
            if self.ping():
                return
            time.sleep(0.01)
        raise RuntimeError(f"redis-server on port {self.port} did not answer within {timeout_s} s")

    def ping(self) -> bool:
        """Whether the server answers ``PING`` now."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """``kill -9`` the server (what it did not write to its append-only file is lost)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def wipe(self) -> None:
        """Delete what the server keeps on disk (call while it is stopped)."""
        for path in self.data_dir.iterdir():
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()

    def restart(self, *, lose_data: bool = False) -> None:
        """Kill the server and start it again on the same port; ``lose_data`` deletes its files in between."""
        self.kill()
        if lose_data:
            self.wipe()
        self.start()

    def stop(self) -> None:
        """Stop the server and delete its files."""
        self.kill()
        shutil.rmtree(self.data_dir, ignore_errors=True)


_own: list[RedisServer] = []


def test_redis_url() -> str:
    """The URL of this process's own test Redis (started on first use, stopped at exit)."""
    if not _own:
        server = RedisServer()
        server.start()
        atexit.register(server.stop)
        _own.append(server)
    return _own[0].url


test_redis_url.__test__ = False  # type: ignore[attr-defined]  # not a test, whatever its name says
