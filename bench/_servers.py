"""Start a server process for a benchmark and always end it: its whole process group, even when it never got ready.

A module the bench scripts import, not a script (hence the underscore).

Every server starts in a session of its own (``start_new_session``), so what it spawns (``berth run``'s workers,
a shell's children) shares its process group; :func:`stop` signals the group, ``SIGTERM`` then ``SIGKILL``.
:func:`launch` polls the server's readiness URL until ``timeout_s``; a server that exits first or never answers is
killed (its group) before :class:`ServerDidNotStart` says so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence

import httpx

__all__ = ["ServerDidNotStart", "free_port", "launch", "stop"]


class ServerDidNotStart(SystemExit):
    """A server exited, or did not answer its readiness URL in time; it was killed (its process group)."""


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch(
    command: Sequence[str],
    ready_url: str,
    *,
    timeout_s: float = 60,
    env: Mapping[str, str] | None = None,
    stderr: int | None = subprocess.DEVNULL,
) -> subprocess.Popen[bytes]:
    """Start ``command`` in its own process group and wait until ``ready_url`` answers below 500.

    Raises :class:`ServerDidNotStart` (after killing the group) when it exits or does not answer in ``timeout_s``.
    """
    environment = None if env is None else dict(env)
    process = subprocess.Popen(
        list(command), env=environment, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True
    )
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ServerDidNotStart(f"server {command[0]} exited with {process.returncode} before {ready_url}")
            try:
                if httpx.get(ready_url, timeout=1).status_code < 500:
                    return process
            except httpx.HTTPError:
                pass
            time.sleep(0.1)  # polling a starting server, not timing anything
        raise ServerDidNotStart(
            f"server {command[0]} did not answer {ready_url} in {timeout_s:g} s; killed (process group {process.pid})"
        )
    except BaseException:
        stop(process)
        raise


def stop(process: subprocess.Popen[bytes], grace_s: float = 20) -> None:
    """End ``process`` and its process group: ``SIGTERM``, then ``SIGKILL`` after ``grace_s``; reap it."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 30.0)):
        with contextlib.suppress(ProcessLookupError):  # the group is gone already
            os.killpg(process.pid, sig)
        try:
            process.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:  # the leader ended: make sure nothing it left in the group outlives it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        return
