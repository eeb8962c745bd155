"""What the analysis passes return: reasons, per-source bounds and the final classification.

>>> from datetime import timedelta
>>> describe_bound(SourceBound(before=timedelta(hours=36), after=timedelta(0)))
{'before': 'PT36H', 'after': 'PT0S'}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Literal

from incremental_assets.model.intervals import IntervalUnit

_SHORTEST = {
    "hour": timedelta(hours=1),
    "day": timedelta(days=1),
    "week": timedelta(days=7),
    "month": timedelta(days=28),
    "quarter": timedelta(days=89),
    "year": timedelta(days=365),
}

SafetyClass = Literal["FullyBatchSafe", "BoundedSafe", "PerPartitionOnly", "Refused"]


@dataclass(frozen=True)
class Reason:
    """Why a model was refused or limited, or a note about something admitted.

    ``rule`` is a stable name (``window_function``, ``lookback_underivable``, ...); ``line`` is the
    line of the construct in the query text, when the parser recorded one.
    """

    rule: str
    message: str
    line: int | None
    path: str | None = None  # the file of the construct when it is not the model's (an inlined EMBEDDED model)


@dataclass(frozen=True)
class SourceBound:
    """How far outside a run window a source is read: ``[run_start - before, run_end + after)``.

    ``column`` is the column the bound is measured in. When it is the table's event-time column,
    ``partition_column`` (its truncation to ``partition_unit``) is read in whole partitions around it.
    """

    before: timedelta
    after: timedelta
    column: str | None = field(default=None, compare=False, repr=False)
    partition_column: str | None = field(default=None, compare=False, repr=False)
    partition_unit: str | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Analysis:
    """The safety class of a model, why, and the read bound of every table it references.

    ``bounds`` maps each referenced table name to its bound, or to None for a table without a time
    dimension (read in full on every run).
    """

    safety_class: SafetyClass
    batch_limit: int | None
    reasons: tuple[Reason, ...]
    bounds: Mapping[str, SourceBound | None] = field(hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bounds", MappingProxyType(dict(self.bounds)))

    def __reduce__(self):
        # A read-only mapping cannot be pickled as is; rebuild it from a plain dict.
        return (Analysis, (self.safety_class, self.batch_limit, self.reasons, dict(self.bounds)))

    @property
    def refused(self) -> bool:
        return self.safety_class == "Refused"

    @property
    def label(self) -> str:
        """The safety class as plans and the CLI show it: ``BoundedSafe`` with its limit.

        >>> Analysis("BoundedSafe", 7, (), {}).label, Analysis("FullyBatchSafe", None, (), {}).label
        ('BoundedSafe(7)', 'FullyBatchSafe')
        """
        return f"BoundedSafe({self.batch_limit})" if self.safety_class == "BoundedSafe" else self.safety_class


@dataclass(frozen=True)
class Findings:
    """What one pass found: refusals, notes, and the most intervals a single run may cover."""

    refusals: tuple[Reason, ...] = ()
    notes: tuple[Reason, ...] = ()
    batch_limit: int | None = None


def iso_duration(value: timedelta) -> str:
    """ISO-8601 duration: whole days as ``P7D``, anything else in hours, minutes and seconds.

    >>> iso_duration(timedelta(0)), iso_duration(timedelta(minutes=90)), iso_duration(timedelta(days=1))
    ('PT0S', 'PT1H30M', 'P1D')
    """
    if value < timedelta(0):
        return "-" + iso_duration(-value)
    if value and value % timedelta(days=1) == timedelta(0):
        return f"P{value.days}D"
    seconds = value.total_seconds()
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = "".join(f"{int(n)}{unit}" for n, unit in ((hours, "H"), (minutes, "M")) if n)
    if secs or not text:
        text += f"{secs:g}S"
    return "PT" + text


def describe_bound(bound: SourceBound) -> dict[str, object]:
    """A bound as ISO-8601 durations and the column it is in, the form ``explain --json`` shows.

    A bound in an event-time column also says how many whole partitions of the partition column a
    run reads beyond a window on partition boundaries.

    >>> describe_bound(SourceBound(timedelta(minutes=30), timedelta(days=1)))
    {'before': 'PT30M', 'after': 'P1D'}
    >>> describe_bound(SourceBound(timedelta(minutes=30), timedelta(0), "event_ts", "event_date", "day"))["partitions"]
    {'column': 'event_date', 'unit': 'day', 'before': 1, 'after': 0}
    """
    described: dict[str, object] = {"before": iso_duration(bound.before), "after": iso_duration(bound.after)}
    if bound.column:
        described["column"] = bound.column
    if bound.partition_column and bound.partition_unit:
        length = _SHORTEST[IntervalUnit.of(bound.partition_unit).value]  # at most this many partitions
        described["partitions"] = {
            "column": bound.partition_column,
            "unit": bound.partition_unit,
            "before": -(-bound.before // length),
            "after": -(-bound.after // length),
        }
    return described
