"""What generated code imports to call the bundle's tools: ``from berth_exec import tools``.

::

    from berth_exec import tools

    page = tools.call("web.fetch", url="https://example.org")      # blocks until the supervisor answers
    page = await tools.acall("web.fetch", url="https://example.org")  # the same, for async code
    text = tools.read("fi:turn_3.files/report.md")                 # a logical path, read by the supervisor

Every call travels to the supervisor over the run's Unix socket with the run's token; the supervisor checks both,
allows only the bundle's own tools and answers with the tool's result or a :class:`ToolCallError` whose ``code``
says what went wrong (``tool_not_allowed``, ``tool_timeout``, ``tool_failed``, ``unauthorized`` …).
"""

from __future__ import annotations

from berth_exec.environment import SOCKET_VARIABLE, supervisor_socket_path
from berth_exec.errors import ToolCallError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~2 ms of a program's start-up)

if TYPE_CHECKING:  # at run time only annotations name these: a program's start-up stays lean
    from typing import Any

    from berth_exec.client import SupervisorClient

__all__ = ["SOCKET_VARIABLE", "SupervisorClient", "ToolCallError", "acall", "call", "configure", "read"]

_target: tuple[str, str] | None = None
_client: SupervisorClient | None = None


def configure(socket_path: str, token: str) -> None:
    """Point this module at a supervisor (the executor bootstrap does it before the program runs).

    Nothing connects, and nothing more is imported, until the program's first call.
    """
    global _client, _target
    if _client is not None:
        _client.close()
    _client, _target = None, (socket_path, token)


def _current() -> SupervisorClient:
    global _client
    if _client is None:
        if _target is None:
            path = supervisor_socket_path()
            raise ToolCallError(
                "not_in_sandbox",
                "berth_exec.tools is not connected: programs calling tools must run through exec.python"
                + (f" (a socket is named at {path}, but no token was given)" if path else ""),
            )
        from berth_exec.client import SupervisorClient

        _client = SupervisorClient(*_target)
    return _client


def __getattr__(name: str) -> Any:
    """``SupervisorClient`` is importable from here, but loaded only when asked for."""
    if name == "SupervisorClient":
        from berth_exec.client import SupervisorClient

        return SupervisorClient
    raise AttributeError(f"module 'berth_exec.tools' has no attribute {name!r}")


def call(tool_id: str, /, **params: Any) -> Any:
    """Call the bundle's tool ``tool_id`` with ``params`` and return its result (JSON: text, dict or list)."""
    return _current().request({"op": "call", "tool_id": tool_id, "params": params})


async def acall(tool_id: str, /, **params: Any) -> Any:
    """:func:`call` for async code: runs in a thread, so other tasks of the program go on meanwhile."""
    import asyncio  # here, not at the top: importing asyncio costs a program that never uses it ~30 ms

    return await asyncio.to_thread(call, tool_id, **params)


def read(path: str) -> str:
    """The text behind a logical path (``fi:…``, ``so:…``, ``ar:…``) as ``react.read`` would give it."""
    result = _current().request({"op": "read", "path": path})
    return str(result)
