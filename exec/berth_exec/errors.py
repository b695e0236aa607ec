"""The error a program sees when a tool call does not give a result."""

from __future__ import annotations


class ToolCallError(Exception):
    """The supervisor refused or the tool failed; ``code`` is stable, ``message`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message
