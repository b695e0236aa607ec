"""How ``berth chat`` shows a conversation: the answer as it streams, tool lines, notices, follow-ups, the prompt.

Two views share one interface. On a terminal, :class:`RichView` renders the answer as markdown with ``rich`` while
it streams (a live region re-rendered as text arrives, then printed once more in full) and marks each tool call ok or
failed when its result comes. Piped or redirected, :class:`PlainView` prints the answer's text as it arrives and one
plain line per event, which scripts and logs read.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

import click

__all__ = ["HELP", "ChatView", "PlainView", "RichView", "chat_view"]

HELP = """Commands (anything else is sent to the bundle):
  /help          this list
  /new           start a new conversation with the same bundle
  /bundle NAME   start a new conversation with bundle NAME
  /quit          leave (also /exit, or end of input)
  N              send follow-up suggestion number N of the last answer
  //text         send "/text" as a message
While an answer streams, a typed line goes to the running turn as a follow-up; "/steer TEXT" steers it."""


class ChatView(Protocol):
    """What the chat tells the user."""

    def answer_delta(self, text: str) -> None:
        """A piece of the answer, as it streams."""
        ...

    def answer_end(self) -> None:
        """The answer is complete (or the turn ended without one)."""
        ...

    def tool_call(self, call_id: str, tool_id: str) -> None:
        """A tool call began."""
        ...

    def tool_result(self, call_id: str, tool_id: str, ok: bool, summary: str) -> None:
        """A tool call ended: ``ok`` or failed, with the result's summary (or the error)."""
        ...

    def note(self, text: str, *, tone: str = "dim") -> None:
        """A quiet line: a notice, a live event taken, the title (``tone``: dim, live, ok, error)."""
        ...

    def followups(self, suggestions: list[str]) -> None:
        """The answer's follow-up suggestions, numbered from 1."""
        ...

    def failed(self, code: str, message: str) -> None:
        """The turn failed."""
        ...

    def prompt(self) -> None:
        """Show that the chat waits for the next message."""
        ...


_TONES: dict[str, dict[str, Any]] = {
    "dim": {"dim": True},
    "live": {"fg": "yellow"},
    "ok": {"fg": "green"},
    "error": {"fg": "red"},
}


class PlainView:
    """Plain lines, for pipes and files: the answer on stdout, everything else on stderr."""

    def __init__(self, *, prompts: bool = False) -> None:
        self._prompts = prompts
        self._tools: dict[str, str] = {}

    def answer_delta(self, text: str) -> None:
        """Print the piece as it comes."""
        click.echo(text, nl=False)

    def answer_end(self) -> None:
        """End the answer's line."""
        click.echo()

    def tool_call(self, call_id: str, tool_id: str) -> None:
        """``· tool_id``."""
        self._tools[call_id] = tool_id
        click.secho(f"  · {tool_id}", fg="cyan", err=True)

    def tool_result(self, call_id: str, tool_id: str, ok: bool, summary: str) -> None:
        """``✓ tool_id`` or ``✗ tool_id: error``."""
        if ok:
            click.secho(f"  ✓ {tool_id}", fg="green", err=True)
        else:
            click.secho(f"  ✗ {tool_id}: {summary}", fg="red", err=True)

    def note(self, text: str, *, tone: str = "dim") -> None:
        """The line, in its tone."""
        click.secho(f"  {text}", err=True, **_TONES.get(tone, {}))

    def followups(self, suggestions: list[str]) -> None:
        """``1. …`` per suggestion."""
        for number, suggestion in enumerate(suggestions, 1):
            click.secho(f"  {number}. {suggestion}", fg="green")

    def failed(self, code: str, message: str) -> None:
        """``turn failed [code]: message``."""
        click.secho(f"turn failed [{code}]: {message}", fg="red", err=True)

    def prompt(self) -> None:
        """``> `` on an interactive terminal (the answer's text comes on stdout, so does the prompt)."""
        if self._prompts:
            click.echo("> ", nl=False)


class RichView:
    """A terminal's view: the answer rendered as markdown while it streams, tool calls marked ok or failed."""

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console

        self._console = console or Console(highlight=False)
        self._answer = ""
        self._live: Any = None
        self._tools: dict[str, str] = {}

    def answer_delta(self, text: str) -> None:
        """Add the piece and re-render the answer so far (at most a few times a second)."""
        from rich.live import Live
        from rich.markdown import Markdown

        self._answer += text
        if self._live is None:
            self._live = Live(Markdown(self._answer), console=self._console, refresh_per_second=8, transient=False)
            self._live.start()
        else:
            self._live.update(Markdown(self._answer))

    def answer_end(self) -> None:
        """Render the whole answer one last time and leave the live region."""
        from rich.markdown import Markdown

        if self._live is not None:
            self._live.update(Markdown(self._answer), refresh=True)
            self._live.stop()
        self._live = None
        self._answer = ""

    def _pause_answer(self) -> None:
        """Leave the live region before printing a line of its own (a tool line, a notice)."""
        if self._live is not None:
            self._live.stop()
            self._live = None
            self._answer = ""

    def tool_call(self, call_id: str, tool_id: str) -> None:
        """``· tool_id …`` until its result comes."""
        self._pause_answer()
        self._tools[call_id] = tool_id
        self._console.print(f"  [cyan]·[/] {_escape(tool_id)} …")

    def tool_result(self, call_id: str, tool_id: str, ok: bool, summary: str) -> None:
        """``✓ tool_id`` in green, or ``✗ tool_id: error`` in red."""
        self._pause_answer()
        self._tools.pop(call_id, None)
        if ok:
            self._console.print(f"  [green]✓[/] {_escape(tool_id)}")
        else:
            self._console.print(f"  [red]✗ {_escape(tool_id)}[/]: {_escape(summary)}")

    def note(self, text: str, *, tone: str = "dim") -> None:
        """The line, in its tone."""
        self._pause_answer()
        style = {"dim": "dim", "live": "yellow", "ok": "green", "error": "red"}.get(tone, "dim")
        self._console.print(f"  {_escape(text)}", style=style)

    def followups(self, suggestions: list[str]) -> None:
        """``1. …`` per suggestion, to pick by number."""
        for number, suggestion in enumerate(suggestions, 1):
            self._console.print(f"  [green]{number}.[/] {_escape(suggestion)}")

    def failed(self, code: str, message: str) -> None:
        """``turn failed [code]: message`` in red."""
        self._pause_answer()
        self._console.print(f"turn failed [{_escape(code)}]: {_escape(message)}", style="red", markup=False)

    def prompt(self) -> None:
        """``> `` (bold), then the cursor waits after it."""
        self._console.print("[bold]>[/] ", end="")


def _escape(text: str) -> str:
    from rich.markup import escape

    return str(escape(text))


def chat_view(*, interactive: bool | None = None) -> ChatView:
    """The view for this process: :class:`RichView` when stdout is a terminal, else :class:`PlainView`."""
    terminal = sys.stdout.isatty() if interactive is None else interactive
    return RichView() if terminal else PlainView(prompts=False)
