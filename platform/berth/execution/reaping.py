"""Run folders a dead host left behind, found and removed.

A host that dies mid-run (SIGKILL, OOM killer, power) never reaches the ``finally`` that removes its run's
folder. So each run's host holds an exclusive ``flock`` on the folder's :data:`OWNER_LOCK` for the run's lifetime
(:func:`claim_run_folder`); the kernel drops it when the process dies. :func:`reap_stale_run_folders` (at the
host's start and in its periodic exec sweep) removes every folder under the runs root whose lock it can take, and
folders with no lock file at all once they are older than a grace period (a folder being made has none for a
moment; older Berth versions made none). A live run's folder is never touched, whichever process runs it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from berth.execution.quota import unmount_run_folder

log = logging.getLogger(__name__)

OWNER_LOCK: Final = "owner.lock"
UNLOCKED_GRACE_S: Final = 600.0
"""A run folder without an owner lock is left alone this long (it may be being made)."""


def claim_run_folder(root: Path) -> int:
    """Lock ``root``'s owner lock for this process and return the descriptor (closing it releases the folder).

    The lock file is made and locked under a temporary name, then renamed into place, so a sweep never sees an
    owner lock that is not yet held."""
    temporary = root / f".{OWNER_LOCK}.{os.getpid()}"
    descriptor = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        os.rename(temporary, root / OWNER_LOCK)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def remove_run_folder(root: Path) -> None:
    """Delete a run's folder, read-only folders (a turn's attachments) included, whoever runs the host: its mounts
    (the quota tmpfs of ``work/`` and ``out/``) are detached first; then an entry that cannot be removed has its
    folder made writable, then is removed (nothing is walked twice)."""
    unmount_run_folder(root)

    def writable_and_again(function: Callable[[str], object], path: str, _error: object) -> None:
        try:
            os.chmod(os.path.dirname(path), 0o700)
            function(path)
        except OSError:
            pass  # left behind, as rmtree(ignore_errors=True) would

    shutil.rmtree(root, onerror=writable_and_again)


def run_folder_is_stale(folder: Path, *, now: float | None = None, grace_s: float = UNLOCKED_GRACE_S) -> bool:
    """Whether ``folder``'s run has no live owner: its owner lock can be taken, or it has none and is older than
    ``grace_s``."""
    try:
        descriptor = os.open(folder / OWNER_LOCK, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        try:
            age = (time.time() if now is None else now) - folder.stat().st_mtime
        except OSError:
            return False
        return age > grace_s
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(descriptor)
    return True


def reap_stale_run_folders(root: Path, *, grace_s: float = UNLOCKED_GRACE_S) -> list[Path]:
    """Remove the run folders under ``root`` whose owner is gone; return them."""
    reaped: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return reaped
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        folder = Path(entry.path)
        if run_folder_is_stale(folder, grace_s=grace_s):
            remove_run_folder(folder)
            if not folder.exists():
                reaped.append(folder)
    if reaped:
        log.warning("removed %d run folder(s) under %s left by a host that stopped mid-run", len(reaped), root)
    return reaped
