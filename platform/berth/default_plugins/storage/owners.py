"""Which processes hold an embedded storage root: one locked file per open store, released when its process dies.

A turn row names the store instance that accepted or began it (its *owner* token). Whether that owner is
still alive decides what a turn left ``accepted`` or ``running`` is: its owner's, still under way, or
``interrupted`` because the process that ran it is gone.

Each open store holds an exclusive ``flock`` on ``owners/<token>.lock`` under the root. The kernel drops
the lock when the process exits however it exits (``kill -9``, OOM, a crash of Python), so a lock that can
be taken is an owner that is gone: no heartbeat to renew, no lease to wait out, no process id that could
be reused. That holds for every process of the host, because SQLite in WAL mode works only between
processes of one host (they share the WAL index in memory), and so does ``flock``. (A distributed store,
shared by workers on several hosts, needs a lease its workers renew instead, as the Redis admission
counters keep theirs.)

A lock file appears under its final name already locked (it is locked under a temporary name, then
renamed), so a store opening meanwhile never mistakes a starting owner for a dead one.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Final

__all__ = ["OWNERS_FOLDER", "RootOwners"]

OWNERS_FOLDER: Final = "owners"
"""The folder under the storage root that holds the owners' lock files."""

_SUFFIX: Final = ".lock"
_CLAIMING: Final = ".claiming-"
_STRAY_CLAIM_AGE_S: Final = 60.0
"""A temporary claim file older than this, and unlocked, was left by a process that died while claiming."""


class RootOwners:
    """This store instance's claim on a storage root, and what it can tell of the others' (see the module).

    :param root: the storage root; the lock files go to ``root/owners/``.
    """

    def __init__(self, root: Path) -> None:
        self.folder = root / OWNERS_FOLDER
        self.token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        """This instance's owner token (the process id first, for whoever reads the folder)."""
        self._descriptor: int | None = None
        self._dead: set[str] = set()  # an owner found gone stays gone: its token is never used again
        self._lock = threading.Lock()

    def claim(self) -> None:
        """Lock this instance's file (created locked under a temporary name, then renamed into place)."""
        with self._lock:
            if self._descriptor is not None:
                return
            self.folder.mkdir(parents=True, exist_ok=True)
            claiming = self.folder / f"{_CLAIMING}{self.token}"
            descriptor = os.open(claiming, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.replace(claiming, self.folder / f"{self.token}{_SUFFIX}")
            except BaseException:
                os.close(descriptor)
                claiming.unlink(missing_ok=True)
                raise
            self._descriptor = descriptor

    def release(self) -> None:
        """Delete this instance's file and drop its lock: from now on its unfinished turns count as interrupted."""
        with self._lock:
            if self._descriptor is None:
                return
            (self.folder / f"{self.token}{_SUFFIX}").unlink(missing_ok=True)
            os.close(self._descriptor)  # closing the last descriptor drops the lock
            self._descriptor = None

    def is_alive(self, token: str | None) -> bool:
        """Whether the store instance ``token`` still holds the root (``None``: a row of an earlier release,
        which ran one process per root, so whoever wrote it is gone)."""
        if token is None or token in self._dead:
            return False
        if token == self.token:
            return True
        alive = _locked_by_someone(self.folder / f"{token}{_SUFFIX}")
        if not alive:
            self._dead.add(token)
        return alive

    def sweep(self) -> tuple[str, ...]:
        """Delete the files of owners that are gone; return their tokens.

        Call it after their unfinished turns are recorded as interrupted: a token without a file counts as
        gone all the same, so the order matters only for what a reader of the folder sees.
        """
        if not self.folder.is_dir():
            return ()
        gone: list[str] = []
        for path in self.folder.iterdir():
            name = path.name
            if name.endswith(_SUFFIX):
                token = name[: -len(_SUFFIX)]
                if token != self.token and not self.is_alive(token):
                    path.unlink(missing_ok=True)
                    gone.append(token)
            elif name.startswith(_CLAIMING) and _stray_claim(path):
                path.unlink(missing_ok=True)  # a process that died between creating its file and renaming it
        return tuple(gone)


def _stray_claim(path: Path) -> bool:
    """Whether a temporary claim file was left by a dead process (old enough that no claim is under way)."""
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return False
    return age > _STRAY_CLAIM_AGE_S and not _locked_by_someone(path)


def _locked_by_someone(path: Path) -> bool:
    """Whether another open file description holds the lock of ``path`` (a missing file: nobody)."""
    try:
        descriptor = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)  # also drops the lock if this call took it
    return False
