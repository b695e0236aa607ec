"""A version's vectors as files beside the SQLite index, opened memory-mapped.

One pair of ``.npy`` files per written version, in ``<space>.vectors/`` beside ``<space>.sqlite3``:
``<stamp>.ids.npy`` (the chunk ids, int64, ascending) and ``<stamp>.npy`` (one unit row of float32 per id). The
stamp (``v<version>-<random>``) is committed in the database's ``meta`` (key :data:`META_KEY`) by the same
transaction as the version whose vectors they are, after both files are written, flushed and renamed into
place: a crash while writing leaves temporary files and the previous stamp, whose files are still there and
still used. A file whose stamp the database does not name is stale: never read, removed by the next writer.

Opening a version maps the matrix (``numpy.load(mmap_mode="r")``): nothing is read until a search multiplies
it, and then only from the page cache the kernel shares between the processes serving the space.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["META_KEY", "open_vectors", "prune_vectors", "vectors_folder", "write_vectors"]

META_KEY: Final = "vectors"
"""The ``meta`` key naming the committed version's vector files ('' or absent: none written)."""
_TEMPORARY: Final = ".tmp"


def vectors_folder(database: Path) -> Path:
    """Where the vector files of the SQLite index ``database`` live (``code.sqlite3`` → ``code.vectors/``)."""
    return database.with_suffix(".vectors")


def write_vectors(folder: Path, version: int, ids: npt.NDArray[np.int64], matrix: npt.NDArray[np.float32]) -> str:
    """Write ``ids`` and ``matrix`` for ``version`` under a fresh stamp and return the stamp (to commit in
    ``meta``). Each file is written under a temporary name, flushed to disk, then renamed into place."""
    import numpy as np

    if len(ids) != len(matrix):
        raise ValueError(f"{len(ids)} ids for {len(matrix)} vectors")
    folder.mkdir(parents=True, exist_ok=True)
    stamp = f"v{version}-{secrets.token_hex(4)}"
    for name, array in ((f"{stamp}.ids.npy", ids.astype(np.int64, copy=False)),
                        (f"{stamp}.npy", matrix.astype(np.float32, copy=False))):  # fmt: skip
        temporary = folder / (name + _TEMPORARY)
        with temporary.open("wb") as handle:
            np.save(handle, np.ascontiguousarray(array), allow_pickle=False)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, folder / name)
    with contextlib.suppress(OSError):  # the renames themselves reach the disk with the folder's entry
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
    return stamp


def open_vectors(folder: Path, stamp: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]] | None:
    """The ids (read) and matrix (memory-mapped, read-only) written under ``stamp``; None when the files are
    missing or do not fit together (the caller reads the vectors from the database instead)."""
    import numpy as np

    if not stamp or "/" in stamp or stamp.startswith("."):
        return None
    try:
        ids = np.load(folder / f"{stamp}.ids.npy", allow_pickle=False)
        matrix = np.load(folder / f"{stamp}.npy", mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return None
    if ids.ndim != 1 or matrix.ndim != 2 or len(ids) != len(matrix) or matrix.dtype != np.float32:
        return None
    return ids.astype(np.int64, copy=False), matrix.view(np.ndarray)


def prune_vectors(folder: Path, keep: str) -> None:
    """Remove every vector file but ``keep``'s (older versions, stale stamps, temporary files of a crash). A
    process still searching a removed version keeps its mapping: the file goes when the last one closes it."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if not keep or not path.name.startswith(keep + "."):
            with contextlib.suppress(OSError):
                path.unlink()
