"""Composite JSON: stream the top-level fields of a JSON channel before the object closes.

For a channel declared ``format="json", composite=True`` the model writes one JSON object, e.g.
``{"title": "Q3 report", "body": "…long markdown…", "charts": [...]}``. :class:`CompositeJsonStreamer`
reads it as it arrives and yields, per top-level field:

* :class:`~berth.streaming.events.FieldDelta` pieces of a string value as they arrive, decoded
  (escapes resolved, surrogate pairs joined), so a long ``body`` renders progressively;
* :class:`~berth.streaming.events.FieldCompleted` with the parsed value as soon as the value is
  complete — a string at its closing quote, an object or array at its closing bracket, a number or
  literal at the delimiter after it (or at the end of the stream).

Text before the object's ``{`` may be blank lines or a code-fence line (````json``); anything else
there means the channel is not an object and nothing is streamed. Malformed JSON stops the field
stream quietly; the channel's result reports the parse error (:mod:`berth.streaming.results`).
Like the tag parser, the streamer never looks back and holds at most an incomplete escape.
"""

from __future__ import annotations

import json
import re

from pydantic import JsonValue

from berth.streaming.events import FieldCompleted, FieldDelta

_BEFORE_OBJECT = 0
_KEY_OR_END = 1
_KEY = 2
_COLON = 3
_VALUE = 4
_STRING = 5
_CONTAINER = 6
_SCALAR = 7
_AFTER_VALUE = 8
_DONE = 9  # the object closed, or the channel is not an object, or it is malformed

_BLANK = " \t\r\n"
_STRING_SPECIAL = re.compile(r'["\\]')
_CONTAINER_SPECIAL = re.compile(r'["{}\[\]]')
_SCALAR_END = re.compile(r"[\s,}\]]")
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_LOW_SURROGATE = re.compile(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_LOW_SURROGATE_PREFIX = re.compile(r"(?:\\(?:u(?:[dD](?:[c-fC-F][0-9a-fA-F]{0,2})?)?)?)?\Z")
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}

FieldEvent = FieldDelta | FieldCompleted


class CompositeJsonStreamer:
    """Streams the top-level fields of one JSON channel instance (see the module docstring).

    :meth:`feed` takes the channel's raw content in pieces of any size and returns the field
    events they completed; :meth:`finish` is called once when the instance closes.
    """

    __slots__ = (
        "_channel",
        "_depth",
        "_field",
        "_in_string",
        "_instance",
        "_marker",
        "_parts",
        "_skipping_line",
        "_state",
        "_tail",
    )

    def __init__(self, channel: str, instance: int, marker: str) -> None:
        self._channel = channel
        self._instance = instance
        self._marker = marker
        self._state = _BEFORE_OBJECT
        self._tail = ""  # an escape sequence cut by the end of a piece
        self._skipping_line = False
        self._field = ""
        self._parts: list[str] = []  # the key, or the value so far (decoded string / raw JSON)
        self._depth = 0
        self._in_string = False

    @property
    def done(self) -> bool:
        """Whether the object has closed (or the field stream has stopped)."""
        return self._state == _DONE

    def feed(self, text: str) -> list[FieldEvent]:
        """Read the next piece of the channel's raw content; return the field events it completed."""
        events: list[FieldEvent] = []
        if self._state == _DONE:
            return events
        buf = self._tail + text if self._tail else text
        self._tail = ""
        pos = 0
        end = len(buf)
        while pos < end and self._state != _DONE:
            state = self._state
            if state == _STRING:
                pos = self._read_string(buf, pos, events)
            elif state == _CONTAINER:
                pos = self._read_container(buf, pos, events)
            elif state == _SCALAR:
                pos = self._read_scalar(buf, pos, events)
            elif state == _KEY:
                pos = self._read_key(buf, pos)
            elif state == _BEFORE_OBJECT:
                pos = self._read_preamble(buf, pos)
            else:
                pos = self._read_punctuation(buf, pos)
        return events

    def finish(self) -> list[FieldEvent]:
        """End of the instance: a number or literal still being read is complete now."""
        events: list[FieldEvent] = []
        if self._state == _SCALAR and self._parts:
            self._complete_scalar(events)
        self._state = _DONE
        return events

    # -- states ------------------------------------------------------------------------------

    def _read_preamble(self, buf: str, pos: int) -> int:
        end = len(buf)
        while pos < end:
            if self._skipping_line:
                newline = buf.find("\n", pos)
                if newline < 0:
                    return end
                self._skipping_line = False
                pos = newline + 1
                continue
            char = buf[pos]
            if char in _BLANK:
                pos += 1
            elif char == "{":
                self._state = _KEY_OR_END
                return pos + 1
            elif char == "`":
                self._skipping_line = True  # a ```json fence line before the object
            else:
                self._state = _DONE  # not an object: nothing to stream
                return end
        return end

    def _read_punctuation(self, buf: str, pos: int) -> int:
        """Blanks and the single structural character the current state expects."""
        end = len(buf)
        while pos < end and buf[pos] in _BLANK:
            pos += 1
        if pos == end:
            return end
        char = buf[pos]
        state = self._state
        if state == _KEY_OR_END:
            if char == '"':
                self._state = _KEY
                self._parts = []
            elif char == "}":
                self._state = _DONE
            else:
                self._state = _DONE  # malformed
            return pos + 1
        if state == _COLON:
            self._state = _VALUE if char == ":" else _DONE
            return pos + 1
        if state == _AFTER_VALUE:
            self._state = _KEY_OR_END if char == "," else _DONE
            return pos + 1
        # _VALUE: the first character decides the kind of value
        self._parts = []
        if char == '"':
            self._state = _STRING
            return pos + 1
        if char == "{" or char == "[":
            self._state = _CONTAINER
            self._depth = 1
            self._in_string = False
            self._parts.append(char)
            return pos + 1
        self._state = _SCALAR
        return pos

    def _read_key(self, buf: str, pos: int) -> int:
        end = len(buf)
        while (match := _STRING_SPECIAL.search(buf, pos)) is not None:
            special = match.start()
            if buf[special] == '"':
                self._parts.append(buf[pos:special])
                try:
                    self._field = json.loads('"' + "".join(self._parts) + '"', strict=False)
                except ValueError:
                    self._state = _DONE
                    return end
                self._state = _COLON
                return special + 1
            escape_len = 6 if buf.startswith("u", special + 1) else 2
            if special + escape_len > end:
                self._parts.append(buf[pos:special])
                self._tail = buf[special:]
                return end
            self._parts.append(buf[pos : special + escape_len])
            pos = special + escape_len
        self._parts.append(buf[pos:])
        return end

    def _read_string(self, buf: str, pos: int, events: list[FieldEvent]) -> int:
        end = len(buf)
        decoded: list[str] = []
        closed = False
        while True:
            match = _STRING_SPECIAL.search(buf, pos)
            if match is None:
                decoded.append(buf[pos:])
                pos = end
                break
            special = match.start()
            decoded.append(buf[pos:special])
            if buf[special] == '"':
                pos = special + 1
                closed = True
                break
            escape = self._decode_escape(buf, special)
            if escape is None:  # cut by the end of the piece: keep it for the next one
                self._tail = buf[special:]
                pos = end
                break
            if not escape[0]:  # an invalid escape: malformed JSON
                self._state = _DONE
                return end
            decoded.append(escape[0])
            pos = special + escape[1]
        text = "".join(decoded)
        if text:
            self._parts.append(text)
            events.append(FieldDelta(self._channel, self._instance, self._marker, self._field, text))
        if closed:
            self._complete(events, "".join(self._parts))
        return pos

    def _decode_escape(self, buf: str, start: int) -> tuple[str, int] | None:
        """Decode the escape at ``buf[start]``: ``(text, length)``, ``("", 0)`` if invalid, ``None`` if cut."""
        end = len(buf)
        if start + 1 >= end:
            return None
        kind = buf[start + 1]
        if kind != "u":
            simple = _SIMPLE_ESCAPES.get(kind)
            return ("", 0) if simple is None else (simple, 2)
        if start + 6 > end:
            return None
        if not _HEX4.fullmatch(buf, start + 2, start + 6):
            return ("", 0)
        code = int(buf[start + 2 : start + 6], 16)
        if 0xDC00 <= code <= 0xDFFF:
            return ("\ufffd", 6)  # a lone low surrogate
        if not 0xD800 <= code <= 0xDBFF:
            return (chr(code), 6)
        following = buf[start + 6 : start + 12]
        if _LOW_SURROGATE.fullmatch(following):
            low = int(following[2:], 16)
            return (chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)), 12)
        if start + 12 > end and _LOW_SURROGATE_PREFIX.fullmatch(following):
            return None  # the low half of the pair may still come
        return ("\ufffd", 6)  # a lone high surrogate

    def _read_container(self, buf: str, pos: int, events: list[FieldEvent]) -> int:
        end = len(buf)
        parts = self._parts
        while pos < end:
            if self._in_string:
                match = _STRING_SPECIAL.search(buf, pos)
                if match is None:
                    parts.append(buf[pos:])
                    return end
                special = match.start()
                if buf[special] == "\\":
                    if special + 1 >= end:
                        parts.append(buf[pos:special])
                        self._tail = buf[special:]
                        return end
                    parts.append(buf[pos : special + 2])
                    pos = special + 2
                    continue
                parts.append(buf[pos : special + 1])
                pos = special + 1
                self._in_string = False
                continue
            match = _CONTAINER_SPECIAL.search(buf, pos)
            if match is None:
                parts.append(buf[pos:])
                return end
            special = match.start()
            parts.append(buf[pos : special + 1])
            pos = special + 1
            char = buf[special]
            if char == '"':
                self._in_string = True
            elif char == "{" or char == "[":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    try:
                        value = json.loads("".join(parts), strict=False)
                    except ValueError:
                        self._state = _DONE
                        return end
                    self._complete(events, value)
                    return pos
        return pos

    def _read_scalar(self, buf: str, pos: int, events: list[FieldEvent]) -> int:
        match = _SCALAR_END.search(buf, pos)
        if match is None:
            self._parts.append(buf[pos:])
            return len(buf)
        self._parts.append(buf[pos : match.start()])
        self._complete_scalar(events)
        return match.start()  # the delimiter is read as punctuation

    def _complete_scalar(self, events: list[FieldEvent]) -> None:
        try:
            value = json.loads("".join(self._parts))
        except ValueError:
            self._state = _DONE
            return
        self._complete(events, value)

    def _complete(self, events: list[FieldEvent], value: JsonValue) -> None:
        events.append(FieldCompleted(self._channel, self._instance, self._marker, self._field, value))
        self._parts = []
        self._state = _AFTER_VALUE
