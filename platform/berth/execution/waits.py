"""Awaiting a run's end without holding a thread of a shared pool.

The event loop's default executor (``asyncio.to_thread``) has ``os.cpu_count() + 4`` threads, shared by the whole
host process. A run that waited out its process or its container in one of them held that thread for its whole
life: with that many runs in flight (six on two cores) the next run could not start, and anything else the host
runs there waited behind them (measured: eight concurrent ``exec.python`` turns on docker, seven ended by their
120 s timeout, where one alone takes 1.9 s). So what lasts as long as a run is awaited here instead:

* a local process's end through a pidfd (``os.pidfd_open``, Linux 5.3+): the event loop watches it (``add_reader``,
  uvicorn's uvloop too) and the process is reaped once it is readable; no thread at all;
* any other long blocking call (the Docker SDK's output stream of a container, its wait) in a thread of its own,
  started for that call and ended with it (:func:`in_own_thread`), never from a pool.

Short blocking steps (preparing the run's folder, starting a process, creating a container) still take a pool's
thread for the moment they last.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import subprocess
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["in_own_thread", "process_exit"]

Result = TypeVar("Result")


def in_own_thread(function: Callable[..., Result], *args: Any, name: str = "berth exec wait") -> asyncio.Future[Result]:
    """Call ``function(*args)`` in a daemon thread started for it (from no pool); its result, to await.

    The thread starts at once. Cancelling the future does not stop a call already running (Python cannot stop a
    thread): the caller ends the call's cause instead (kills the process or the container), and the thread ends.
    """
    outcome: concurrent.futures.Future[Result] = concurrent.futures.Future()

    def call() -> None:
        if not outcome.set_running_or_notify_cancel():
            return
        try:
            outcome.set_result(function(*args))
        except BaseException as error:  # handed to the awaiting task, which decides
            outcome.set_exception(error)

    waiting = asyncio.wrap_future(outcome)
    threading.Thread(target=call, name=name, daemon=True).start()
    return waiting


async def process_exit(process: subprocess.Popen[bytes]) -> int:
    """``process``'s return code once it has ended, awaited by the event loop on a pidfd (where the kernel has
    none, in a thread of its own). Cancelling stops the wait, not the process."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # no pidfd_open here (an old kernel, not Linux), or it was already reaped
        return await in_own_thread(process.wait)
    try:
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        loop.add_reader(pidfd, _settle, ended)
        try:
            await ended
        finally:
            loop.remove_reader(pidfd)
    finally:
        os.close(pidfd)
    return process.wait()  # it has ended: waitpid returns at once


def _settle(ended: asyncio.Future[None]) -> None:
    if not ended.done():
        ended.set_result(None)
