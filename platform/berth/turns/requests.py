"""What a queued turn runs from: stored with the accepted turn, read back by the worker that claims it."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["TurnRequest"]


@dataclass(frozen=True)
class TurnRequest:
    """A turn's bundle, message, time zone and attachments (``(name, mime, data)``), and whether the API took
    a lease of its tenant's concurrent turns for it (the worker then holds and returns it)."""

    bundle_id: str
    message: str
    user_timezone: str = "UTC"
    attachments: Sequence[tuple[str, str, bytes]] = ()
    tenant_lease: bool = False

    def to_bytes(self) -> bytes:
        """The request as JSON (attachments in base64)."""
        return json.dumps(
            {
                "bundle": self.bundle_id,
                "message": self.message,
                "timezone": self.user_timezone,
                "attachments": [[n, m, base64.b64encode(d).decode()] for n, m, d in self.attachments],
                "tenant_lease": self.tenant_lease,
            }
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> TurnRequest:
        """Parse :meth:`to_bytes`'s output.

        :raises ValueError: when ``data`` is not a stored turn request.
        """
        try:
            raw = json.loads(data)
            return cls(
                bundle_id=str(raw["bundle"]),
                message=str(raw["message"]),
                user_timezone=str(raw.get("timezone") or "UTC"),
                attachments=tuple((str(n), str(m), base64.b64decode(d)) for n, m, d in raw.get("attachments", ())),
                tenant_lease=bool(raw.get("tenant_lease", False)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"not a stored turn request: {type(exc).__name__}: {exc}") from None
