"""Structured JSON logs with the ids that matter (tenant, project, conversation, turn, bundle), secrets masked.

``configure_logging()`` installs one stderr handler that writes a JSON object per line. The ids of the
work in progress come from :data:`log_context` (a context variable the API sets around each turn), so
every record a turn produces — in the runtime, a tool, a bundle — carries them without passing loggers.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from berth.config.redaction import SecretRedactingFilter

CONTEXT_FIELDS = ("tenant", "project", "conversation", "turn", "bundle", "generation")

log_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("berth_log_context", default=None)
"""The ids of the current unit of work (set with :func:`bound`)."""


@contextlib.contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Add ``fields`` to every log record made inside the block (in this task and the ones it starts)."""
    token = log_context.set({**(log_context.get() or {}), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        log_context.reset(token)


class ContextFilter(logging.Filter):
    """Copies :data:`log_context` onto each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Add the bound ids (never overriding ``extra`` the caller gave)."""
        for key, value in (log_context.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC), level, logger, message, the context ids, exception text."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record``."""
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(level: str = "INFO", *, stream: Any = None) -> logging.Handler:
    """Send every ``berth`` (and uvicorn) record to ``stream`` (stderr) as JSON lines; return the handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    handler.addFilter(SecretRedactingFilter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        if isinstance(existing.formatter, JsonFormatter):
            root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
