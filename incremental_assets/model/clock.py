"""The one clock: every read of the current time goes through this module.

:func:`now` is the instant the product decides by (which intervals are complete, where a relative
start such as ``'1 year ago'`` falls, a run's execution time, what is stale or due); a test pins it with
:func:`pinned`. :func:`wall_time` is the machine's own time, never pinned: it stamps what is compared with
file modification times and with Delta's and Dagster's own clocks (commit timestamps, lock and staging
stamps, when source data was noticed), which a pinned instant would put out of order.

>>> from datetime import datetime, timezone
>>> with pinned(datetime(2024, 1, 2, 3, tzinfo=timezone.utc)):
...     now()
datetime.datetime(2024, 1, 2, 3, 0, tzinfo=datetime.timezone.utc)
>>> now() > datetime(2024, 1, 2, 3, tzinfo=timezone.utc)
True
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Iterator

from incremental_assets.errors import WindowError

# A stack, not a context variable: a pin holds for every thread of the process (Dagster runs steps and
# sensors in threads of their own).
_PINNED: list[datetime] = []
_RELATIVE = [0]


def now() -> datetime:
    """The current instant in UTC, or the innermost pinned one."""
    return _PINNED[-1] if _PINNED else datetime.now(timezone.utc)


def count_relative() -> None:
    """Note that a relative time (``'1 year ago'``) was resolved against :func:`now`."""
    _RELATIVE[0] += 1


def relative_count() -> int:
    """How many relative times this process has resolved: a result computed while the count moved holds
    only for the minute it was computed in (relative times resolve to the minute)."""
    return _RELATIVE[0]


def wall_time() -> datetime:
    """The machine's current time in UTC, whatever is pinned (see the module's docstring for when)."""
    return datetime.now(timezone.utc)


@contextmanager
def pinned(at: datetime) -> Iterator[datetime]:
    """Make :func:`now` return ``at`` (an aware instant, kept in UTC) inside the block."""
    if at.tzinfo is None:
        raise WindowError(f"the pinned instant {at.isoformat()} has no time zone (fix: e.g. tzinfo=timezone.utc)")
    _PINNED.append(at.astimezone(timezone.utc))
    try:
        yield _PINNED[-1]
    finally:
        _PINNED.pop()
