"""GCRA: what a limit admits over any arrival sequence, and the exact wait it tells a refused caller."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from berth.gateway.rate import MICROS_PER_SECOND, RateLimit, admit

limits = st.builds(RateLimit, per_minute=st.integers(1, 6000), burst=st.integers(0, 30))
gaps = st.lists(st.integers(0, 3 * 60 * MICROS_PER_SECOND), min_size=1, max_size=80)


def replay(limit: RateLimit, arrivals: list[int]) -> list[tuple[int, bool, int]]:
    """(time, admitted, retry after) of every arrival, one key."""
    tat: int | None = None
    decisions = []
    for now in arrivals:
        decision, new_tat = admit(tat, now, limit)
        if new_tat is not None:
            tat = new_tat
        decisions.append((now, decision.allowed, decision.retry_after_us))
    return decisions


def times(gap_list: list[int]) -> list[int]:
    now, arrivals = 10**12, []
    for gap in gap_list:
        now += gap
        arrivals.append(now)
    return arrivals


@given(limits, gaps)
def test_no_window_admits_more_than_the_burst_plus_the_rate(limit: RateLimit, gap_list: list[int]) -> None:
    admitted = [now for now, allowed, _ in replay(limit, times(gap_list)) if allowed]
    for i, start in enumerate(admitted):
        for j in range(i, len(admitted)):
            assert j - i + 1 <= limit.burst + 1 + (admitted[j] - start) // limit.interval_us


@given(limits, gaps)
def test_a_refused_caller_is_admitted_exactly_when_told(limit: RateLimit, gap_list: list[int]) -> None:
    tat: int | None = None
    for now in times(gap_list):
        decision, new_tat = admit(tat, now, limit)
        if decision.allowed:
            assert decision.retry_after_us == 0
            tat = new_tat
            continue
        assert new_tat is None, "a refusal costs nothing"
        assert 0 < decision.retry_after_us <= limit.interval_us
        assert admit(tat, now + decision.retry_after_us, limit)[0].allowed
        assert not admit(tat, now + decision.retry_after_us - 1, limit)[0].allowed


@given(limits, st.integers(1, 200))
def test_arrivals_at_the_steady_rate_are_always_admitted(limit: RateLimit, count: int) -> None:
    arrivals = [10**12 + n * limit.interval_us for n in range(count)]
    assert all(allowed for _, allowed, _ in replay(limit, arrivals))


def test_burst_plus_one_at_once_then_one_per_interval() -> None:
    limit = RateLimit(per_minute=60, burst=2)
    decisions = replay(limit, [0, 0, 0, 0])
    assert [allowed for _, allowed, _ in decisions] == [True, True, True, False]
    assert decisions[-1][2] == MICROS_PER_SECOND
    assert [allowed for _, allowed, _ in replay(limit, [0, 0, 0, MICROS_PER_SECOND])] == [True] * 4


@pytest.mark.parametrize(("per_minute", "burst"), [(0, 1), (-5, 1), (10, -1)])
def test_a_limit_that_admits_nothing_is_refused(per_minute: int, burst: int) -> None:
    with pytest.raises(ValueError, match="must"):
        RateLimit(per_minute=per_minute, burst=burst)
