"""Fenced code blocks in streamed markdown: decides whether a closing tag ends a channel.

In ``markdown`` and ``text`` channels a ``</channel:NAME>`` inside a fenced code block is text (the
model is showing the protocol, not using it). :class:`FenceTracker` follows CommonMark's fence rules
over text fed in pieces of any size, without looking back:

* a fence opens on a line of at most 3 spaces of indentation and a run of at least 3 backticks or
  tildes; a backtick fence's info string may not contain a backtick. It takes effect at the end of
  that line, so a closing tag on the opening line itself still ends the channel;
* it closes on a line with at most 3 spaces, a run of the same character at least as long as the
  opening run, and nothing but spaces or tabs after it.

One extension: a closing fence directly followed by the channel's closing tag (````</channel:x>``)
closes the fence and ends the channel — models often write it so.
"""

from __future__ import annotations

_LINE_START = 0  # reading the indentation and the fence-character run at the start of a line
_MID_LINE = 1  # an ordinary line: nothing matters until the next newline
_OPENING_LINE = 2  # the rest of a line that opens a fence (its info string)
_CLOSING_LINE = 3  # after a run that may close the open fence: only blanks may follow


class FenceTracker:
    """Follows whether streamed markdown is inside a fenced code block.

    Feed it every character of a channel's content, in order, in pieces of any size; ask
    :meth:`tag_is_boundary` when a closing tag starts right after the text fed so far.
    """

    __slots__ = (
        "_fence_char",
        "_fence_len",
        "_indent",
        "_opening_char",
        "_opening_len",
        "_run_char",
        "_run_len",
        "_state",
    )

    def __init__(self) -> None:
        self._state = _LINE_START
        self._indent = 0
        self._run_char = ""
        self._run_len = 0
        self._opening_char = ""
        self._opening_len = 0
        self._fence_char = ""  # "" while outside a fence
        self._fence_len = 0

    @property
    def in_fence(self) -> bool:
        """Whether the text fed so far ends inside a fenced code block."""
        return self._fence_char != ""

    def tag_is_boundary(self) -> bool:
        """Whether a closing tag starting right after the text fed so far ends the channel."""
        if not self._fence_char or self._state == _CLOSING_LINE:
            return True
        return self._state == _LINE_START and self._run_char == self._fence_char and self._run_len >= self._fence_len

    def feed(self, text: str) -> None:
        """Advance over ``text``, the next piece of the channel's content."""
        pos = 0
        end = len(text)
        while pos < end:
            state = self._state
            if state == _MID_LINE:
                newline = text.find("\n", pos)
                if newline < 0:
                    return
                pos = newline + 1
                self._start_line()
            elif state == _LINE_START:
                char = text[pos]
                if char == " " and self._run_len == 0 and self._indent < 3:
                    self._indent += 1
                    pos += 1
                elif (char == "`" or char == "~") and (self._run_len == 0 or char == self._run_char):
                    self._run_char = char
                    self._run_len += 1
                    pos += 1
                else:
                    self._end_run()  # decides what this line is; ``char`` is read in the new state
            elif state == _OPENING_LINE:
                newline = text.find("\n", pos)
                line_end = end if newline < 0 else newline
                if self._opening_char == "`" and text.find("`", pos, line_end) >= 0:
                    self._state = _MID_LINE  # a backtick in the info string: inline code, not a fence
                    continue
                if newline < 0:
                    return
                self._fence_char = self._opening_char
                self._fence_len = self._opening_len
                pos = newline + 1
                self._start_line()
            else:  # _CLOSING_LINE
                char = text[pos]
                if char == " " or char == "\t" or char == "\r":
                    pos += 1
                elif char == "\n":
                    self._fence_char = ""
                    self._fence_len = 0
                    pos += 1
                    self._start_line()
                else:
                    self._state = _MID_LINE

    def _start_line(self) -> None:
        self._state = _LINE_START
        self._indent = 0
        self._run_char = ""
        self._run_len = 0

    def _end_run(self) -> None:
        if not self._fence_char:
            if self._run_len >= 3:
                self._state = _OPENING_LINE
                self._opening_char = self._run_char
                self._opening_len = self._run_len
            else:
                self._state = _MID_LINE
        elif self._run_char == self._fence_char and self._run_len >= self._fence_len:
            self._state = _CLOSING_LINE
        else:
            self._state = _MID_LINE
