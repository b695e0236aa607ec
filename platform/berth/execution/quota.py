"""A run's disk quota: ``work/`` and ``out/`` on one size-limited tmpfs of the profile's ``disk_mb``.

RLIMIT_FSIZE bounds each file a program writes, not how many it writes: without a quota a program can fill the
host's disk. So where this process may mount (root with CAP_SYS_ADMIN in the host's mount namespace), each run
folder gets a tmpfs of its own at ``disk/`` (``size=disk_mb``, a bounded number of inodes, ``nosuid,nodev``, mode
0700), and ``disk/work`` and ``disk/out`` are bound onto the folder's ``work/`` and ``out/``: one budget for both,
and the paths every backend binds stay the same (the docker backend binds the same host folders, so its containers
write to the same tmpfs). A write past the budget fails with ENOSPC; the host tells the run hit it by the
tmpfs being full at its end (:func:`disk_filled`) or ``No space left on device`` in its stderr.

Every mount under a run folder is detached when the folder is removed (:func:`unmount_run_folder`, called by
:func:`~berth.execution.reaping.remove_run_folder`), so the run's end and the exec sweep of a dead host's folders
both leave nothing mounted. Mount and unmount are direct system calls (no ``mount`` process per run).

Where mounting is not permitted (not root, or root without CAP_SYS_ADMIN, as in most containers), runs go on
without a quota: only RLIMIT_FSIZE bounds their writes (each file, not their number), and ``berth exec doctor``
says so (:func:`quota_finding`).

A tmpfs is memory: its pages are charged to the memory cgroup of the process that writes them (the run's cgroup or
container, so a run's files count against its ``memory_mb`` too), and never touch the host's disk.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from berth.execution.limits import MIB
from berth.execution.sandbox import DoctorFinding, RunFolder

log = logging.getLogger(__name__)

DISK_FOLDER: Final = "disk"
"""The run folder's quota mount point (the tmpfs ``work/`` and ``out/`` are bound from)."""
MOUNT_SOURCE: Final = "berth-exec"
"""The source name of every quota tmpfs (how ``/proc/self/mounts`` names it)."""
INODES_PER_MIB: Final = 128
"""Files (and folders) a run may make per MiB of quota: empty files cost kernel memory but no blocks."""
MIN_INODES: Final = 4096
PAGE: Final = os.sysconf("SC_PAGE_SIZE")

MS_NOSUID: Final = 0x2
MS_NODEV: Final = 0x4
MS_BIND: Final = 0x1000
MNT_DETACH: Final = 0x2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
_libc.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
_warned: set[str] = set()


def _mount(source: str, target: Path, fstype: str | None, flags: int, options: str | None) -> None:
    """mount(2); an ``OSError`` with the call's errno when it fails."""
    encoded = options.encode() if options is not None else None
    kind = fstype.encode() if fstype is not None else None
    if _libc.mount(source.encode(), os.fsencode(target), kind, flags, encoded) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number), str(target))


def _detach(target: str) -> None:
    """umount2(2) with MNT_DETACH: gone from the namespace at once, freed when nothing uses it any more."""
    if _libc.umount2(os.fsencode(target), MNT_DETACH) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number), target)


def mount_run_disk(folder: RunFolder, disk_mb: int, input_sizes: Iterable[int] = ()) -> bool:
    """Put ``folder``'s ``work/`` and ``out/`` (existing, empty) on a tmpfs of ``disk_mb`` MiB plus room for the
    inputs (of ``input_sizes`` bytes) the host is about to write there, so the program has ``disk_mb`` of its own;
    whether it was mounted (False: mounting is not permitted here, the folders stay as they are and a WARNING says
    so once)."""
    disk = folder.root / DISK_FOLDER
    disk.mkdir(mode=0o700)
    sizes = list(input_sizes)
    size = disk_mb * MIB + sum(-(-length // PAGE) * PAGE for length in sizes)  # each file takes whole pages
    inodes = max(MIN_INODES, disk_mb * INODES_PER_MIB) + 2 * len(sizes)  # a file and, at most, its folder
    options = f"size={size},nr_inodes={inodes},mode=0700"
    try:
        _mount(MOUNT_SOURCE, disk, "tmpfs", MS_NOSUID | MS_NODEV, options)
        for writable in (folder.work, folder.out):
            source = disk / writable.name
            source.mkdir(mode=0o755)
            _mount(str(source), writable, None, MS_BIND, None)
    except OSError as error:
        unmount_run_folder(folder.root)
        if error.errno not in (errno.EPERM, errno.EACCES):
            raise
        disk.rmdir()
        reason = f"{error.strerror} ({'not root' if os.geteuid() != 0 else 'no CAP_SYS_ADMIN'})"
        if reason not in _warned:
            _warned.add(reason)
            log.warning(
                "runs get no disk quota here: mounting a tmpfs failed: %s; only RLIMIT_FSIZE (file_size_mb) bounds "
                "what a run writes, each file but not their number",
                reason,
            )
        return False
    return True


def disk_filled(folder: RunFolder) -> bool:
    """Whether ``folder``'s quota tmpfs is full (no block or no inode left); False when it has none."""
    disk = folder.root / DISK_FOLDER
    if not os.path.ismount(disk):
        return False
    usage = os.statvfs(disk)
    return usage.f_bfree == 0 or usage.f_ffree == 0


def mounts_under(root: Path) -> list[str]:
    """The mount points at or under ``root`` in this process's mount namespace, the latest mounted first."""
    base = os.path.realpath(root)
    found: list[str] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines()
    except OSError:
        return found
    for line in lines:
        fields = line.split(" ")
        if len(fields) < 5:
            continue
        point = _unescape(fields[4])
        if point == base or point.startswith(base + "/"):
            found.append(point)
    return found[::-1]


def unmount_run_folder(root: Path) -> int:
    """Detach every mount at or under the run folder ``root`` (its quota tmpfs and the binds from it), the latest
    first; return how many. One that cannot be detached (not permitted) is left and logged."""
    detached = 0
    for point in mounts_under(root):
        try:
            _detach(point)
        except OSError as error:
            log.warning("could not unmount %s: %s", point, error.strerror)
            continue
        detached += 1
    return detached


def mounting_permitted() -> bool:
    """Whether this process can mount a quota tmpfs (tried on a scratch folder, then unmounted)."""
    with tempfile.TemporaryDirectory(prefix="berth-quota-probe-") as scratch:
        try:
            _mount(MOUNT_SOURCE, Path(scratch), "tmpfs", MS_NOSUID | MS_NODEV, "size=4096,mode=0700")
        except OSError:
            return False
        with contextlib.suppress(OSError):
            _detach(scratch)
        return True


def quota_finding() -> DoctorFinding:
    """``berth exec doctor``'s line on the runs' disk quota."""
    if mounting_permitted():
        return DoctorFinding(
            "disk quota (disk_mb: work/ and out/ together)", True, "a tmpfs per run, charged to the run's memory"
        )
    why = "not root" if os.geteuid() != 0 else "no CAP_SYS_ADMIN"
    return DoctorFinding(
        "disk quota (disk_mb: work/ and out/ together)",
        False,
        f"cannot mount a tmpfs ({why}): only file_size_mb bounds writes, each file but not their number",
    )


def _unescape(field: str) -> str:
    """A ``/proc/self/mountinfo`` path field decoded (space, tab, newline and backslash are octal escapes)."""
    if "\\" not in field:
        return field
    return field.encode().decode("unicode_escape").encode("latin-1").decode("utf-8", errors="surrogateescape")
