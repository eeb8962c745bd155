"""The next hours of orders for the demo's sources, in place: quiet hours stay empty, and now and then a
few late orders arrive for an hour loaded before."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
from deltalake import DeltaTable, write_deltalake

from incremental_assets.demo.shop import (
    _MICROS_PER_HOUR,
    _DayBatch,
    _hours,
    _hours_since_epoch,
    _micros,
    _midnight,
    _Shop,
)
from incremental_assets.demo.sources import (
    first_loaded_hour,
    hour_boundary,
    last_complete_hour,
    loaded_until,
    loaded_until_commit,
    location,
    next_order_id,
    saved_shop,
)

_LATE_STREAM = 4

# Late rows in hourly appends: for each appended hour, the chance that a few orders (1 to 3) of an hour
# loaded before this append arrive with it, and how far back that hour may be.
_LATE_HOUR_CHANCE = 0.12
_LATE_HOURS_BACK = 6
_LATE_BATCHES_MAX = 3  # per append, however many hours it adds


@dataclass(frozen=True)
class AppendResult:
    """What :func:`append_demo_hours` added: the hours ``[start, end)``, rows per source, the late rows
    among them (for hours loaded before ``start``) and the appended hours without any order."""

    start: datetime
    end: datetime
    rows: dict[str, int] = field(default_factory=dict)
    late_orders: int = 0
    late_hours: tuple[datetime, ...] = ()
    quiet_hours: tuple[datetime, ...] = ()
    asked_end: datetime | None = None  # the end asked, when later than the clock's last complete hour (not appended)

    @property
    def hours(self) -> int:
        return max(0, int((self.end - self.start).total_seconds() // 3600))


def append_demo_hours(
    project_dir: str | Path,
    *,
    hours: int | None = None,
    until: datetime | None = None,
    now: datetime | None = None,
    orders_per_day: int = 200,
    seed: int = 7,
    ahead: bool = False,
) -> AppendResult:
    """Append the next hours of orders to the Delta sources, in place: ``hours`` hours after the data's
    end (:func:`~incremental_assets.demo.sources.loaded_until`), or up to ``until`` (an hour boundary), by
    default up to the last complete hour before ``now`` (the clock unless given). Hours after that one are
    appended only with ``ahead``: otherwise the append stops there, and ``asked_end`` says the end asked.

    The new hours hold the orders their day's stream holds for them (the same random stream as
    ``generate_demo_data``, so quiet night hours stay empty), and for each new hour, with a small
    chance, 1 to 3 late orders for one of the few hours loaded before this append. Each source gets one
    Delta commit (order lines first, then orders) recording how far it now reaches; a source that
    already reaches ``end`` (an append that died between its two commits) is not written again.
    Nothing to add (``end`` not after the data's end) commits nothing.
    """
    root = Path(project_dir)
    start = loaded_until(root)
    end, asked_end = _append_end(start, hours=hours, until=until, now=now, ahead=ahead)
    if end <= start:
        return AppendResult(start, start, {"raw.orders": 0, "raw.order_items": 0}, asked_end=asked_end)
    shop = saved_shop(root, seed)
    on_time = _on_time(shop, start, end, orders_per_day)
    late = _late(shop, start, end, first_loaded_hour(root), orders_per_day, seed)
    batch = _DayBatch.concat(on_time + late)
    existing = DeltaTable(location(root, "raw.orders")).to_pyarrow_dataset()
    orders, order_items = batch.to_tables(first_order_id=next_order_id(existing))
    for name, table in (("raw.order_items", order_items), ("raw.orders", orders)):
        if loaded_until(root, name) >= end:
            continue  # committed by an append that stopped before its second commit
        commit = loaded_until_commit(end)
        write_deltalake(
            location(root, name), table, mode="append", partition_by=["order_date"], commit_properties=commit
        )
    filled = set(np.unique(np.concatenate([b.order_ts for b in on_time]) // _MICROS_PER_HOUR).tolist())
    quiet = tuple(h for h in _hours(start, end) if _hours_since_epoch(h) not in filled)
    late_hours = tuple(sorted({_hour_of(int(b.order_ts[0])) for b in late if len(b.order_ts)}))
    return AppendResult(
        start,
        end,
        {"raw.orders": orders.num_rows, "raw.order_items": order_items.num_rows},
        late_orders=sum(len(b.order_ts) for b in late),
        late_hours=late_hours,
        quiet_hours=quiet,
        asked_end=asked_end,
    )


def _append_end(
    start: datetime, *, hours: int | None, until: datetime | None, now: datetime | None, ahead: bool
) -> tuple[datetime, datetime | None]:
    """Where an append from ``start`` ends, and the end asked when it is cut back to the last complete hour."""
    if hours is not None and until is not None:
        raise ValueError("give hours or until, not both")
    if hours is not None:
        if hours < 1:
            raise ValueError(f"hours must be at least 1, got {hours}")
        end = start + timedelta(hours=hours)
    else:
        end = hour_boundary(until, "until") if until is not None else last_complete_hour(now)
    if not ahead and end > last_complete_hour(now):
        return last_complete_hour(now), end
    return end, None


def _hour_of(micros: int) -> datetime:
    return datetime.fromtimestamp(micros // _MICROS_PER_HOUR * 3600, timezone.utc)


def _on_time(shop: _Shop, start: datetime, end: datetime, orders_per_day: int) -> list[_DayBatch]:
    """The orders each day's stream holds for the hours ``[start, end)``."""
    on_time: list[_DayBatch] = []
    day = start.date()
    while _midnight(day) < end:
        batch = shop.orders_for_day(day, orders_per_day)
        on_time.append(batch.select((batch.order_ts >= _micros(start)) & (batch.order_ts < _micros(end))))
        day += timedelta(days=1)
    return on_time


def _late(
    shop: _Shop, start: datetime, end: datetime, first_hour: datetime | None, orders_per_day: int, seed: int
) -> list[_DayBatch]:
    """For each hour of ``[start, end)``, by chance, a few late orders for an hour loaded before ``start``."""
    late: list[_DayBatch] = []
    hour = start
    while hour < end:
        rng = np.random.default_rng([seed, _LATE_STREAM, _hours_since_epoch(hour)])
        if rng.random() < _LATE_HOUR_CHANCE:
            # Late means: for an hour a reader may already have seen, loaded before this append.
            target = start - timedelta(hours=int(rng.integers(1, _LATE_HOURS_BACK + 1)))
            if len(late) < _LATE_BATCHES_MAX and first_hour is not None and target >= first_hour:
                count = int(rng.integers(1, 4))
                late_after = 1_000_000 + _hours_since_epoch(hour)
                batch = shop.orders_for_day(
                    target.date(), orders_per_day, late_after=late_after, hour=target.hour, count=count
                )
                late.append(batch)
        hour += timedelta(hours=1)
    return late
