"""Executor uids leased machine-wide: no two runs on one machine ever share a uid, whichever process runs them.

RLIMIT_NPROC counts every process of a uid, so a run sharing its uid with another run could be throttled by that
run's fork bomb (or throttle it). Every host process on a machine (API processes, workers, ``berth exec run``)
draws its executor uids from the same range, so the lease is kept by the kernel, not in memory: a folder of lock
files (``exec.uid_lock_dir``, default :data:`DEFAULT_LOCK_DIR`), one per uid, ``uid-<n>``. A run holds an
exclusive ``flock`` on its uid's file for its lifetime; a process that dies (even by SIGKILL) drops its locks
with it, so a crashed host never leaks uids.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

DEFAULT_LOCK_DIR: Final = Path("/run/berth-exec-uids")
FIRST_UID: Final = 61000
UID_COUNT: Final = 64
WAIT_STEP_S: Final = 0.05
"""How often a run waiting for a free uid (all of the range in use, machine-wide) tries again."""


@dataclass
class UidLease:
    """Leases executor uids from ``first`` … ``first + count - 1``, exclusive across all processes of the
    machine that use the same ``lock_dir``."""

    lock_dir: Path = DEFAULT_LOCK_DIR
    first: int = FIRST_UID
    count: int = UID_COUNT
    _held: dict[int, int] = field(default_factory=dict, repr=False)
    _next: int = field(default=0, repr=False)

    async def acquire(self) -> int:
        """A uid no other run on this machine holds (waits while the whole range is in use)."""
        while True:
            uid = await asyncio.to_thread(self.try_acquire)
            if uid is not None:
                return uid
            await asyncio.sleep(WAIT_STEP_S)

    def try_acquire(self) -> int | None:
        """Lock a free uid's file and return the uid, or None when every uid of the range is held."""
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for step in range(self.count):
            uid = self.first + (self._next + step) % self.count
            if uid in self._held:
                continue
            descriptor = os.open(self.lock_dir / f"uid-{uid}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                continue
            self._held[uid] = descriptor
            self._next = (uid - self.first + 1) % self.count  # spread runs over the range
            return uid
        return None

    def release(self, uid: int) -> None:
        """Give ``uid`` back (its lock file stays, unlocked)."""
        descriptor = self._held.pop(uid, None)
        if descriptor is not None:
            with contextlib.suppress(OSError):
                os.close(descriptor)  # closing the only descriptor drops the flock
