"""The ``Content-Disposition`` header of a download: any file name, in the form every client reads (RFC 6266).

A header value is Latin-1 on the wire, and a quoted file name cannot hold every character either: a name such as
``Отчёт.txt`` (or ``報告.pdf``, or one with U+202E) made the header unencodable, and ``"`` or ``\\`` in a name broke
its quoting. The header this module writes is ASCII whatever the name: the name itself, percent-encoded as UTF-8
(``filename*=UTF-8''…``, RFC 5987), and an ASCII stand-in for clients that read only ``filename``.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import quote

__all__ = ["content_disposition"]

_QUOTABLE = frozenset(chr(code) for code in range(0x20, 0x7F)) - {'"', "\\"}
"""What a quoted ``filename`` holds as it is: printable ASCII but the quote and the backslash."""


def content_disposition(filename: str, disposition: Literal["inline", "attachment"] = "attachment") -> str:
    """``attachment; filename="name"``, with ``filename*=UTF-8''…`` too when ``filename`` is not plain ASCII.

    The plain ``filename`` then holds the name with each character a quoted string cannot hold (non-ASCII,
    control characters, ``"`` and ``\\``) replaced by ``_``; clients that read ``filename*`` (every current
    browser and HTTP library) get the name itself. A lone surrogate, which UTF-8 cannot encode, becomes ``?``.
    """
    fallback = "".join(char if char in _QUOTABLE else "_" for char in filename)
    header = f'{disposition}; filename="{fallback}"'
    if fallback != filename:
        header += "; filename*=UTF-8''" + quote(filename.encode("utf-8", errors="replace"), safe="")
    return header
