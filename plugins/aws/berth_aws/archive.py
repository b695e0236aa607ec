"""The zip snapshots a fargate run travels in: ``work/`` and the program to the task, ``out/`` and the output back.

Packing never follows a symbolic link and skips anything that is not a regular file (the folders were written by
model-written code: a link planted in ``out/`` must not make a root process archive what it points to).
Unpacking accepts only relative names under the expected top folders, writes regular files only and stops at
a size and count budget, so a hostile archive cannot write outside its destination or fill the disk.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

from berth.execution.runs import regular_file

CHUNK: Final = 1024 * 1024


class ArchiveError(Exception):
    """A snapshot that cannot be unpacked as asked: a bad name, or over its budget."""


@dataclass(frozen=True, slots=True)
class Budget:
    """How much one unpack may write."""

    max_bytes: int
    max_files: int


def pack(target: Path, folders: Mapping[str, Path]) -> int:
    """Write the regular files under each folder into the zip ``target`` as ``<top>/<relative path>``; return how
    many were packed. Links and special files are skipped, never followed."""
    count = 0
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for top, folder in folders.items():
            for relative, path in regular_files(folder):
                with regular_file(path) as source:
                    if source is None:
                        continue
                    with archive.open(f"{top}/{relative}", "w", force_zip64=True) as sink:
                        while chunk := source.read(CHUNK):
                            sink.write(chunk)
                count += 1
    return count


def regular_files(folder: Path) -> Iterable[tuple[str, str]]:
    """``(relative posix path, path)`` of the files under ``folder``, in order, not descending into links."""
    if not folder.is_dir() or folder.is_symlink():
        return
    for inner, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(inner, d)))
        for name in sorted(files):
            path = os.path.join(inner, name)
            yield PurePosixPath(os.path.relpath(path, folder)).as_posix(), path


def unpack(source: Path, destination: Path, tops: Mapping[str, Budget]) -> dict[str, int]:
    """Extract the zip ``source`` into ``destination``: only members under one of ``tops`` (each with its own
    budget; others are an error), as regular files. Returns the files written per top folder."""
    written = dict.fromkeys(tops, 0)
    sizes = dict.fromkeys(tops, 0)
    with zipfile.ZipFile(source) as archive:
        for member in archive.infolist():
            top, relative = checked_name(member.filename, tops)
            if member.is_dir():
                continue
            budget = tops[top]
            if written[top] >= budget.max_files:
                raise ArchiveError(f"'{top}/' holds more than {budget.max_files} files")
            target = destination / top / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as reader, open(target, "xb") as sink:
                while chunk := reader.read(CHUNK):
                    sizes[top] += len(chunk)
                    if sizes[top] > budget.max_bytes:
                        raise ArchiveError(f"'{top}/' holds more than {budget.max_bytes} bytes")
                    sink.write(chunk)
            written[top] += 1
    return written


def checked_name(name: str, tops: Iterable[str]) -> tuple[str, PurePosixPath]:
    """Split a member name into its top folder and the path under it, refusing absolute names, ``..``, empty
    parts and unknown top folders."""
    parts = (name[:-1] if name.endswith("/") else name).split("/")  # a folder member ends with "/"
    if "\\" in name or len(parts) < 2 or any(part in ("", ".", "..") for part in parts):
        raise ArchiveError(f"member '{name}' is not a relative path under a known folder")
    if parts[0] not in set(tops):
        raise ArchiveError(f"member '{name}' is outside {', '.join(sorted(tops))}")
    return parts[0], PurePosixPath(*parts[1:])
