"""Server-sent events over HTTP: where a resumed stream starts (``Last-Event-ID``).

The frames themselves are encoded once when the event happens, by :mod:`berth.turns.event_log`.
"""

from __future__ import annotations

from berth.turns.errors import ServiceError

MAX_SEQ_DIGITS = 18
"""The most digits the sequence number of an event id may have: every number the host hands out (an attempt's
epoch of a billion numbers above the last, :mod:`berth.turns.redis_events`) has fewer, and a longer numeral is
refused before it is parsed (Python refuses to parse one of more than 4,300 digits at all)."""


def parse_last_event_id(turn_id: str, header: str | None, where: str = "Last-Event-ID") -> int:
    """The sequence number after which to resume (0 = from the start; foreign or malformed ids = 0).

    :raises ServiceError: 400 ``last_event_id_invalid`` when the sequence number is a numeral longer than
        :data:`MAX_SEQ_DIGITS` (``where`` names the header or query parameter it came in).
    """
    if not header:
        return 0
    owner, _, seq = header.strip().rpartition(":")
    if not (seq.isascii() and seq.isdigit()):  # "²" and "٣" are digits to str.isdigit, and no event's number
        return 0
    if len(seq) > MAX_SEQ_DIGITS:
        raise ServiceError(
            400,
            "last_event_id_invalid",
            f"{where}: the sequence number after ':' has {len(seq)} digits; an event id's has at most {MAX_SEQ_DIGITS}",
        )
    return int(seq) if owner == turn_id else 0
