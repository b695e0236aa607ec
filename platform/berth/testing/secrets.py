"""Known secret values for a test: a registry holding only the values a test names, the process's own put back after.

The values revealed secrets register (:mod:`berth.config.redaction`) are masked process-wide for the rest of the
process; a test that registers made-up values (a property test registers hundreds) uses :func:`only_registered`
so that they mask nothing in the tests that run after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from berth.config import redaction

__all__ = ["only_registered"]


@contextmanager
def only_registered(*values: str) -> Iterator[None]:
    """Within the block, the known secret values are ``values`` and those registered inside it; none after."""
    saved = (redaction._values, redaction._ordered, redaction._needles)
    redaction._values, redaction._ordered, redaction._needles = set(), (), ()
    try:
        for value in values:
            redaction.register_secret_value(value)
        yield
    finally:
        redaction._values, redaction._ordered, redaction._needles = saved
