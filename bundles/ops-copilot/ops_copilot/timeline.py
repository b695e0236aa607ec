"""``ops-copilot.incident_timeline``."""

from __future__ import annotations

import re

from berth import tool

STAMP = re.compile("^\\s*(\\d{1,2}:\\d{2})\\s*[-\u2013:]?\\s*(.+)$")  # "-", en dash or ":" after the time


@tool(read_only=True)
def incident_timeline(notes: list[str]) -> list[dict[str, str]]:
    """Sort incident notes that start with a HH:MM time into a timeline.

    Args:
        notes: lines such as "14:05 paged on-call"; lines without a time are skipped.
    """
    rows = []
    for note in notes:
        match = STAMP.match(note)
        if match:
            hours, minutes = match.group(1).split(":")
            rows.append({"time": f"{int(hours):02d}:{minutes}", "event": match.group(2).strip()})
    return sorted(rows, key=lambda row: row["time"])
