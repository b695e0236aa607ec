"""The failures the ``web`` tools report, as tool results with stable codes (never exceptions)."""

from __future__ import annotations

from typing import Any, Final

from berth.tools.results import ToolOutput

INVALID_URL: Final = "invalid_url"
UNSAFE_URL: Final = "unsafe_url"
FETCH_TIMEOUT: Final = "fetch_timeout"
FETCH_TOO_LARGE: Final = "fetch_too_large"
FETCH_HTTP_ERROR: Final = "fetch_http_error"
FETCH_TOO_MANY_REDIRECTS: Final = "fetch_too_many_redirects"
FETCH_UNREACHABLE: Final = "fetch_unreachable"
FETCH_FAILED: Final = "fetch_failed"
UNSUPPORTED_CONTENT: Final = "unsupported_content"
SEARCH_TIMEOUT: Final = "search_timeout"
SEARCH_FAILED: Final = "search_failed"


class WebToolError(Exception):
    """A failure with a stable ``code`` and a message for the model; the tools turn it into a result."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        self.code = code
        self.message = message
        self.details = details
        super().__init__(message)

    def to_output(self) -> ToolOutput:
        """The failure as ``ToolOutput(is_error=True, value={code, message, ...details})``."""
        return ToolOutput(is_error=True, value={"code": self.code, "message": self.message, **self.details})
