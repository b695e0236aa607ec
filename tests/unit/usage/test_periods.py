"""UTC days and months: every moment falls in exactly one, they follow each other without a gap, and a reset
is told in whole seconds that never arrive early."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from berth.usage.periods import Window, seconds_until, window_of

offsets = st.integers(-14 * 60, 14 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes)))
moments = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9998, 12, 30), timezones=offsets)
periods = st.sampled_from(["day", "month"])


def utc(at: datetime) -> datetime:
    return at.astimezone(UTC)


@given(periods, moments)
def test_a_moment_falls_in_its_window_which_starts_at_a_utc_midnight(period: str, at: datetime) -> None:
    window = window_of(period, at)  # type: ignore[arg-type]
    assert window.start <= at < window.end
    assert window.start.tzinfo is UTC and window.end.tzinfo is UTC
    assert (window.start.hour, window.start.minute, window.start.second, window.start.microsecond) == (0, 0, 0, 0)
    assert window.start.date() == (utc(at).date() if period == "day" else utc(at).date().replace(day=1))


@given(periods, moments)
def test_windows_follow_each_other_without_gap_or_overlap(period: str, at: datetime) -> None:
    window = window_of(period, at)  # type: ignore[arg-type]
    assert window_of(window.period, window.start) == window
    assert window_of(window.period, window.end - timedelta(microseconds=1)) == window
    following = window_of(window.period, window.end)
    assert following.start == window.end
    assert not window.contains(window.end)


@given(moments)
def test_a_day_is_24_hours_and_a_month_runs_from_its_first_day_to_the_next_months(at: datetime) -> None:
    day, month = window_of("day", at), window_of("month", at)
    assert day.end - day.start == timedelta(days=1)
    assert month.start.day == 1 and month.end.day == 1
    assert 28 <= (month.end - month.start).days <= 31
    assert (month.end.year * 12 + month.end.month) - (month.start.year * 12 + month.start.month) == 1
    assert month.start <= day.start and day.end <= month.end


def test_a_naive_moment_is_taken_as_utc() -> None:
    assert window_of("day", datetime(2025, 3, 9, 23, 59)) == window_of("day", datetime(2025, 3, 9, 23, 59, tzinfo=UTC))


def test_the_last_moment_of_february_of_a_leap_year_resets_on_the_first_of_march() -> None:
    window = window_of("month", datetime(2024, 2, 29, 23, 59, 59, 999_999, tzinfo=UTC))
    assert window == Window("month", datetime(2024, 2, 1, tzinfo=UTC), datetime(2024, 3, 1, tzinfo=UTC))


def test_a_moment_east_of_utc_may_belong_to_the_previous_utc_day() -> None:
    tokyo = timezone(timedelta(hours=9))
    window = window_of("day", datetime(2025, 1, 1, 8, 0, tzinfo=tokyo))
    assert window.start == datetime(2024, 12, 31, tzinfo=UTC)
    assert window_of("month", datetime(2025, 1, 1, 8, 0, tzinfo=tokyo)).start == datetime(2024, 12, 1, tzinfo=UTC)


@given(periods, moments)
def test_retry_after_is_whole_seconds_that_never_arrive_before_the_reset(period: str, at: datetime) -> None:
    window = window_of(period, at)  # type: ignore[arg-type]
    wait = seconds_until(window.end, at)
    assert isinstance(wait, int) and wait >= 1
    assert at + timedelta(seconds=wait) >= window.end
    assert at + timedelta(seconds=wait - 1) < window.end or wait == 1
