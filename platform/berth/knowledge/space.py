"""One knowledge space's index at run time: refresh (incremental, locked, atomic) and hybrid search.

:meth:`SpaceIndex.refresh` lists the indexer's files, reads and hashes only files whose stat key
changed, re-chunks and re-embeds only files whose content changed, and writes the result in one
transaction. A file lock next to the database makes concurrent refreshes of the same space (several
host processes) take turns; the second finds nothing left to do. A file that cannot be indexed
(binary, too large, invalid UTF-8, a chunker that raises) is recorded as ``skipped`` with its reason; a
listing that fails (a missing folder, repository or ref) is recorded on the space, whose previous
version keeps serving.

:meth:`SpaceIndex.search` ranks chunks lexically (FTS5 BM25) and by embedding (cosine), fused by
reciprocal rank.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeAlias

import numpy as np

from berth.knowledge.chunks import MAX_CHUNK_CHARS, Chunk, SkipFile, base_anchor, dedupe_anchor
from berth.knowledge.indexers import KnowledgeIndexer, ListingError
from berth.knowledge.sources import DEFAULT_MAX_FILE_BYTES, SourceFile
from berth.knowledge.store import ChunkRow, FileRecord, FileUpdate, SpaceStore
from berth.runtime.memory import DEFAULT_RRF_K, Embedder, fuse_rankings

__all__ = ["IndexProgress", "KnowledgeHit", "RefreshReport", "SearchMode", "SpaceIndex", "SpaceStatus"]

log = logging.getLogger("berth.knowledge")

SearchMode: TypeAlias = Literal["hybrid", "lexical", "vector"]
CANDIDATES = 50
"""How many chunks each ranking contributes to the fusion."""
EMBED_BATCH = 64
EMBED_CHARS = 2_000
"""The first characters of a chunk (after its title) that are embedded."""


@dataclass(frozen=True, slots=True)
class IndexProgress:
    """Where a running refresh is: files read and chunked, chunks embedded."""

    space: str
    phase: Literal["listing", "chunking", "embedding", "writing", "done"]
    files_done: int = 0
    files_total: int = 0
    chunks_done: int = 0
    chunks_total: int = 0

    def line(self) -> str:
        """One human line: ``docs: chunking 120/400 files, embedding 0/0 chunks``."""
        return (
            f"{self.space}: {self.phase} — files {self.files_done}/{self.files_total}, "
            f"chunks {self.chunks_done}/{self.chunks_total}"
        )


@dataclass(frozen=True)
class RefreshReport:
    """What one refresh did."""

    space: str
    version: int
    files: int
    changed: int = 0
    removed: int = 0
    touched: int = 0
    skipped: int = 0
    chunks_written: int = 0
    seconds: float = 0.0
    error: str | None = None

    @property
    def wrote(self) -> bool:
        """Whether the refresh committed a new version."""
        return bool(self.changed or self.removed or self.touched)


@dataclass(frozen=True)
class SpaceStatus:
    """A space's state for ``berth knowledge status`` and the admin API."""

    space: str
    version: int
    files: dict[str, int]
    chunks: int
    indexed_at: float | None
    embedder: str | None
    error: str | None
    progress: dict[str, Any] | None
    skipped: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class KnowledgeHit:
    """One ranked chunk."""

    space: str
    chunk: ChunkRow
    score: float
    snippet: str

    @property
    def logical_path(self) -> str:
        """``ks:<space>/<path>#<anchor>``."""
        return f"ks:{self.space}/{self.chunk.path}#{self.chunk.anchor}"


ProgressCallback: TypeAlias = Callable[[IndexProgress], None]


class SpaceIndex:
    """The persistent, searchable index of one space of one bundle."""

    def __init__(
        self,
        name: str,
        indexer: KnowledgeIndexer,
        store_path: Path,
        embedder: Embedder,
        *,
        embedder_name: str = "builtin",
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        refresh_interval_s: float = 2.0,
        first_index_wait_s: float = 30.0,
        description: str = "",
    ) -> None:
        self.name = name
        self.indexer = indexer
        self.description = description
        self.store = SpaceStore(store_path)
        self.embedder = embedder
        self.embedder_id = f"{embedder_name}:{embedder.dimensions}"
        self.max_file_bytes = getattr(indexer, "max_file_bytes", None) or max_file_bytes
        self.refresh_interval_s = refresh_interval_s
        self.first_index_wait_s = first_index_wait_s
        self._lock_path = store_path.with_suffix(".lock")
        self._stop = threading.Event()
        self._refreshing: asyncio.Task[RefreshReport] | None = None
        self._last_check = 0.0
        self._first_done: asyncio.Event | None = None
        self.last_report: RefreshReport | None = None

    # -- refreshing ------------------------------------------------------------------------------------

    async def refresh(self, *, force: bool = False, progress: ProgressCallback | None = None) -> RefreshReport:
        """Bring the index up to date with the indexer's files (see the module docstring).

        :param force: re-chunk and re-embed every file, changed or not.
        :param progress: called from the worker thread as files are chunked and chunks embedded.
        """

        def embed(texts: list[str]) -> list[tuple[float, ...]]:
            # a loop of the worker thread's own: the refresh never waits on the caller's loop being free
            return asyncio.run(self.embedder.embed(texts))

        self._last_check = time.monotonic()
        try:
            report = await asyncio.to_thread(self._refresh_locked, embed, force, progress)
        finally:
            self._mark_first_done()
        self.last_report = report
        return report

    def _refresh_locked(
        self, embed: Callable[[list[str]], list[tuple[float, ...]]], force: bool, progress: ProgressCallback | None
    ) -> RefreshReport:
        self._lock_path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock_path.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # another process indexing this space finishes first
            try:
                return _Refresh(self, embed, force, progress).run()
            finally:
                self.store.set_progress(None)
                fcntl.flock(handle, fcntl.LOCK_UN)

    def refresh_in_background(self) -> asyncio.Task[RefreshReport]:
        """Start a refresh unless one is running; the current version serves meanwhile."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self.refresh())
            self._refreshing.add_done_callback(_log_refresh_failure)
        return self._refreshing

    def check_soon(self) -> None:
        """Refresh in the background when the last check is older than ``refresh_interval_s``."""
        if time.monotonic() - self._last_check >= self.refresh_interval_s:
            self.refresh_in_background()

    async def wait_first_index(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) for this process's first refresh; True when it finished."""
        if self.store.version() > 0:
            return True
        done = self._first_event()
        try:
            await asyncio.wait_for(done.wait(), timeout=timeout_s)
        except TimeoutError:
            return False
        return True

    def _first_event(self) -> asyncio.Event:
        if self._first_done is None:
            self._first_done = asyncio.Event()
        return self._first_done

    def _mark_first_done(self) -> None:
        self._first_event().set()

    def stop(self) -> None:
        """Ask a running refresh to stop after the current file (nothing is written), and close the store."""
        self._stop.set()
        if self._refreshing is not None and not self._refreshing.done():
            self._refreshing.add_done_callback(lambda _task: self.store.close())
        else:
            self.store.close()

    # -- searching -----------------------------------------------------------------------------------

    async def search(self, query: str, *, limit: int = 5, mode: SearchMode = "hybrid") -> list[KnowledgeHit]:
        """The ``limit`` best chunks for ``query``: lexical, vector, or both fused by reciprocal rank."""
        vector = None
        if mode != "lexical":
            vector = np.asarray(await self.embedder.embed_query(query), dtype=np.float32)
        return await asyncio.to_thread(self.rank, query, vector, limit=limit, mode=mode)

    def rank(
        self, query: str, vector: np.ndarray[Any, Any] | None, *, limit: int, mode: SearchMode = "hybrid"
    ) -> list[KnowledgeHit]:
        """Rank synchronously with an already embedded query (``vector``; unused in lexical mode)."""
        rankings: list[list[str]] = []
        if mode in ("hybrid", "lexical"):
            rankings.append([str(i) for i, _ in self.store.lexical(query, CANDIDATES)])
        if mode in ("hybrid", "vector") and vector is not None:
            rankings.append([str(i) for i in self._nearest(vector, CANDIDATES)])
        fused = fuse_rankings(rankings, k=DEFAULT_RRF_K) if len(rankings) > 1 else _single(rankings)
        best = sorted(fused.items(), key=lambda item: -item[1])[:limit]
        rows = self.store.chunk_rows(int(key) for key, _ in best)
        return [
            KnowledgeHit(self.name, rows[int(key)], round(score, 5), snippet(rows[int(key)].text, query))
            for key, score in best
            if int(key) in rows
        ]

    def _nearest(self, vector: np.ndarray[Any, Any], count: int) -> list[int]:
        vectors = self.store.vectors()
        if vectors.matrix.size == 0:
            return []
        norm = float(np.linalg.norm(vector)) or 1.0
        scores = vectors.matrix @ (vector / norm)
        count = min(count, len(scores))
        top = np.argpartition(-scores, count - 1)[:count]
        top = top[np.argsort(-scores[top])]
        return [int(vectors.ids[i]) for i in top]

    # -- reading -------------------------------------------------------------------------------------

    def read(self, path: str, anchor: str | None = None) -> list[ChunkRow]:
        """The chunks of ``path`` (all of them, or the parts of the one ``anchor`` names)."""
        rows = self.store.chunks_of(path)
        if anchor is None:
            return rows
        return [row for row in rows if row.anchor == anchor or base_anchor(row.anchor) == base_anchor(anchor)]

    def status(self) -> SpaceStatus:
        """The space's committed version, counts, skipped files and any running refresh's progress."""
        meta = self.store.meta()
        counts = self.store.counts()
        chunks = counts.pop("chunks", 0)
        progress = meta.get("progress")
        return SpaceStatus(
            space=self.name,
            version=int(meta.get("version", "0")),
            files=counts,
            chunks=chunks,
            indexed_at=float(meta["indexed_at"]) if "indexed_at" in meta else None,
            embedder=meta.get("embedder"),
            error=meta.get("error") or None,
            progress=json.loads(progress) if progress else None,
            skipped=self.store.skipped(),
        )


def _single(rankings: Sequence[Sequence[str]]) -> dict[str, float]:
    if not rankings:
        return {}
    return {key: 1.0 / (DEFAULT_RRF_K + rank) for rank, key in enumerate(rankings[0], start=1)}


def snippet(text: str, query: str, width: int = 240) -> str:
    """The ``width`` characters of ``text`` around the densest run of query words (whitespace collapsed)."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    words = {w.lower() for w in query.split() if len(w) > 2}
    lowered = flat.lower()
    best, best_hits = 0, -1
    for start in range(0, max(len(flat) - width, 0) + 1, max(width // 4, 1)):
        window = lowered[start : start + width]
        hits = sum(window.count(word) for word in words)
        if hits > best_hits:
            best, best_hits = start, hits
    piece = flat[best : best + width]
    return ("…" if best else "") + piece + ("…" if best + width < len(flat) else "")


def _log_refresh_failure(task: asyncio.Task[RefreshReport]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("knowledge refresh failed", exc_info=task.exception())


class _Refresh:
    """One refresh pass (runs in a worker thread, under the space's file lock)."""

    def __init__(
        self,
        index: SpaceIndex,
        embed: Callable[[list[str]], list[tuple[float, ...]]],
        force: bool,
        progress: ProgressCallback | None,
    ) -> None:
        self.index = index
        self.store = index.store
        self.embed = embed
        self.force = force
        self.progress_callback = progress
        self.started = time.monotonic()
        self._last_progress = 0.0
        self._logged_decile = -1

    def run(self) -> RefreshReport:
        space = self.index.name
        self._report(IndexProgress(space, "listing"))
        try:
            listed = list(self.index.indexer.files())
        except (ListingError, FileNotFoundError) as error:
            return self._listing_failed(getattr(error, "reason", str(error)))
        stored = self.store.files()
        meta = self.store.meta()
        reembed = self.force or meta.get("embedder") not in (None, self.index.embedder_id)
        candidates = [f for f in listed if reembed or _stat_changed(f, stored.get(f.path))]
        removed = sorted(set(stored) - {f.path for f in listed})
        updates, touched = self._chunk_all(candidates, stored, reembed)
        if not updates and not touched and not removed and not meta.get("error") and "version" in meta:
            return RefreshReport(space, int(meta["version"]), len(listed), seconds=self._elapsed())
        updates = self._embed_all(updates)
        self._report(IndexProgress(space, "writing", len(candidates), len(candidates)))
        version = self.store.apply(
            updates, removed=removed, touched=touched, meta={"embedder": self.index.embedder_id, "error": ""}
        )
        report = RefreshReport(
            space,
            version,
            len(listed),
            changed=len(updates),
            removed=len(removed),
            touched=len(touched),
            skipped=sum(1 for u in updates if u.record.status == "skipped"),
            chunks_written=sum(len(u.chunks) for u in updates),
            seconds=self._elapsed(),
        )
        log.info(
            "knowledge %s: version %d — %d files, %d re-indexed (%d chunks), %d removed, %d skipped, %.2f s",
            space, version, report.files, report.changed, report.chunks_written, report.removed, report.skipped,
            report.seconds,
        )  # fmt: skip
        return report

    def _elapsed(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def _listing_failed(self, reason: str) -> RefreshReport:
        log.warning("knowledge %s: cannot list its files: %s", self.index.name, reason)
        meta = self.store.meta()
        if meta.get("error") != reason:
            self.store.apply([], removed=[], touched=[], meta={"error": reason})
        return RefreshReport(self.index.name, self.store.version(), 0, seconds=self._elapsed(), error=reason)

    def _chunk_all(
        self, candidates: list[SourceFile], stored: dict[str, FileRecord], reembed: bool
    ) -> tuple[list[FileUpdate], list[FileRecord]]:
        updates: list[FileUpdate] = []
        touched: list[FileRecord] = []
        total = len(candidates)
        for done, file in enumerate(candidates, start=1):
            if self.index._stop.is_set():
                raise asyncio.CancelledError("the space is being unloaded")
            update = self._chunk_one(file, stored.get(file.path), reembed)
            if isinstance(update, FileRecord):
                touched.append(update)
            else:
                updates.append(update)
            self._report(IndexProgress(self.index.name, "chunking", done, total))
        return updates, touched

    def _chunk_one(self, file: SourceFile, previous: FileRecord | None, reembed: bool) -> FileUpdate | FileRecord:
        if file.size > self.index.max_file_bytes:
            reason = f"too large ({file.size} bytes > {self.index.max_file_bytes})"
            return FileUpdate(FileRecord(file.path, file.stat, file.stat, "skipped", reason, 0))
        try:
            data = file.read()
        except OSError as error:
            return FileUpdate(FileRecord(file.path, file.stat, "", "skipped", f"unreadable: {error.strerror}", 0))
        sha = hashlib.sha256(data).hexdigest()
        if previous is not None and previous.sha == sha and not reembed and previous.status != "skipped":
            return replace(previous, stat=file.stat)
        try:
            chunks, note = self.index.indexer.chunk(file, data)
        except SkipFile as skip:
            return FileUpdate(FileRecord(file.path, file.stat, sha, "skipped", skip.reason, 0))
        except Exception as error:  # a chunker that fails on one file never fails the space
            reason = f"chunker failed: {type(error).__name__}: {error}"[:500]
            return FileUpdate(FileRecord(file.path, file.stat, sha, "skipped", reason, 0))
        clean = _clean_chunks(file.path, chunks)
        status = "degraded" if note else "indexed"
        return FileUpdate(FileRecord(file.path, file.stat, sha, status, note, len(clean)), clean)

    def _embed_all(self, updates: list[FileUpdate]) -> list[FileUpdate]:
        pending = [(i, chunk) for i, update in enumerate(updates) for chunk in update.chunks]
        vectors: dict[int, list[bytes | None]] = {i: [] for i in range(len(updates))}
        total = len(pending)
        for start in range(0, total, EMBED_BATCH):
            if self.index._stop.is_set():
                raise asyncio.CancelledError("the space is being unloaded")
            batch = pending[start : start + EMBED_BATCH]
            embedded = self.embed([f"{chunk.title}\n{chunk.text[:EMBED_CHARS]}" for _, chunk in batch])
            for (i, _), vector in zip(batch, embedded, strict=True):
                vectors[i].append(_normalized(vector))
            done = start + len(batch)
            self._report(IndexProgress(self.index.name, "embedding", len(updates), len(updates), done, total))
        return [replace(update, vectors=vectors[i]) for i, update in enumerate(updates)]

    def _report(self, progress: IndexProgress) -> None:
        if self.progress_callback is not None:
            self.progress_callback(progress)
        now = time.monotonic()
        final = progress.files_done == progress.files_total and progress.chunks_done == progress.chunks_total
        if now - self._last_progress >= 1.0 or (final and progress.phase in ("writing",)):
            self._last_progress = now
            self.store.set_progress(
                {"phase": progress.phase, "files_done": progress.files_done, "files_total": progress.files_total,
                 "chunks_done": progress.chunks_done, "chunks_total": progress.chunks_total, "at": time.time()}
            )  # fmt: skip
        total = progress.chunks_total if progress.phase == "embedding" else progress.files_total
        done = progress.chunks_done if progress.phase == "embedding" else progress.files_done
        if total >= 100:
            decile = (done * 10) // total
            key = decile + (10 if progress.phase == "embedding" else 0)
            if key != self._logged_decile:
                self._logged_decile = key
                log.info("knowledge %s", progress.line())


def _stat_changed(file: SourceFile, record: FileRecord | None) -> bool:
    return record is None or not file.stat or record.stat != file.stat


def _clean_chunks(path: str, chunks: Sequence[Chunk]) -> list[Chunk]:
    """The chunker's chunks with this file's path, unique anchors and no empty or oversized text."""
    seen: dict[str, int] = {}
    clean = []
    for chunk in chunks:
        if not chunk.text.strip():
            continue
        anchor = dedupe_anchor(chunk.anchor or "chunk", seen, style="tilde")
        clean.append(replace(chunk, path=path, anchor=anchor, text=chunk.text[: MAX_CHUNK_CHARS * 2]))
    return clean


def _normalized(vector: Sequence[float]) -> bytes:
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return (array / norm if norm else array).astype(np.float32).tobytes()
