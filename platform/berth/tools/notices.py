""":class:`ToolNotice`: a tool call that ends with a notice the model reads (a stable code and a message), not with a
result. The runtime's own tools raise it, and so do the host's limits on tools (a bundle's tool threads all stuck)."""

from __future__ import annotations

__all__ = ["ToolNotice"]


class ToolNotice(Exception):  # noqa: N818 - a notice the model sees, not an error of the host
    """A tool failure the model should see as a ``react.notice`` with a stable code."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")
