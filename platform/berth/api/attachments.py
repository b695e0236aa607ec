"""Attachments: size caps from ``gateway.yaml``, content type by sniffing (never the client's header),
macro-enabled Office files refused, zip bombs refused."""

from __future__ import annotations

import fnmatch
import io
import zipfile

import filetype

from berth.api.errors import ApiError
from berth.config.models.gateway import AttachmentsConfig
from berth.runtime.workspace import WorkspaceError, safe_relative_path


def sniff_mime(data: bytes) -> str:
    """The content type the bytes themselves show (magic numbers; UTF-8 text without NUL is text/plain)."""
    kind = filetype.guess(data)
    if kind is not None:
        return str(kind.mime)
    if b"\x00" not in data[:8192]:
        try:
            data[:65536].decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            return "text/plain"
    return "application/octet-stream"


def _check_zip(name: str, data: bytes, config: AttachmentsConfig) -> None:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise ApiError(415, "attachment_corrupt", f"{name}: not a valid zip-based document") from None
    entries = archive.infolist()
    if len(entries) > config.zip.max_entries:
        raise ApiError(
            413, "attachment_zip_entries", f"{name}: {len(entries)} entries (limit {config.zip.max_entries})"
        )
    total = sum(entry.file_size for entry in entries)
    if total > config.zip.max_total_bytes or (data and total / len(data) > config.zip.max_ratio):
        raise ApiError(413, "attachment_zip_bomb", f"{name}: expands to {total} bytes; refused")
    if config.reject_macros and any(entry.filename.lower().endswith("vbaproject.bin") for entry in entries):
        raise ApiError(415, "attachment_macros", f"{name}: documents with macros are not accepted")


def check_attachment(name: str, data: bytes, config: AttachmentsConfig) -> tuple[str, str]:
    """Validate one attachment; return its safe file name and sniffed content type."""
    try:
        safe_name = safe_relative_path(name.replace("/", "_").replace("\\", "_") or "attachment")
    except WorkspaceError:
        raise ApiError(400, "attachment_name", f"attachment name {name!r} is not usable") from None
    if len(data) > config.max_file_bytes:
        raise ApiError(413, "attachment_too_large", f"{safe_name}: {len(data)} bytes (limit {config.max_file_bytes})")
    mime = sniff_mime(data)
    if not any(fnmatch.fnmatchcase(mime, pattern) for pattern in config.allowed_mime):
        raise ApiError(415, "attachment_type", f"{safe_name}: content is {mime}, which is not accepted")
    if mime.startswith("application/vnd.openxmlformats-officedocument") or mime == "application/zip":
        _check_zip(safe_name, data, config)
    return safe_name, mime
