"""Server-sent events over HTTP: where a resumed stream starts (``Last-Event-ID``).

The frames themselves are encoded once when the event happens, by :mod:`berth.turns.event_log`.
"""

from __future__ import annotations


def parse_last_event_id(turn_id: str, header: str | None) -> int:
    """The sequence number after which to resume (0 = from the start; foreign or bad ids = 0)."""
    if not header:
        return 0
    owner, _, seq = header.strip().rpartition(":")
    if owner != turn_id or not seq.isdigit():
        return 0
    return int(seq)
