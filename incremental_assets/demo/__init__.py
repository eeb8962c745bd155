"""Source data for the example project: a small online shop.

The example project in ``models/`` reads four sources (declared in ``sources.yaml``):

======================  ==============================  ======================================
source                  location (relative to project)  shape
======================  ==============================  ======================================
``raw.orders``          ``data/raw/orders``             Delta, partitioned by ``order_date``
``raw.order_items``     ``data/raw/order_items``        Delta, partitioned by ``order_date``
``raw.customers``       ``data/raw/customers.parquet``  one parquet file
``raw.items``           ``data/raw/items.csv``          CSV with a header
======================  ==============================  ======================================

The data looks like a real shop's: orders follow a daily curve (quiet nights, a lunch peak and a bigger
evening peak), weekends sell more than Mondays, the business grows about 20% a year and has a pre-Christmas
rush; a few customers buy far more than the rest, a few items sell far more than the rest, and the raw
customer file is a little messy (country codes in mixed case, stray spaces) so that the staging model has
something to clean.

Everything is generated with numpy, a day at a time, from a random stream keyed by ``(seed, day)``, so:

* the same arguments always give the same rows;
* ``orders_per_day`` scales the volume (5 million orders take seconds) without changing its shape;
* generating ``days=n`` and then calling :func:`append_demo_day` for the next day gives exactly the rows
  that ``days=n + 1`` would have given, which makes "new data arrived" demos honest.

Data that reaches the present, and grows like a live shop's: ``generate_demo_data(..., until=t)`` stops at
the hour boundary ``t`` (e.g. :func:`last_complete_hour`), and :func:`append_demo_hours` adds the next
hours in place: the same orders the day's stream holds for those hours (night hours are often quiet:
no orders at all), plus now and then a few late orders for an hour that was already loaded. How far the
data reaches is recorded in each Delta commit (``incremental_assets.demo.loaded_until`` in the commit
info), so appends continue exactly where the last one stopped, and an append that died between its two
commits is completed, not repeated, by the next one. Every write is atomic for a reader that polls: a
Delta commit lands whole, and the parquet and CSV files are written under a temporary name and renamed.

This module imports neither dagster nor pyspark.

Example (from the shell)::

    python -m incremental_assets.demo . --days 90 --orders-per-day 500
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, write_deltalake

from incremental_assets.demo.shop import (
    _MICROS_PER_HOUR,
    _DayBatch,
    _hours,
    _hours_since_epoch,
    _make_customers,
    _make_items,
    _micros,
    _midnight,
    _Shop,
)
from incremental_assets.model import clock

#: Where each source lives, relative to the project directory.
__all__ = ["SOURCE_LOCATIONS", "AppendResult", "append_demo_day", "append_demo_hours", "generate_demo_data", "last_complete_hour", "loaded_until"]

SOURCE_LOCATIONS: dict[str, str] = {
    "raw.orders": "data/raw/orders",
    "raw.order_items": "data/raw/order_items",
    "raw.customers": "data/raw/customers.parquet",
    "raw.items": "data/raw/items.csv",
}


_LATE_STREAM = 4

# Late rows in hourly appends: for each appended hour, the chance that a few orders (1 to 3) of an hour
# loaded before this append arrive with it, and how far back that hour may be.
_LATE_HOUR_CHANCE = 0.12
_LATE_HOURS_BACK = 6
_LATE_BATCHES_MAX = 3  # per append, however many hours it adds
# Commit info key recording the instant (an hour boundary) up to which the source holds its data.
LOADED_UNTIL_KEY = "incremental_assets.demo.loaded_until"


def generate_demo_data(
    project_dir: str | Path,
    *,
    start: date = date(2024, 1, 1),
    days: int = 365,
    orders_per_day: int = 200,
    seed: int = 7,
    until: datetime | None = None,
) -> dict[str, int]:
    """Write the example project's four sources under ``<project_dir>/data/raw`` (replacing old data).

    The orders cover ``days`` whole days from ``start``, or with ``until`` (an hour boundary, e.g.
    :func:`last_complete_hour`) every hour from ``start`` up to ``until``; ``days`` is then ignored.
    Returns the number of rows written per source name.

    >>> import tempfile
    >>> counts = generate_demo_data(tempfile.mkdtemp(), days=7, orders_per_day=50)
    >>> sorted(counts)
    ['raw.customers', 'raw.items', 'raw.order_items', 'raw.orders']
    >>> counts["raw.items"], counts["raw.customers"]
    (100, 500)
    """
    if until is not None:
        until = _hour_boundary(until, "until")
        days = (until.date() - start).days + (1 if until.time() != time(0) else 0)
        if until <= _midnight(start):
            raise ValueError(f"until {until.isoformat()} must be after start {start.isoformat()}")
    if days < 1:
        raise ValueError(f"days must be at least 1, got {days}")
    if orders_per_day < 1:
        raise ValueError(f"orders_per_day must be at least 1, got {orders_per_day}")
    root = Path(project_dir)
    _location(root, "raw.orders").parent.mkdir(parents=True, exist_ok=True)

    items = _make_items(seed)
    with _replacing(_location(root, "raw.items")) as tmp:
        pa_csv.write_csv(items, tmp, pa_csv.WriteOptions(quoting_style="needed"))
    customers = _make_customers(start, orders_per_day, seed)
    with _replacing(_location(root, "raw.customers")) as tmp:
        pq.write_table(customers, tmp)

    shop = _Shop.from_tables(customers, items, seed)
    day_batches = [
        shop.orders_for_day(start + timedelta(days=i), orders_per_day)
        for i in range(days)
    ]
    batch = _DayBatch.concat(day_batches)
    loaded = until or _midnight(start + timedelta(days=days))
    if until is not None:
        batch = batch.select(batch.order_ts < _micros(until))
    orders, order_items = batch.to_tables(first_order_id=1)
    for name, table in (("raw.order_items", order_items), ("raw.orders", orders)):
        write_deltalake(
            _location(root, name),
            table,
            mode="overwrite",
            schema_mode="overwrite",
            partition_by=["order_date"],
            commit_properties=_loaded_until_commit(loaded),
        )
    return {
        "raw.orders": orders.num_rows,
        "raw.order_items": order_items.num_rows,
        "raw.customers": customers.num_rows,
        "raw.items": items.num_rows,
    }


def append_demo_day(
    project_dir: str | Path, day: date, *, orders_per_day: int = 200, seed: int = 7
) -> dict[str, int]:
    """Append one day of orders and order lines to the Delta sources (one new Delta version each).

    For a day that is not loaded yet this appends exactly the rows that :func:`generate_demo_data` with
    one more day would have produced (same ``orders_per_day`` and ``seed``): new data arrived. For a day
    that is already loaded it appends a small batch of late-arriving orders (about 5% of a day's volume)
    to that day instead, different on each call. Order ids continue after the largest existing one.
    Customers and items are read from the project's files, so call :func:`generate_demo_data` first.

    Returns the number of rows appended per source name.

    >>> import tempfile
    >>> project = tempfile.mkdtemp()
    >>> first = generate_demo_data(project, start=date(2024, 3, 1), days=2, orders_per_day=50)
    >>> added = append_demo_day(project, date(2024, 3, 3), orders_per_day=50)
    >>> sorted(added)
    ['raw.order_items', 'raw.orders']
    """
    root = Path(project_dir)
    customers = pq.read_table(_location(root, "raw.customers"))
    items = pa_csv.read_csv(_location(root, "raw.items"))
    shop = _Shop.from_tables(customers, items, seed)

    orders_path = _location(root, "raw.orders")
    existing = DeltaTable(orders_path).to_pyarrow_dataset()
    max_order_id = pc.max(existing.to_table(columns=["order_id"])["order_id"]).as_py() or 0
    already_loaded = existing.count_rows(filter=pc.field("order_date") == pa.scalar(day, pa.date32()))

    if already_loaded:
        batch = shop.orders_for_day(day, orders_per_day, late_after=already_loaded)
    else:
        batch = shop.orders_for_day(day, orders_per_day)
    orders, order_items = batch.to_tables(first_order_id=max_order_id + 1)
    reached = max(loaded_until(root), _midnight(day + timedelta(days=1)))
    for name, table in (("raw.orders", orders), ("raw.order_items", order_items)):
        write_deltalake(_location(root, name), table, mode="append", partition_by=["order_date"], commit_properties=_loaded_until_commit(reached))
    return {"raw.orders": orders.num_rows, "raw.order_items": order_items.num_rows}


def last_complete_hour(now: datetime | None = None) -> datetime:
    """The end of the last complete hour before ``now`` (default: the clock), in UTC.

    >>> last_complete_hour(datetime(2024, 12, 2, 6, 59, tzinfo=timezone.utc)).isoformat()
    '2024-12-02T06:00:00+00:00'
    """
    now = (now or clock.now()).astimezone(timezone.utc)
    return now.replace(minute=0, second=0, microsecond=0)


def loaded_until(project_dir: str | Path, source: str = "raw.orders") -> datetime:
    """The instant up to which a Delta source of the demo holds its data (an hour boundary).

    Read from the newest commit that recorded it; data written before commits recorded it ends at
    midnight after its last order day."""
    path = _location(Path(project_dir), source)
    table = DeltaTable(path)
    for commit in table.history():
        if LOADED_UNTIL_KEY in commit:
            return datetime.fromisoformat(commit[LOADED_UNTIL_KEY]).astimezone(timezone.utc)
    last = pc.max(table.to_pyarrow_dataset().to_table(columns=["order_date"])["order_date"]).as_py()
    if last is None:
        raise ValueError(f"{path} holds no orders: generate the demo data first")
    return _midnight(last + timedelta(days=1))


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
    end (:func:`loaded_until`), or up to ``until`` (an hour boundary), by default up to the last complete
    hour before ``now`` (the clock unless given). Hours after that one are appended only with ``ahead``:
    otherwise the append stops there, and ``asked_end`` says the end asked.

    The new hours hold the orders their day's stream holds for them (the same random stream as
    :func:`generate_demo_data`, so quiet night hours stay empty), and for each new hour, with a small
    chance, 1 to 3 late orders for one of the few hours loaded before this append. Each source gets one
    Delta commit (order lines first, then orders) recording how far it now reaches; a source that
    already reaches ``end`` (an append that died between its two commits) is not written again.
    Nothing to add (``end`` not after the data's end) commits nothing.
    """
    root = Path(project_dir)
    start = loaded_until(root)
    if hours is not None and until is not None:
        raise ValueError("give hours or until, not both")
    if hours is not None:
        if hours < 1:
            raise ValueError(f"hours must be at least 1, got {hours}")
        end = start + timedelta(hours=hours)
    else:
        end = _hour_boundary(until, "until") if until is not None else last_complete_hour(now)
    asked_end = None
    if not ahead and end > last_complete_hour(now):
        asked_end, end = end, last_complete_hour(now)
    if end <= start:
        return AppendResult(start, start, {"raw.orders": 0, "raw.order_items": 0}, asked_end=asked_end)
    customers = pq.read_table(_location(root, "raw.customers"))
    items = pa_csv.read_csv(_location(root, "raw.items"))
    shop = _Shop.from_tables(customers, items, seed)
    first_hour = _first_loaded_hour(root)

    on_time: list[_DayBatch] = []
    day = start.date()
    while _midnight(day) < end:
        batch = shop.orders_for_day(day, orders_per_day)
        on_time.append(batch.select((batch.order_ts >= _micros(start)) & (batch.order_ts < _micros(end))))
        day += timedelta(days=1)
    late: list[_DayBatch] = []
    hour = start
    while hour < end:
        rng = np.random.default_rng([seed, _LATE_STREAM, _hours_since_epoch(hour)])
        if rng.random() < _LATE_HOUR_CHANCE:
            # Late means: for an hour a reader may already have seen, loaded before this append.
            target = start - timedelta(hours=int(rng.integers(1, _LATE_HOURS_BACK + 1)))
            if len(late) < _LATE_BATCHES_MAX and first_hour is not None and target >= first_hour:
                count = int(rng.integers(1, 4))
                late.append(shop.orders_for_day(target.date(), orders_per_day, late_after=1_000_000 + _hours_since_epoch(hour), hour=target.hour, count=count))
        hour += timedelta(hours=1)
    batch = _DayBatch.concat(on_time + late)
    existing = DeltaTable(_location(root, "raw.orders")).to_pyarrow_dataset()
    max_order_id = pc.max(existing.to_table(columns=["order_id"])["order_id"]).as_py() or 0
    orders, order_items = batch.to_tables(first_order_id=max_order_id + 1)
    for name, table in (("raw.order_items", order_items), ("raw.orders", orders)):
        if loaded_until(root, name) >= end:
            continue  # committed by an append that stopped before its second commit
        write_deltalake(_location(root, name), table, mode="append", partition_by=["order_date"], commit_properties=_loaded_until_commit(end))
    filled = set(np.unique(np.concatenate([b.order_ts for b in on_time]) // _MICROS_PER_HOUR).tolist())
    quiet = tuple(h for h in _hours(start, end) if _hours_since_epoch(h) not in filled)
    late_hours = tuple(sorted({datetime.fromtimestamp(int(b.order_ts[0]) // _MICROS_PER_HOUR * 3600, timezone.utc) for b in late if len(b.order_ts)}))
    return AppendResult(
        start, end, {"raw.orders": orders.num_rows, "raw.order_items": order_items.num_rows},
        late_orders=sum(len(b.order_ts) for b in late), late_hours=late_hours, quiet_hours=quiet, asked_end=asked_end,
    )


# --- internals ----------------------------------------------------------------------------------------


def _location(root: Path, source: str) -> Path:
    return root / SOURCE_LOCATIONS[source]


class _replacing:
    """A temporary path next to ``target``, renamed onto it when the block succeeds: a reader sees the
    old file or the new one, never half of one."""

    def __init__(self, target: Path):
        self.target = target
        self.tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")

    def __enter__(self) -> Path:
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            os.replace(self.tmp, self.target)
        else:
            self.tmp.unlink(missing_ok=True)


def _hour_boundary(instant: datetime, what: str) -> datetime:
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=timezone.utc)
    instant = instant.astimezone(timezone.utc)
    if instant != last_complete_hour(instant):
        raise ValueError(f"{what} {instant.isoformat()} is not on an hour boundary (use {last_complete_hour(instant).isoformat()})")
    return instant


def _loaded_until_commit(instant: datetime) -> CommitProperties:
    return CommitProperties(custom_metadata={LOADED_UNTIL_KEY: instant.astimezone(timezone.utc).isoformat()})


def _first_loaded_hour(root: Path) -> datetime | None:
    table = DeltaTable(_location(root, "raw.orders")).to_pyarrow_dataset()
    first = pc.min(table.to_table(columns=["order_ts"])["order_ts"]).as_py()
    return last_complete_hour(first) if first is not None else None


def _main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("project_dir", type=Path)
    parser.add_argument("--start", type=date.fromisoformat, default=date(2024, 1, 1))
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--orders-per-day", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--append-day", type=date.fromisoformat, help="append this day instead of regenerating"
    )
    args = parser.parse_args(argv)
    if args.append_day:
        counts = append_demo_day(
            args.project_dir, args.append_day, orders_per_day=args.orders_per_day, seed=args.seed
        )
    else:
        counts = generate_demo_data(
            args.project_dir,
            start=args.start,
            days=args.days,
            orders_per_day=args.orders_per_day,
            seed=args.seed,
        )
    for name, rows in counts.items():
        print(f"{name}: {rows} rows")


