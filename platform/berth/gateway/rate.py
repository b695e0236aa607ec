"""Request rates: the generic cell rate algorithm (GCRA), the token bucket kept as one timestamp.

A limit of ``per_minute`` requests with ``burst`` lets a tenant send ``burst + 1`` requests at once and then
one every ``60 / per_minute`` seconds (nginx's ``limit_req ... burst=`` reads the same way). The state of a
key is its *theoretical arrival time* (TAT): when the bucket would be full again. A request at ``now`` is
admitted when ``max(TAT, now) - now`` is within ``burst`` emission intervals; it then moves TAT one interval
on. A rejected request learns exactly how long to wait.

Times are integer microseconds so that the in-memory counters and the Redis script (Lua numbers are doubles,
exact for integers below 2**53) take the same decisions on the same arrivals.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MICROS_PER_SECOND", "RateDecision", "RateLimit", "admit"]

MICROS_PER_SECOND = 1_000_000


@dataclass(frozen=True, slots=True)
class RateLimit:
    """``per_minute`` requests on average, up to ``burst`` more at once."""

    per_minute: int
    burst: int

    def __post_init__(self) -> None:
        if self.per_minute <= 0:
            raise ValueError(f"per_minute must be positive, not {self.per_minute}")
        if self.burst < 0:
            raise ValueError(f"burst must not be negative, not {self.burst}")

    @property
    def interval_us(self) -> int:
        """Microseconds between two requests at the steady rate (the emission interval)."""
        return max(60 * MICROS_PER_SECOND // self.per_minute, 1)

    @property
    def tolerance_us(self) -> int:
        """How far ahead of ``now`` the TAT may run and still admit a request."""
        return self.burst * self.interval_us


@dataclass(frozen=True, slots=True)
class RateDecision:
    """Whether a request was admitted; when not, how long until one would be."""

    allowed: bool
    retry_after_us: int = 0

    @property
    def retry_after_s(self) -> float:
        """:attr:`retry_after_us` in seconds."""
        return self.retry_after_us / MICROS_PER_SECOND


def admit(tat: int | None, now: int, limit: RateLimit) -> tuple[RateDecision, int | None]:
    """Decide on one request arriving at ``now`` for a key whose TAT is ``tat`` (None: never seen).

    Returns the decision and the key's new TAT (None when it is unchanged: a rejected request costs nothing).
    """
    start = now if tat is None or tat < now else tat
    ahead = start - now
    if ahead > limit.tolerance_us:
        return RateDecision(False, ahead - limit.tolerance_us), None
    return RateDecision(True), start + limit.interval_us
