"""Freshness policies: how old a model's newest materialization may get before the UI flags it.

By default a model with a cron (an incremental model without one: its interval) is expected to have been materialized
within one cron period (plus a tenth for the run itself) and fails its freshness after two: a daily model that missed
one night warns, one that missed two fails. A model header overrides it with ``freshness '6 hours'`` (or ``'2 days'``,
``'90 minutes'``), or turns it off with ``freshness off``.
"""

from __future__ import annotations

import re
from datetime import timedelta

import dagster as dg

from incremental_assets.errors import ModelFileError
from incremental_assets.model.intervals import IntervalUnit, unit_from_cron
from incremental_assets.model.sql_model import SqlModel

_DURATION = re.compile(r"^(\d+)\s*(minute|hour|day|week)s?$")
_OFF = {"off", "none", "false", "no"}


def parse_freshness(text: str) -> timedelta | None:
    """A header's ``freshness`` value as a duration; None for ``off``; ValueError for anything else.

    >>> parse_freshness("'6 hours'"), parse_freshness("off")
    (datetime.timedelta(seconds=21600), None)
    """
    value = text.strip().strip("'\"").strip().lower()
    if value in _OFF:
        return None
    found = _DURATION.match(value)
    if not found or int(found[1]) == 0:
        raise ValueError(value)
    return timedelta(**{found[2] + "s": int(found[1])})


def cron_period(cron: str | None) -> timedelta | None:
    """The nominal time between two ticks of a cron (None when it cannot be told)."""
    unit = unit_from_cron(cron) if cron else None
    return IntervalUnit.of(unit).nominal if unit else None


def freshness_policy(model: SqlModel) -> dg.FreshnessPolicy | None:
    """The model's freshness policy: from its header's ``freshness`` when given, else from its cron."""
    if "freshness" in model.metadata:
        try:
            fail = parse_freshness(model.metadata["freshness"])
        except ValueError as exc:
            raise ModelFileError(
                model.path,
                model.line_of("freshness"),
                f"freshness '{exc}' is not a duration",
                hint="write freshness '6 hours' (minutes, hours, days or weeks), or freshness off",
            ) from None
        return dg.FreshnessPolicy.time_window(fail_window=fail) if fail else None
    period = cron_period(model.cron) or (model.unit.nominal if model.is_incremental else None)
    if period is None:
        return None
    return dg.FreshnessPolicy.time_window(fail_window=2 * period, warn_window=period + period / 10)
