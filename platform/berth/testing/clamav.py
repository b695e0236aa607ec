"""A ClamAV daemon of a test's own: ``clamd`` from Debian's ``clamav-daemon``, started in the foreground on a
Unix socket and a loopback TCP port, with a signature database that holds only the EICAR test file's hash (no
signature download is possible offline; ``md5:size:name`` in an ``.hdb`` file is a complete database).

    with ClamdServer(tmp_path) as clamd:
        clamd.unix_address   # "unix:///…/clamd.sock"
        clamd.tcp_address    # "tcp://127.0.0.1:<port>"
"""

from __future__ import annotations

import hashlib
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

__all__ = ["EICAR", "EICAR_SIGNATURE", "ClamdServer"]

EICAR = rb"X5O!P%@AP[4\PZX54(P^)7CC)7}$EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*"
"""The EICAR anti-virus test file: harmless, and detected by every scanner."""
EICAR_SIGNATURE = "Eicar-Test-Signature.UNOFFICIAL"
"""What clamd reports for it from a hash database (``.UNOFFICIAL``: not from ClamAV's own signature sets)."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ClamdServer:
    """``clamd`` in the foreground under ``root`` (a folder), until :meth:`stop`."""

    def __init__(self, root: Path, *, start_timeout_s: float = 60.0) -> None:
        self.root = root
        self.socket_path = root / "clamd.sock"
        self.port = _free_port()
        self.start_timeout_s = start_timeout_s
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def unix_address(self) -> str:
        """The ``unix://`` address for ``attachments.antivirus.clamd``."""
        return f"unix://{self.socket_path}"

    @property
    def tcp_address(self) -> str:
        """The ``tcp://`` address for ``attachments.antivirus.clamd``."""
        return f"tcp://127.0.0.1:{self.port}"

    def start(self) -> ClamdServer:
        """Write the database and the configuration, start clamd and wait until it answers ``PING``."""
        database = self.root / "db"
        database.mkdir(parents=True, exist_ok=True)
        digest = hashlib.md5(EICAR, usedforsecurity=False).hexdigest()
        (database / "eicar.hdb").write_text(f"{digest}:{len(EICAR)}:Eicar-Test-Signature\n")
        config = self.root / "clamd.conf"
        config.write_text(
            "\n".join(
                [
                    "Foreground yes",
                    f"DatabaseDirectory {database}",
                    f"LocalSocket {self.socket_path}",
                    "TCPAddr 127.0.0.1",
                    f"TCPSocket {self.port}",
                    f"LogFile {self.root / 'clamd.log'}",
                    "StreamMaxLength 64M",
                    "",
                ]
            )
        )
        clamd = shutil.which("clamd") or "/usr/sbin/clamd"
        self._process = subprocess.Popen(  # noqa: S603 - our own binary and configuration
            [clamd, "--config-file", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + self.start_timeout_s
        while not self._pong():
            if self._process.poll() is not None or time.monotonic() > deadline:
                log = (self.root / "clamd.log").read_text() if (self.root / "clamd.log").exists() else ""
                self.stop()
                raise RuntimeError(f"clamd did not start: {log[-2000:]}")
            time.sleep(0.05)
        return self

    def _pong(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX) as probe:
                probe.settimeout(1)
                probe.connect(str(self.socket_path))
                probe.sendall(b"zPING\0")
                return probe.recv(16).rstrip(b"\0") == b"PONG"
        except OSError:
            return False

    def stop(self) -> None:
        """Stop clamd (its socket and port stop answering)."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def __enter__(self) -> ClamdServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
