"""A process-wide record of revealed secret values, and what masks them: a logging filter and text/JSON helpers.

Every value the secret resolver hands out is registered here, so a log line that contains one by
accident (an f-string, an exception from a library that echoes its input) is scrubbed before it is
written. This is a second line of defence behind :class:`berth.config.secrets.Secret`, whose
``str``/``repr`` never show the value. The same record masks what a tool returns or raises before the
turn keeps it (:func:`redact`, :func:`redact_value`), and every event frame before it is sent
(:func:`holds_secret`, checked on the encoded frame).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

MASK = "***"
_MIN_LENGTH = 4  # shorter values would mask ordinary words and digits

_lock = threading.Lock()
_values: set[str] = set()
_ordered: tuple[str, ...] = ()
"""The registered values, longest first: rebuilt when one is added, read without the lock (one reference)."""
_needles: tuple[str, ...] = ()
"""Each value as it may appear in JSON text: itself, and its escaped form when JSON escapes it."""


def register_secret_value(value: str) -> None:
    """Remember ``value`` so that :func:`redact` masks it from now on."""
    global _ordered, _needles
    if len(value) < _MIN_LENGTH:
        return
    with _lock:
        if value in _values:
            return
        _values.add(value)
        _ordered = tuple(sorted(_values, key=len, reverse=True))
        escaped = (json.dumps(v, ensure_ascii=False)[1:-1] for v in _ordered)
        _needles = tuple(dict.fromkeys(n for v, e in zip(_ordered, escaped, strict=True) for n in (v, e)))


def secret_needles() -> tuple[str, ...]:
    """Every registered value as it may appear in text or in JSON text (empty while none is registered)."""
    return _needles


def holds_secret(text: str) -> bool:
    """Whether ``text`` (plain or JSON text) contains a registered secret value.

    Cheap enough for a hot path: one substring search per value (a plain loop: a generator under ``any``
    costs several times the searches themselves), nothing while none is registered. An encoder checks its
    output and masks with :func:`redact_value` only when this finds one.
    """
    for needle in _needles:  # noqa: SIM110 - see above
        if needle in text:
            return True
    return False


def redact(text: str) -> str:
    """Return ``text`` with every registered secret value replaced by ``***`` (longest first).

    Masking can make a value anew (``x***`` in ``xx***``), so it goes on until none is left; each pass that
    masks one shortens the text (a value has at least four characters), so it ends.
    """
    masked = True
    while masked:
        masked = False
        for value in _ordered:
            if value in text:
                text = text.replace(value, MASK)
                masked = True
    return text


def redact_value(value: Any) -> Any:
    """``value`` (JSON-ready data: dicts, lists, strings, numbers) with registered secrets masked in every string.

    Keys are masked too; tuples become lists; any other object becomes its masked ``str``, as a JSON
    encoder with ``default=str`` would write it. Numbers are left alone (a secret of digits is not
    masked inside a JSON number).
    """
    if not _ordered:
        return value
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {(redact(k) if isinstance(k, str) else k): redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(item) for item in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact(str(value))


class SecretRedactingFilter(logging.Filter):
    """A logging filter that masks registered secret values in the rendered message and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite ``record`` in place with secrets masked; never drops a record."""
        if not _ordered:
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
