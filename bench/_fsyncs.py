"""Count a server process's ``fsync`` and ``fdatasync`` calls over a measured window.

A module the bench scripts import, not a script (hence the underscore).

How: ``perf stat`` on the kernel's syscall tracepoints (``syscalls:sys_enter_fsync``, ``…_fdatasync``) attached to
the server's pid (all its threads), started with its events disabled and switched on and off through its control
FIFOs (``--control``, acknowledged), so the count covers exactly the window and none of the set-up. The kernel
counts; the server is not stopped at its syscalls (``strace -c`` stops it at every one and would slow the arm it
measures). Counting needs perf and access to the tracepoints (root, or ``kernel.perf_event_paranoid`` ≤ -1 and a
readable tracefs); without them :meth:`FsyncCounter.stop` returns ``None`` and the bench prints ``n/a``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

__all__ = ["FsyncCounter"]

EVENTS = ("syscalls:sys_enter_fsync", "syscalls:sys_enter_fdatasync")


class FsyncCounter:
    """``perf stat`` on one process: :meth:`start` before the window, :meth:`stop` after it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.why_not: str | None = None
        """Why nothing is counted (no perf, no tracepoints), when so."""
        self._perf: subprocess.Popen[str] | None = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._control = -1
        self._ack = -1

    def start(self) -> None:
        """Attach perf with its events off, then switch them on; return once perf acknowledged."""
        perf = shutil.which("perf")
        if perf is None:
            self.why_not = "perf not found"
            return
        self._folder = tempfile.TemporaryDirectory(prefix="berth-fsyncs-")
        control, ack = Path(self._folder.name) / "control", Path(self._folder.name) / "ack"
        os.mkfifo(control)
        os.mkfifo(ack)
        command = [perf, "stat", "-x", ",", "--control", f"fifo:{control},{ack}", "-D", "-1"]
        command += ["-e", ",".join(EVENTS), "-p", str(self.pid)]
        self._perf = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # Opening a FIFO waits for its other end: perf opens both as it starts (or exits, and then we see it).
        self._control = os.open(control, os.O_WRONLY | os.O_NONBLOCK) if self._wait_for_reader(control) else -1
        if self._control < 0:
            self._give_up()
            return
        self._ack = os.open(ack, os.O_RDONLY)
        if not self._command(b"enable"):
            self._give_up()

    def stop(self) -> int | None:
        """Switch the events off and return the count of both calls over the window (``None``: not counted)."""
        if self._perf is None:
            return None
        self._command(b"disable")
        self._perf.send_signal(signal.SIGINT)
        _, errors = self._perf.communicate(timeout=30)
        self._close()
        counts = [line.split(",") for line in errors.splitlines() if any(event in line for event in EVENTS)]
        try:
            return sum(int(fields[0]) for fields in counts) if len(counts) == len(EVENTS) else self._failed(errors)
        except ValueError:  # "<not supported>", "<not counted>"
            return self._failed(errors)

    def _wait_for_reader(self, control: Path) -> bool:
        """Wait until perf opened its control FIFO (``ENXIO`` until then), or exited (False)."""
        assert self._perf is not None
        while self._perf.poll() is None:
            try:
                os.close(os.open(control, os.O_WRONLY | os.O_NONBLOCK))
                return True
            except OSError:
                os.sched_yield()
        return False

    def _command(self, word: bytes) -> bool:
        """Send a control word and wait for perf's ``ack``."""
        try:
            os.write(self._control, word + b"\n")
            return os.read(self._ack, 16).startswith(b"ack")
        except OSError:
            return False

    def _failed(self, errors: str) -> None:
        self.why_not = f"perf counted nothing: {errors.strip()[-200:]}"
        return None

    def _give_up(self) -> None:
        assert self._perf is not None
        if self._perf.poll() is None:
            self._perf.kill()
        _, errors = self._perf.communicate(timeout=30)
        self.why_not = f"perf could not attach: {errors.strip()[-200:]}"
        self._perf = None
        self._close()

    def _close(self) -> None:
        for descriptor in (self._control, self._ack):
            if descriptor >= 0:
                os.close(descriptor)
        self._control = self._ack = -1
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None
