from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from incremental_assets.errors import WindowError
from incremental_assets.model.intervals import (
    INTERVAL_UNITS,
    TimeWindow,
    batches,
    check_aligned,
    floor,
    intervals,
    merge,
    next_boundary,
    subtract,
    unit_from_cron,
    utc,
)


@pytest.mark.parametrize(
    "unit, instant, expected",
    [
        ("hour", utc(2024, 3, 10, 13, 45), utc(2024, 3, 10, 13)),
        ("day", utc(2024, 3, 10, 13, 45), utc(2024, 3, 10)),
        ("week", utc(2024, 3, 13), utc(2024, 3, 10)),  # Wednesday -> Sunday
        ("week", utc(2024, 3, 10), utc(2024, 3, 10)),  # a Sunday is its own week start
        ("week", utc(2024, 1, 1), utc(2023, 12, 31)),  # across a year boundary
        ("month", utc(2024, 2, 29, 23), utc(2024, 2, 1)),
        ("quarter", utc(2024, 6, 30), utc(2024, 4, 1)),
        ("quarter", utc(2024, 10, 1), utc(2024, 10, 1)),
        ("year", utc(2024, 12, 31, 23), utc(2024, 1, 1)),
    ],
)
def test_floor(unit, instant, expected):
    assert floor(instant, unit) == expected


def test_next_boundary_handles_month_lengths_and_year_end():
    assert next_boundary(utc(2024, 1, 1), "month") == utc(2024, 2, 1)
    assert next_boundary(utc(2024, 12, 1), "month") == utc(2025, 1, 1)
    assert next_boundary(utc(2024, 10, 1), "quarter") == utc(2025, 1, 1)
    assert next_boundary(utc(2023, 12, 31), "week") == utc(2024, 1, 7)


def test_intervals_of_a_quarter_window():
    parts = intervals(TimeWindow(utc(2024, 1, 1), utc(2025, 1, 1)), "quarter")
    assert [p.start.month for p in parts] == [1, 4, 7, 10]
    assert parts[-1].end == utc(2025, 1, 1)


def test_misaligned_window_is_rejected_with_nearest_boundaries():
    with pytest.raises(WindowError) as err:
        check_aligned(TimeWindow(utc(2024, 1, 1), utc(2024, 1, 8)), "week", model="shop.weekly")
    text = str(err.value)
    assert "shop.weekly" in text and "not on week boundaries" in text
    assert "use 2023-12-31 or 2024-01-07" in text


def test_empty_window_is_an_error():
    with pytest.raises(WindowError, match="empty window"):
        TimeWindow(utc(2024, 1, 2), utc(2024, 1, 2))


@settings(max_examples=200, deadline=None)
@given(
    unit=st.sampled_from(INTERVAL_UNITS),
    offset=st.integers(min_value=0, max_value=400),
    count=st.integers(min_value=1, max_value=60),
    size=st.one_of(st.none(), st.integers(min_value=1, max_value=20)),
)
def test_batches_cover_the_window_exactly(unit, offset, count, size):
    if unit == "hour":
        start = floor(utc(2024, 1, 1) + timedelta(hours=offset), unit)
    else:
        start = floor(utc(2024, 1, 1) + timedelta(days=offset), unit)
    end = start
    for _ in range(count):
        end = next_boundary(end, unit)
    window = TimeWindow(start, end)
    parts = batches(window, unit, size)
    assert parts[0].start == window.start and parts[-1].end == window.end
    for a, b in zip(parts, parts[1:]):
        assert a.end == b.start  # no gap, no overlap
    if size is not None:
        assert all(len(intervals(p, unit)) <= size for p in parts)
        assert sum(len(intervals(p, unit)) for p in parts) == count


def test_merge_and_subtract_find_gaps():
    d = lambda n: utc(2024, 1, n)  # noqa: E731
    covered = [TimeWindow(d(1), d(3)), TimeWindow(d(3), d(5)), TimeWindow(d(7), d(8))]
    assert merge(covered) == [TimeWindow(d(1), d(5)), TimeWindow(d(7), d(8))]
    assert subtract(TimeWindow(d(1), d(10)), covered) == [TimeWindow(d(5), d(7)), TimeWindow(d(8), d(10))]
    assert subtract(TimeWindow(d(2), d(4)), covered) == []


@pytest.mark.parametrize(
    "cron, unit",
    [
        ("@hourly", "hour"),
        ("@daily", "day"),
        ("0 6 * * *", "day"),
        ("@weekly", "week"),
        ("0 0 1 * *", "month"),
        ("0 0 1 1,4,7,10 *", "quarter"),
        ("@yearly", "year"),
        ("*/5 * * * *", "hour"),
    ],
)
def test_unit_from_cron(cron, unit):
    assert unit_from_cron(cron) == unit
