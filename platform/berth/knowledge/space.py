"""One knowledge space's index at run time: refresh (incremental, locked, atomic) and hybrid search.

:meth:`SpaceIndex.refresh` lists the indexer's files, reads and hashes only files whose stat key
changed, re-chunks and re-embeds only files whose content changed, and writes the result in one
transaction of its :class:`~berth.knowledge.store.SpaceStore`. The store's lock makes concurrent refreshes
of the same space (several host processes) take turns; the second finds nothing left to do. A file that
cannot be indexed (binary, too large, invalid UTF-8, a chunker that raises) is recorded as ``skipped`` with
its reason; a listing that fails (a missing folder, repository or ref) is recorded on the space, whose previous
version keeps serving.

:meth:`SpaceIndex.search` ranks chunks lexically (BM25) and by embedding (cosine), fused by reciprocal
rank.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeAlias

from berth.knowledge.chunks import MAX_CHUNK_CHARS, Chunk, SkipFile, base_anchor, dedupe_anchor
from berth.knowledge.filters import ChunkFilter
from berth.knowledge.indexers import KnowledgeIndexer, ListingError
from berth.knowledge.passage import passage
from berth.knowledge.sources import DEFAULT_MAX_FILE_BYTES, SourceFile
from berth.knowledge.store import BULKY_META, ChunkRow, FileRecord, FileUpdate, SpaceStore
from berth.knowledge.symbols import DEFINITIONS_PER_NAME, CodeQuery
from berth.runtime.memory import DEFAULT_RRF_K, Embedder, fuse_rankings

__all__ = ["Candidate", "IndexProgress", "KnowledgeHit", "RefreshReport", "SearchMode", "SpaceIndex", "SpaceStatus"]

log = logging.getLogger("berth.knowledge")

SearchMode: TypeAlias = Literal["hybrid", "lexical", "vector"]
CANDIDATES = 50
"""How many chunks each ranking contributes to the fusion."""
EMBED_BATCH = 64
CHUNK_BATCH = 64
"""Files read and chunked per worker-thread call (progress is reported between batches)."""
EMBED_CHARS = 2_000
"""The first characters of a chunk (after its title) that are embedded."""


@dataclass(frozen=True, slots=True)
class IndexProgress:
    """Where a running refresh is: files read and chunked, chunks embedded."""

    space: str
    phase: Literal["listing", "chunking", "embedding", "writing"]
    files_done: int = 0
    files_total: int = 0
    chunks_done: int = 0
    chunks_total: int = 0

    def line(self) -> str:
        """One human line: ``docs: chunking — files 120/400, chunks 0/0``."""
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
    excluded: list[tuple[str, str, int]] = field(default_factory=list)
    """What the last listing left out: (folder/ or '*', reason, files), e.g. ``("build/", "build output at the
    space root", 227)``, ``("*", "not matched by include", 40)``."""
    duplicates: int = 0
    """Chunks dropped because an earlier chunk of the space has the same (normalized) text."""


@dataclass(frozen=True, slots=True)
class KnowledgeHit:
    """One ranked chunk."""

    space: str
    chunk: ChunkRow
    score: float
    passage: str
    """The part of the chunk that best matches the query (:func:`berth.knowledge.passage.passage`)."""

    @property
    def logical_path(self) -> str:
        """``ks:<space>/<path>#<anchor>``."""
        return f"ks:{self.space}/{self.chunk.path}#{self.chunk.anchor}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A chunk one space proposes for a query, with its cosine similarity to it (None: vectors not ranked)."""

    space: str
    chunk: ChunkRow
    cosine: float | None
    lexical: float | None = None
    """The store's own lexical score (this space's statistics: not comparable with another space's)."""


ProgressCallback: TypeAlias = Callable[[IndexProgress], Awaitable[None] | None]


class SpaceIndex:
    """The persistent, searchable index of one space of one bundle, over a :class:`SpaceStore`."""

    def __init__(
        self,
        name: str,
        indexer: KnowledgeIndexer,
        store: SpaceStore,
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
        self.store = store
        self.embedder = embedder
        self.embedder_name = embedder_name
        self.fuses_vectors = bool(getattr(embedder, "semantic", True))
        """Whether chunks are embedded and searches rank by embedding (not for an embedder that only restates
        words, like ``builtin``: its vectors are neither computed nor stored, and ``vector`` searches by words)."""
        self.max_file_bytes = getattr(indexer, "max_file_bytes", None) or max_file_bytes
        self.refresh_interval_s = refresh_interval_s
        self.first_index_wait_s = first_index_wait_s
        self._stop = threading.Event()
        self._refreshing: asyncio.Task[RefreshReport] | None = None
        self._warming: asyncio.Task[None] | None = None
        self._warm_up: asyncio.Task[None] | None = None
        self.warm_state: Literal["cold", "warming", "warm", "failed"] = "cold"
        """Whether :meth:`warm` has loaded what the first vector search needs (``failed``: see ``warm_error``)."""
        self.warm_error: str | None = None
        self._last_check = 0.0
        self._first_done: asyncio.Event | None = None
        self.last_report: RefreshReport | None = None

    @property
    def embedder_id(self) -> str:
        """What the stored vectors were made by (``e5:384``), or ``builtin:no-vectors`` when none are stored; a
        refresh that finds another re-embeds (or drops the vectors of) every chunk."""
        if not self.fuses_vectors:
            return f"{self.embedder_name}:no-vectors"
        return f"{self.embedder_name}:{self.embedder.dimensions}"

    # -- refreshing ------------------------------------------------------------------------------------

    async def refresh(self, *, force: bool = False, progress: ProgressCallback | None = None) -> RefreshReport:
        """Bring the index up to date with the indexer's files (see the module docstring).

        :param force: re-chunk and re-embed every file, changed or not.
        :param progress: called (and awaited, if it returns an awaitable) as files are chunked and chunks
            embedded, and once more just before the new version is written.
        """
        self._last_check = time.monotonic()
        try:
            async with self.store.exclusive():  # another process refreshing this space finishes first
                try:
                    report = await _Refresh(self, force, progress).run()
                finally:
                    await self.store.set_progress(None)
        finally:
            self._first_event().set()
        self.last_report = report
        if self.fuses_vectors and report.version and (self._warming is None or self._warming.done()):
            self._warming = asyncio.ensure_future(self._load_vectors())
        return report

    async def _load_vectors(self) -> None:
        """Have the store load the committed version's vectors (it keeps them per version), so the first vector
        search after a refresh does not wait for it (seconds at a few hundred thousand chunks)."""
        import numpy as np

        try:
            await self.store.nearest(np.zeros(self.embedder.dimensions, dtype=np.float32), 1)
        except Exception:  # the search that needs them reports what is wrong
            log.debug("knowledge %s: loading the vectors failed", self.name, exc_info=True)

    def warm_in_background(self) -> asyncio.Task[None] | None:
        """Start :meth:`warm` unless it has started (None: the space ranks no vectors, nothing to warm)."""
        if not self.fuses_vectors:
            return None
        if self._warm_up is None:
            self._warm_up = asyncio.ensure_future(self.warm())
        return self._warm_up

    async def warm(self) -> None:
        """Load what the first vector search would otherwise wait for — numpy, the embedder's model (by embedding
        a query) and the committed version's vectors — in worker threads. A failure is logged and recorded in
        ``warm_error``, never raised: the search that needs them loads them itself."""
        self.warm_state = "warming"
        try:
            await asyncio.to_thread(_warm_up, self.embedder)
            if await self.store.version() > 0:
                import numpy as np  # imported by now, in the worker thread

                await self.store.nearest(np.zeros(self.embedder.dimensions, dtype=np.float32), 1)
        except Exception as error:
            self.warm_state, self.warm_error = "failed", f"{type(error).__name__}: {error}"[:500]
            log.warning("knowledge %s: warming up for the first search failed: %s", self.name, self.warm_error)
            return
        self.warm_state = "warm"

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
        """Wait (at most ``timeout_s``) for a first version; True when there is one (or a refresh ended)."""
        if await self.store.version() > 0:
            return True
        try:
            await asyncio.wait_for(self._first_event().wait(), timeout=timeout_s)
        except TimeoutError:
            return False
        return True

    def _first_event(self) -> asyncio.Event:
        if self._first_done is None:
            self._first_done = asyncio.Event()
        return self._first_done

    async def aclose(self) -> None:
        """Cancel a running background refresh (nothing of it is written; a batch already in a worker thread
        finishes there and stops), loading of vectors or warming up, and close the store."""
        self._stop.set()
        for running in (self._refreshing, self._warming, self._warm_up):
            if running is not None and not running.done():
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await running
        await self.store.aclose()

    # -- searching -----------------------------------------------------------------------------------

    async def search(
        self, query: str, *, limit: int = 5, mode: SearchMode = "hybrid", within: ChunkFilter | None = None
    ) -> list[KnowledgeHit]:
        """The ``limit`` best chunks for ``query``: lexical, vector, or both fused by reciprocal rank, then ranked
        for code (:mod:`berth.knowledge.symbols`: the definitions the query names first, tests weighed down).

        With an embedder that is not semantic (the ``builtin`` hashed n-grams) no vector is stored: ``hybrid``
        and ``vector`` are lexical (``react.search_knowledge`` notes it for ``vector``).

        :param within: only chunks this filter lets through (a path glob, a language, a symbol, a kind).
        """
        mode = self.effective_mode(mode)
        code = CodeQuery.parse(query)
        wanted: list[Awaitable[list[tuple[int, float]]]] = []
        if mode in ("hybrid", "lexical"):
            wanted.append(self.store.lexical(query, CANDIDATES, within=within))
        if mode == "vector" or (mode == "hybrid" and self.fuses_vectors):
            wanted.append(self._nearest(query, CANDIDATES, within))
        # both at once: the query is embedded (and, the first time, numpy and the model loaded) while FTS5 ranks
        rankings = [[str(i) for i, _ in ranked] for ranked in await asyncio.gather(*wanted)]
        fused = {int(key): score for key, score in fuse_rankings(rankings, k=DEFAULT_RRF_K).items()}
        named = await self.definitions_named(code, within)
        rows = await self.store.chunk_rows([*fused, *named])
        top = max(fused.values(), default=0.0)
        scored = [
            (row, top if code.definition_rank(row)[0] == 0 else fused.get(row.id, 0.0) * code.weight(row))
            for row in rows.values()
        ]
        scored.sort(key=lambda item: (code.definition_rank(item[0]), -item[1], -fused.get(item[0].id, 0.0)))
        return [
            KnowledgeHit(self.name, row, round(score, 5), passage(row.text, query)) for row, score in scored[:limit]
        ]

    async def _nearest(self, query: str, count: int, within: ChunkFilter | None) -> list[tuple[int, float]]:
        """The chunks nearest to the query's embedding."""
        import numpy as np  # with the first vector search: a host whose spaces search lexically never loads it

        vector = np.asarray(await self.embedder.embed_query(query), dtype=np.float32)
        return await self.store.nearest(vector, count, within=within)

    def effective_mode(self, mode: SearchMode) -> SearchMode:
        """How this space answers ``mode``: ``vector`` is ``lexical`` when it has no semantic embedder."""
        return "lexical" if mode == "vector" and not self.fuses_vectors else mode

    async def definitions_named(self, code: CodeQuery, within: ChunkFilter | None = None) -> list[int]:
        """The ids of the definitions titled by the identifiers ``code`` names (and ``within`` lets through)."""
        if within is not None and (within.symbol is not None or within.kind not in (None, "definition")):
            return []  # the filter itself picks the definitions, or allows none
        ids: list[int] = []
        for name in code.lookups():
            symbol = ChunkFilter(
                path=within.path if within else None,
                language=within.language if within else None,
                symbol=name,
                kind="definition",
            )
            ids += await self.store.matching(symbol, DEFINITIONS_PER_NAME)
        return list(dict.fromkeys(ids))

    async def candidates(
        self,
        query: str,
        *,
        mode: SearchMode = "hybrid",
        count: int = CANDIDATES,
        within: ChunkFilter | None = None,
    ) -> list[Candidate]:
        """This space's ``count`` best chunks of each ranking the mode uses, each with its cosine similarity to
        the query when vectors are ranked (for :func:`berth.knowledge.merge.search_spaces_merged`, which
        re-scores the union of several spaces' candidates on one scale), and the definitions the query names."""
        mode = self.effective_mode(mode)
        lexical: dict[int, float] = {}
        cosines: dict[int, float] = {}
        if mode in ("hybrid", "lexical"):
            lexical = dict(await self.store.lexical(query, count, within=within))
        if mode == "vector" or (mode == "hybrid" and self.fuses_vectors):
            import numpy as np

            vector = np.asarray(await self.embedder.embed_query(query), dtype=np.float32)
            cosines = dict(await self.store.nearest(vector, count, within=within))
        named = await self.definitions_named(CodeQuery.parse(query), within)
        ids = list(dict.fromkeys([*lexical, *cosines, *named]))
        rows = await self.store.chunk_rows(ids)
        return [Candidate(self.name, rows[i], cosines.get(i), lexical.get(i)) for i in ids if i in rows]

    # -- reading -------------------------------------------------------------------------------------

    async def read(self, path: str, anchor: str | None = None) -> list[ChunkRow]:
        """The chunks of ``path`` (all of them, or the parts of the one ``anchor`` names)."""
        rows = await self.store.chunks_of(path)
        if anchor is None:
            return rows
        return [row for row in rows if row.anchor == anchor or base_anchor(row.anchor) == base_anchor(anchor)]

    async def progress_and_error(self) -> tuple[dict[str, Any] | None, str | None]:
        """A running refresh's progress and the last refresh's error, from one read of the store's meta values
        (what a search needs; :meth:`status` also counts files and chunks)."""
        meta = await self.store.meta()
        return _progress(meta), meta.get("error") or None

    async def status(self) -> SpaceStatus:
        """The space's committed version, counts, skipped files and any running refresh's progress."""
        meta = await self.store.meta()
        counts = await self.store.counts()
        chunks = counts.pop("chunks", 0)
        return SpaceStatus(
            space=self.name,
            version=int(meta.get("version", "0")),
            files=counts,
            chunks=chunks,
            indexed_at=float(meta["indexed_at"]) if meta.get("indexed_at") else None,
            embedder=meta.get("embedder"),
            error=meta.get("error") or None,
            progress=_progress(meta),
            skipped=await self.store.skipped(),
            excluded=[(str(p), str(r), int(n)) for p, r, n in json.loads(meta.get("excluded") or "[]")],
            duplicates=sum(json.loads(meta.get("duplicates") or "{}").values()),
        )


def _progress(meta: dict[str, str]) -> dict[str, Any] | None:
    progress = meta.get("progress")
    return dict(json.loads(progress)) if progress else None


def _log_refresh_failure(task: asyncio.Task[RefreshReport]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("knowledge refresh failed", exc_info=task.exception())


class _Refresh:
    """One refresh pass, under the space's lock: CPU work in worker threads, store calls awaited."""

    def __init__(self, index: SpaceIndex, force: bool, progress: ProgressCallback | None) -> None:
        self.index = index
        self.store = index.store
        self.force = force
        self.progress_callback = progress
        self.started = time.monotonic()
        self._last_progress = 0.0
        self._last_phase = ""
        self._logged_step: tuple[str, int] | None = None

    async def run(self) -> RefreshReport:
        space = self.index.name
        await self._report(IndexProgress(space, "listing"))
        try:
            listed = await asyncio.to_thread(lambda: list(self.index.indexer.files()))
        except (ListingError, FileNotFoundError) as error:
            return await self._listing_failed(getattr(error, "reason", str(error)))
        excluded = json.dumps([e.as_list() for e in getattr(self.index.indexer, "exclusions", None) or ()])
        stored = await self.store.files()
        meta = await self.store.meta()
        reembed = self.force or meta.get("embedder") not in (None, self.index.embedder_id)
        candidates = [f for f in listed if reembed or _stat_changed(f, stored.get(f.path))]
        removed = sorted(set(stored) - {f.path for f in listed})
        updates, touched = await self._chunk_all(candidates, stored, reembed)
        keys = await self._stored_keys(updates, removed)
        dropped = await self._dropped_keys(meta) if keys is not None else {}  # read only when something changes
        updates, touched = await self._rechunk_affected(listed, updates, touched, removed, keys, dropped)
        updates, duplicates, dropped_json = self._dedupe(updates, removed, meta, keys, dropped)
        unchanged = not updates and not touched and not removed and not meta.get("error")
        if unchanged and "version" in meta and (meta.get("excluded") or "[]") == excluded:
            return RefreshReport(space, int(meta["version"]), len(listed), seconds=self._elapsed())
        if self.index.fuses_vectors:  # a non-semantic embedder's vectors would be stored for nothing
            updates = await self._embed_all(updates)
        await self._report(IndexProgress(space, "writing", len(candidates), len(candidates)))
        version = await self.store.apply(
            updates,
            removed=removed,
            touched=touched,
            meta={
                "embedder": self.index.embedder_id,
                "error": "",
                "excluded": excluded,
                "duplicates": duplicates,
                **({BULKY_META: dropped_json} if keys is not None else {}),  # unread, so left as it is
            },
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

    def _check_stop(self) -> None:
        if self.index._stop.is_set():
            raise asyncio.CancelledError("the space is being closed")

    async def _listing_failed(self, reason: str) -> RefreshReport:
        log.warning("knowledge %s: cannot list its files: %s", self.index.name, reason)
        if (await self.store.meta()).get("error") != reason:
            await self.store.apply([], removed=[], touched=[], meta={"error": reason})
        return RefreshReport(self.index.name, await self.store.version(), 0, seconds=self._elapsed(), error=reason)

    async def _chunk_all(
        self, candidates: list[SourceFile], stored: dict[str, FileRecord], reembed: bool
    ) -> tuple[list[FileUpdate], list[FileRecord]]:
        updates: list[FileUpdate] = []
        touched: list[FileRecord] = []
        total = len(candidates)
        for start in range(0, total, CHUNK_BATCH):
            self._check_stop()
            batch = candidates[start : start + CHUNK_BATCH]
            done = await asyncio.to_thread(self._chunk_batch, batch, stored, reembed)
            for result in done:
                if isinstance(result, FileRecord):
                    touched.append(result)
                else:
                    updates.append(result)
            await self._report(IndexProgress(self.index.name, "chunking", start + len(batch), total))
        return updates, touched

    def _chunk_batch(
        self, batch: list[SourceFile], stored: dict[str, FileRecord], reembed: bool
    ) -> list[FileUpdate | FileRecord]:
        return [self._chunk_one(file, stored.get(file.path), reembed) for file in batch]

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

    async def _dropped_keys(self, meta: dict[str, str]) -> dict[str, list[str] | None]:
        """The (short) keys of the chunks each file dropped as duplicates (None: not recorded, as by an index
        written before they were)."""
        recorded: dict[str, list[str]] = json.loads(await self.store.meta_value(BULKY_META) or "{}")
        counts: dict[str, int] = json.loads(meta.get("duplicates") or "{}")
        return {path: recorded.get(path) for path in counts}

    async def _stored_keys(self, updates: list[FileUpdate], removed: list[str]) -> list[tuple[str, str]] | None:
        """Every stored chunk's (path, :func:`text_key`) when the refresh changes anything (None: it does not)."""
        if not updates and not removed:
            return None
        texts = await self.store.texts()
        return await asyncio.to_thread(lambda: [(path, text_key(text)) for path, text in texts])

    async def _rechunk_affected(
        self,
        listed: list[SourceFile],
        updates: list[FileUpdate],
        touched: list[FileRecord],
        removed: list[str],
        keys: list[tuple[str, str]] | None,
        dropped: dict[str, list[str] | None],
    ) -> tuple[list[FileUpdate], list[FileRecord]]:
        """The updates and, chunked again, the unchanged files whose de-duplication outcome the changes can alter
        (:func:`affected_by`), so their chunks are kept or dropped against the space as it will be."""
        if keys is None:
            return updates, touched
        changing = {update.record.path for update in updates} | set(removed)
        new_keys = [(u.record.path, text_key(c.text)) for u in updates for c in u.chunks]
        affected = affected_by(changing, keys, new_keys, dropped)
        again = [file for file in listed if file.path in affected]
        if not again:
            return updates, touched
        more, _ = await self._chunk_all(again, {}, True)
        redone = {update.record.path for update in more}
        merged = sorted([*updates, *more], key=lambda update: update.record.path)
        return merged, [record for record in touched if record.path not in redone]

    def _dedupe(
        self,
        updates: list[FileUpdate],
        removed: list[str],
        meta: dict[str, str],
        keys: list[tuple[str, str]] | None,
        dropped: dict[str, list[str] | None],
    ) -> tuple[list[FileUpdate], str, str]:
        """The updates (in path order) without chunks whose normalized text (:func:`text_key`) the space already
        has — in a file this refresh leaves alone, or earlier in path order — the duplicates dropped per file
        (JSON) and the short keys of the dropped chunks per file (JSON, for :func:`affected_by`)."""
        counts: dict[str, int] = json.loads(meta.get("duplicates") or "{}")
        short = {path: lost for path, lost in dropped.items() if lost is not None}
        changing = {update.record.path for update in updates} | set(removed)
        for path in changing:
            counts.pop(path, None)
            short.pop(path, None)
        seen = {key for path, key in keys or () if path not in changing}
        kept_updates = []
        for update in sorted(updates, key=lambda update: update.record.path):
            kept = []
            lost = []
            for chunk in update.chunks:
                key = text_key(chunk.text)
                if key not in seen:
                    seen.add(key)
                    kept.append(chunk)
                else:
                    lost.append(key[:SHORT_KEY])
            if lost:
                counts[update.record.path] = len(lost)
                short[update.record.path] = lost
                update = replace(update, record=replace(update.record, chunks=len(kept)), chunks=kept)
            kept_updates.append(update)
        return kept_updates, json.dumps(counts, sort_keys=True), json.dumps(short, sort_keys=True)

    async def _embed_all(self, updates: list[FileUpdate]) -> list[FileUpdate]:
        pending = [(i, chunk) for i, update in enumerate(updates) for chunk in update.chunks]
        vectors: dict[int, list[bytes | None]] = {i: [] for i in range(len(updates))}
        total = len(pending)
        embedder = self.index.embedder
        for start in range(0, total, EMBED_BATCH):
            self._check_stop()
            batch = pending[start : start + EMBED_BATCH]
            texts = [f"{chunk.title}\n{chunk.text[:EMBED_CHARS]}" for _, chunk in batch]
            # in a worker thread with a loop of its own: a CPU-bound embedder never stalls the caller's loop
            embedded = await asyncio.to_thread(_embed_in_a_loop_of_its_own, embedder, texts)
            for (i, _), vector in zip(batch, embedded, strict=True):
                vectors[i].append(_normalized(vector))
            done = start + len(batch)
            await self._report(IndexProgress(self.index.name, "embedding", len(updates), len(updates), done, total))
        return [replace(update, vectors=vectors[i]) for i, update in enumerate(updates)]

    async def _report(self, progress: IndexProgress) -> None:
        now = time.monotonic()
        if now - self._last_progress >= 1.0 or progress.phase != self._last_phase:
            self._last_progress, self._last_phase = now, progress.phase
            await self.store.set_progress(
                {"phase": progress.phase, "files_done": progress.files_done, "files_total": progress.files_total,
                 "chunks_done": progress.chunks_done, "chunks_total": progress.chunks_total, "at": time.time()}
            )  # fmt: skip
        if self.progress_callback is not None:
            result = self.progress_callback(progress)
            if inspect.isawaitable(result):
                await result
        embedding = progress.phase == "embedding"
        done, total = (
            (progress.chunks_done, progress.chunks_total) if embedding else (progress.files_done, progress.files_total)
        )
        step = (progress.phase, (done * 10) // total if total else 0)
        if total >= 100 and step != self._logged_step:
            self._logged_step = step
            log.info("knowledge %s", progress.line())


SHORT_KEY = 16
"""How many hex digits of a dropped chunk's :func:`text_key` are kept (a collision only chunks a file again)."""


def affected_by(
    changing: set[str],
    keys: list[tuple[str, str]],
    new_keys: list[tuple[str, str]],
    dropped: dict[str, list[str] | None],
) -> set[str]:
    """The files outside ``changing`` (changed, added or removed) whose de-duplication outcome can change.

    A chunk is kept in the first file, in path order, that has its text. A file left alone changes outcome only
    when (a) a chunk it dropped was kept by a changing file and no changed file before it has that chunk now
    (the copy it deferred to may be gone), or (b) a chunk it kept is now also in a changed file earlier in path
    order (which keeps it instead). Nothing else can change: a file chunked again for (a) only keeps what a
    changing file held, and one chunked again for (b) only drops. Short keys err one way: a file is chunked again
    for nothing, never left alone wrongly.

    :param keys: every stored (kept) chunk's (path, key), before the changes.
    :param new_keys: the changed and added files' chunks' (path, key).
    :param dropped: the short keys each file dropped (None: not recorded, so the file is affected).
    """
    first: dict[str, str] = {}  # each changed file's key: the first path that has it
    for path, key in new_keys:
        if key not in first or path < first[key]:
            first[key] = path
    first_short: dict[str, str] = {}
    collided: set[str] = set()  # two keys with one short key: neither is taken to be held before any file
    for key, path in first.items():
        short = key[:SHORT_KEY]
        if short in first_short:
            collided.add(short)
        first_short[short] = path
    for short in collided:
        del first_short[short]
    held = {key[:SHORT_KEY] for path, key in keys if path in changing}
    affected = {
        path
        for path, lost in dropped.items()
        if path not in changing
        and (lost is None or any(key in held and first_short.get(key, path) >= path for key in lost))
    }
    affected.update(path for path, key in keys if path not in changing and key in first and first[key] < path)
    return affected


def text_key(text: str) -> str:
    """A chunk's de-duplication key: the hash of its text case-folded, with white space collapsed."""
    return hashlib.sha256(" ".join(text.casefold().split()).encode("utf-8")).hexdigest()


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
    import numpy as np

    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return (array / norm if norm else array).astype(np.float32).tobytes()


def _embed_in_a_loop_of_its_own(embedder: Embedder, texts: Sequence[str]) -> list[tuple[float, ...]]:
    """``embedder.embed(texts)`` run to its end by ``asyncio.run`` (in a worker thread). The coroutine is made here,
    in the thread: made by the caller, it would never be awaited when the caller is cancelled before the thread
    starts (``RuntimeWarning: coroutine … was never awaited``)."""
    return asyncio.run(embedder.embed(texts))


def _warm_up(embedder: Embedder) -> None:
    """Import numpy and have ``embedder`` embed a query (loading its model), by ``asyncio.run`` in a worker thread
    (see the function above)."""
    import numpy  # noqa: F401 - imported here, not on the caller's loop

    asyncio.run(embedder.embed_query("warm up"))
