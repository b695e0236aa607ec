"""A process-wide record of revealed secret values, and a logging filter that masks them.

Every value the secret resolver hands out is registered here, so a log line that contains one by
accident (an f-string, an exception from a library that echoes its input) is scrubbed before it is
written. This is a second line of defence behind :class:`berth.config.secrets.Secret`, whose
``str``/``repr`` never show the value.
"""

from __future__ import annotations

import logging
import threading

MASK = "***"
_MIN_LENGTH = 4  # shorter values would mask ordinary words and digits

_lock = threading.Lock()
_values: set[str] = set()


def register_secret_value(value: str) -> None:
    """Remember ``value`` so that :func:`redact` masks it from now on."""
    if len(value) >= _MIN_LENGTH:
        with _lock:
            _values.add(value)


def redact(text: str) -> str:
    """Return ``text`` with every registered secret value replaced by ``***`` (longest first)."""
    with _lock:
        values = sorted(_values, key=len, reverse=True)
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return text


class SecretRedactingFilter(logging.Filter):
    """A logging filter that masks registered secret values in the rendered message and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite ``record`` in place with secrets masked; never drops a record."""
        if not _values:
            return True
        message = record.getMessage()
        record.msg = redact(message)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            formatted = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact(formatted)
            record.exc_info = None
        return True


def install_redaction(logger: logging.Logger | None = None) -> None:
    """Attach :class:`SecretRedactingFilter` to every handler of ``logger`` (the root by default)."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, SecretRedactingFilter) for f in handler.filters):
            handler.addFilter(SecretRedactingFilter())
