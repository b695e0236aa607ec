"""Attachments: size caps from ``gateway.yaml``, content type by sniffing (never the client's header),
macro-enabled Office files refused, zip bombs refused, and with ``attachments.antivirus`` every file scanned by
clamd before anything of the request is stored."""

from __future__ import annotations

import asyncio
import codecs
import fnmatch
import io
import logging
import re
import zipfile
from collections.abc import Sequence

import filetype

from berth.config.models.gateway import AntivirusConfig, AttachmentsConfig
from berth.gateway.antivirus import AntivirusUnavailableError, ClamdScanner
from berth.runtime.paths import LogicalPathError, parse_path
from berth.runtime.workspace import WorkspaceError, safe_relative_path
from berth.turns.errors import ServiceError

log = logging.getLogger(__name__)

_UNSAFE_IN_NAMES = re.compile(r"[/\\\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Slashes, backslashes and the control characters a logical path refuses (:mod:`berth.runtime.paths`)."""


SNIFF_BYTES = 65_536
"""How much of a file :func:`sniff_mime` reads: magic numbers are at the start, and UTF-8 text shows in this much."""


def sniff_mime(data: bytes, *, complete: bool = True) -> str:
    """The content type the bytes themselves show (magic numbers; UTF-8 text without NUL is text/plain). ``data``
    may be the whole file or (``complete=False``) its start; only the first :data:`SNIFF_BYTES` are read, and a
    character cut at their end does not make text binary."""
    kind = filetype.guess(data)
    if kind is not None:
        return str(kind.mime)
    if b"\x00" not in data[:8192]:
        head = data[:SNIFF_BYTES]
        final = complete and len(data) <= SNIFF_BYTES
        try:
            codecs.getincrementaldecoder("utf-8")().decode(head, final=final)
        except UnicodeDecodeError:
            pass
        else:
            return "text/plain"
    return "application/octet-stream"


def _check_zip(name: str, data: bytes, config: AttachmentsConfig) -> None:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise ServiceError(415, "attachment_corrupt", f"{name}: not a valid zip-based document") from None
    entries = archive.infolist()
    if len(entries) > config.zip.max_entries:
        raise ServiceError(
            413, "attachment_zip_entries", f"{name}: {len(entries)} entries (limit {config.zip.max_entries})"
        )
    total = sum(entry.file_size for entry in entries)
    if total > config.zip.max_total_bytes or (data and total / len(data) > config.zip.max_ratio):
        raise ServiceError(413, "attachment_zip_bomb", f"{name}: expands to {total} bytes; refused")
    if config.reject_macros and any(entry.filename.lower().endswith("vbaproject.bin") for entry in entries):
        raise ServiceError(415, "attachment_macros", f"{name}: documents with macros are not accepted")


def check_attachment(name: str, data: bytes, config: AttachmentsConfig) -> tuple[str, str]:
    """Validate one attachment; return its safe file name and sniffed content type.

    Slashes, backslashes and control characters in the name become ``_``; a name that still makes no file path
    (``..``, longer than a logical path may be) is refused: 400 ``attachment_name``.
    """
    cleaned = _UNSAFE_IN_NAMES.sub("_", name) or "attachment"
    try:
        safe_name = safe_relative_path(cleaned)
        parse_path(f"fi:turn_0.attachments/{safe_name}")  # the name makes the attachment's logical path
    except (WorkspaceError, LogicalPathError):
        raise ServiceError(400, "attachment_name", f"attachment name {name!r} is not usable") from None
    if len(data) > config.max_file_bytes:
        raise ServiceError(
            413, "attachment_too_large", f"{safe_name}: {len(data)} bytes (limit {config.max_file_bytes})"
        )
    mime = sniff_mime(data)
    if not any(fnmatch.fnmatchcase(mime, pattern) for pattern in config.allowed_mime):
        raise ServiceError(415, "attachment_type", f"{safe_name}: content is {mime}, which is not accepted")
    if mime.startswith("application/vnd.openxmlformats-officedocument") or mime == "application/zip":
        _check_zip(safe_name, data, config)
    return safe_name, mime


async def scan_attachments(files: Sequence[tuple[str, str, bytes]], config: AntivirusConfig) -> None:
    """Scan every file with clamd: an infected one refuses the request (422 ``attachment_infected``, naming the
    file and the signature); clamd unreachable refuses it (503 ``antivirus_unavailable``) unless ``on_error:
    accept``, which lets the files in unscanned and logs a WARNING."""
    scanner = ClamdScanner(config.clamd, timeout_s=config.timeout_s)
    outcomes = await asyncio.gather(*(scanner.scan(data) for _, _, data in files), return_exceptions=True)
    for (name, _, _), outcome in zip(files, outcomes, strict=True):
        if isinstance(outcome, AntivirusUnavailableError):
            if config.on_error == "accept":
                log.warning("attachment %s accepted unscanned (antivirus.on_error: accept): %s", name, outcome)
                continue
            log.warning("attachment %s refused: it could not be scanned: %s", name, outcome)
            raise ServiceError(
                503,
                "antivirus_unavailable",
                "attachments cannot be scanned for viruses right now; nothing was stored, try again later",
                headers={"Retry-After": "30"},
            )
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome.infected:
            log.warning("attachment %s refused: clamd found %s", name, outcome.signature)
            raise ServiceError(
                422,
                "attachment_infected",
                f"{name}: {outcome.signature} found; nothing was stored",
                details={"name": name, "signature": outcome.signature},
            )
