"""The tool call being run, as a tool sees it: which turn and call, and a key to de-duplicate a re-run by.

A turn's tool calls are at least once: when the worker running a turn dies, another one resumes the turn after
its last logged round, and the call that was open when it died runs again (a call whose result was logged never
does). A tool with a side effect outside Berth (a payment, an e-mail, a ticket) reads :func:`current_call` and
hands its :attr:`ToolCall.idempotency_key` to the system it changes, or records it itself, so the re-run of the
same call is recognised::

    from berth import current_call, tool

    @tool
    def open_ticket(title: str) -> str:
        \"\"\"Open a ticket.\"\"\"
        return tickets.create(title, idempotency_key=current_call().idempotency_key)

The key is the same in every attempt of one call (the call ids of a resumed turn go on from its log, never
again from ``c1``) and different for every other call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["ToolCall", "calling", "current_call"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The call a tool runs in: its turn, its call id (``c1``, ``c2``, …) and their scope."""

    tenant: str
    project: str
    conversation_id: str
    turn_id: str
    call_id: str

    @property
    def idempotency_key(self) -> str:
        """``<turn id>.<call id>``: the same in every attempt of this call, unique among calls."""
        return f"{self.turn_id}.{self.call_id}"


_current: ContextVar[ToolCall | None] = ContextVar("berth_tool_call", default=None)


def current_call() -> ToolCall:
    """The call the running tool was invoked for (in a sync tool's thread and an async tool's loop alike).

    :raises LookupError: outside a tool call of a turn (a tool called directly, in a unit test).
    """
    call = _current.get()
    if call is None:
        raise LookupError("no tool call is running: current_call() is only known inside a turn's tool call")
    return call


@contextmanager
def calling(call: ToolCall) -> Iterator[None]:
    """Make ``call`` what :func:`current_call` returns while the ``with`` body runs (the runtime's side)."""
    token = _current.set(call)
    try:
        yield
    finally:
        _current.reset(token)
