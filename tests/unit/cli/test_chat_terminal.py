"""``berth chat`` as a terminal app: run in a pseudo-terminal as a user would, its local commands, numbered
follow-ups, markdown rendered by rich, tool lines marked ok, and the prompt back after each answer."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from berth.cli.chat_session import LocalCommand, parse_line

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Z0-9]|\r")
WAIT_S = 60.0


class Terminal:
    """A process on a pseudo-terminal: type lines, read what it shows (ANSI sequences removed)."""

    def __init__(self, process: subprocess.Popen[bytes], master: int) -> None:
        self.process = process
        self.master = master
        self.shown = ""

    def type(self, line: str) -> None:
        os.write(self.master, f"{line}\n".encode())

    def read_until(self, pattern: str, *, start: int = 0) -> int:
        """Read until ``pattern`` (a regex) appears after offset ``start`` of what was shown; return where it
        ends. Fails after :data:`WAIT_S` with what was shown."""
        deadline = time.monotonic() + WAIT_S
        while True:
            found = re.search(pattern, self.shown[start:])
            if found:
                return start + found.end()
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"{pattern!r} not shown; the terminal shows:\n{self.shown[start:]}"
            ready, _, _ = select.select([self.master], [], [], remaining)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the process closed the terminal
                    chunk = b""
                assert chunk or re.search(pattern, self.shown[start:]), f"ended before {pattern!r}:\n{self.shown}"
                self.shown += ANSI.sub("", chunk.decode(errors="replace"))


@contextmanager
def terminal(*args: str, cwd: Path) -> Iterator[Terminal]:
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "40"}
    executable = Path(sys.executable).parent / "berth"
    process = subprocess.Popen(
        [str(executable), *args], stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, close_fds=True
    )
    os.close(slave)
    try:
        yield Terminal(process, master)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        os.close(master)


def test_the_chat_reads_like_a_terminal_app(tmp_path: Path) -> None:
    with terminal("chat", "--in-process", "--demo", "--bundle", "hello", cwd=tmp_path) as term:
        at = term.read_until(r"talking to hello")
        at = term.read_until(r"> ", start=at)

        term.type("/help")  # handled here: nothing reaches the model
        at = term.read_until(r"/bundle NAME.*\n(.*\n)*.*> ", start=at)
        assert "turn failed" not in term.shown

        term.type("hi")
        at = term.read_until(r"✓ hello\.greet", start=at)  # the tool line, marked ok when its result came
        answer_end = term.read_until(r"1\. What can this bundle do\?", start=at)
        answer = term.shown[at:answer_end]
        assert "**Hello!**" not in answer  # markdown rendered, not shown raw
        assert "Hello!" in answer
        at = term.read_until(r"> ", start=answer_end)  # the prompt is back after the answer

        term.type("1")  # the first follow-up suggestion, by its number
        at = term.read_until(r"✓ hello\.greet", start=at)
        at = term.read_until(r"What can this bundle do\?", start=at)
        at = term.read_until(r"> ", start=at)

        term.type("/bundle nowhere")
        at = term.read_until(r"cannot start a conversation: bundle 'nowhere' is not available", start=at)
        term.type("/new")
        at = term.read_until(r"new conversation with hello", start=at)
        term.type("/unheard-of")
        at = term.read_until(r"unknown command '/unheard-of'", start=at)

        term.type("/quit")
        assert term.process.wait(timeout=WAIT_S) == 0


def test_numbers_pick_a_follow_up_and_slash_lines_are_commands() -> None:
    followups = ["What can this bundle do?", "Show me another example"]
    assert parse_line("2", followups) == "Show me another example"
    assert parse_line(" 1 ", followups) == "What can this bundle do?"
    assert parse_line("3", followups) == "3"  # no such suggestion: sent as typed
    assert parse_line("/quit", followups) == LocalCommand("quit")
    assert parse_line("/exit", followups) == LocalCommand("quit")
    assert parse_line("/bundle docs-assistant", followups) == LocalCommand("bundle", "docs-assistant")
    assert parse_line("/bundle", followups) == LocalCommand("unknown", "/bundle")
    assert parse_line("/NEW", followups) == LocalCommand("new")
    assert parse_line("//etc/passwd is a path", followups) == "/etc/passwd is a path"


@given(st.text().filter(lambda text: not text.strip().startswith("/") and not text.strip().isdigit()))
def test_a_line_that_is_no_command_is_sent_as_typed(text: str) -> None:
    assert parse_line(text, ["a", "b"]) == text


@given(st.text(min_size=1).filter(lambda text: not text.startswith(" ")))
def test_a_doubled_slash_sends_the_line_with_one_slash(text: str) -> None:
    assert parse_line(f"//{text}", []) == f"/{text}".strip()


@given(st.sampled_from(["", " ", "\t"]), st.text().filter(lambda rest: not rest.startswith("/")))
def test_a_slash_line_is_always_a_command_never_a_message(indent: str, rest: str) -> None:
    assert isinstance(parse_line(f"{indent}/{rest}", ["a"]), LocalCommand)
