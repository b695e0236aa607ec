"""The threads embedded storage works in: an executor of its own, never the event loop's default one.

The default executor (``asyncio.to_thread``) is everyone's: an ``exec.python`` run waits out its process there, a
document is extracted there, and before bundles' sync tools had threads of their own (:mod:`berth.tools.threads`),
five tool calls that never returned took all six of its threads (2 cores) and every tenant's storage with them:
``POST /conversations`` got no answer. Storage's work is short and bounded (one SQLite connection, used one call at
a time, and file reads and writes), so a few threads of its own are enough, and nobody else's waits can take them.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final, ParamSpec, TypeVar

__all__ = ["STORAGE_THREADS", "in_storage_thread", "storage_executor"]

STORAGE_THREADS: Final = 4
"""The executor's threads: the database serializes its work on one connection, so more would only queue there; the
rest serve a checkpoint (its own connection) and file reads and writes meanwhile."""

_T = TypeVar("_T")
_P = ParamSpec("_P")
_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


def storage_executor() -> ThreadPoolExecutor:
    """The process's storage executor (made on first use, shared by every embedded store of the process)."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(STORAGE_THREADS, thread_name_prefix="berth-storage")
        return _executor


async def in_storage_thread(function: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """Run ``function(*args, **kwargs)`` in a storage thread and await its result (``asyncio.to_thread`` for
    storage: the caller's context variables go along)."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, function, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(storage_executor(), call)
