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
import math
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

__all__ = ["SOURCE_LOCATIONS", "AppendResult", "append_demo_day", "append_demo_hours", "generate_demo_data", "last_complete_hour", "loaded_until"]

#: Where each source lives, relative to the project directory.
SOURCE_LOCATIONS: dict[str, str] = {
    "raw.orders": "data/raw/orders",
    "raw.order_items": "data/raw/order_items",
    "raw.customers": "data/raw/customers.parquet",
    "raw.items": "data/raw/items.csv",
}

_EPOCH = date(1970, 1, 1)
_MICROS_PER_HOUR = 3_600_000_000
_MICROS_PER_DAY = 24 * _MICROS_PER_HOUR

# Random streams: each kind of data draws from its own stream so that changing one never shifts another.
_ITEMS_STREAM = 1
_CUSTOMERS_STREAM = 2
_DAY_STREAM = 3
_LATE_STREAM = 4

# Late rows in hourly appends: for each appended hour, the chance that a few orders (1 to 3) of an hour
# loaded before this append arrive with it, and how far back that hour may be.
_LATE_HOUR_CHANCE = 0.12
_LATE_HOURS_BACK = 6
_LATE_BATCHES_MAX = 3  # per append, however many hours it adds
# Commit info key recording the instant (an hour boundary) up to which the source holds its data.
LOADED_UNTIL_KEY = "incremental_assets.demo.loaded_until"

# --- volume -------------------------------------------------------------------------------------------
# orders_per_day is the volume of an ordinary mid-2024 day; growth compounds from there.
_TREND_ANCHOR = date(2024, 7, 1)
_YEARLY_GROWTH = 1.20
# Monday .. Sunday, normalised below to average 1.
_WEEKDAY_FACTOR = np.array([0.90, 0.94, 0.97, 1.00, 1.07, 1.15, 0.97])
_WEEKDAY_FACTOR = _WEEKDAY_FACTOR / _WEEKDAY_FACTOR.mean()
# Late-arriving orders for a day that is already loaded: this share of a day's volume.
_LATE_SHARE = 0.05

# Share of orders per hour of the day (UTC is the shop's local time).
_HOURLY_CURVE = np.array(
    [0.6, 0.35, 0.25, 0.2, 0.2, 0.35, 0.8, 1.6, 2.6, 3.6, 4.4, 5.0,
     5.6, 5.3, 4.8, 4.6, 4.8, 5.2, 5.9, 6.6, 6.9, 6.0, 4.0, 2.0]
)  # fmt: skip
_HOURLY_CURVE = _HOURLY_CURVE / _HOURLY_CURVE.sum()

# --- orders -------------------------------------------------------------------------------------------
_STATUSES = ["placed", "shipped", "cancelled", "returned"]
_STATUS_SHARE = [0.05, 0.80, 0.08, 0.07]
_CHANNELS = ["web", "app", "store"]
_CHANNEL_SHARE = [0.52, 0.36, 0.12]
_STORE_OPEN_HOURS = (9, 20)  # stores take orders from 09:00 to 19:59; other hours fall back to web
_LINES_PER_ORDER_SHARE = [0.52, 0.27, 0.14, 0.07]  # 1, 2, 3 or 4 lines
_QUANTITY_SHARE = [0.62, 0.20, 0.09, 0.05, 0.04]  # 1 .. 5 units

# --- items --------------------------------------------------------------------------------------------
_ITEM_COUNT = 100
_FIRST_ITEM_ID = 1001
# category -> (lowest price, highest price, nouns)
_CATEGORIES: dict[str, tuple[float, float, tuple[str, ...]]] = {
    "electronics": (15.0, 900.0, ("Headphones", "Charger", "Speaker", "Keyboard", "Monitor", "Webcam")),
    "books": (6.0, 45.0, ("Cookbook", "Novel", "Atlas", "Field Guide", "Workbook", "Biography")),
    "home": (8.0, 250.0, ("Lamp", "Cushion", "Kettle", "Rug", "Vase", "Clock")),
    "garden": (5.0, 300.0, ("Planter", "Hose", "Trowel", "Bird Feeder", "Lantern", "Seed Kit")),
    "toys": (7.0, 120.0, ("Puzzle", "Building Set", "Plush Bear", "Kite", "Board Game", "Robot")),
    "clothing": (12.0, 180.0, ("Jacket", "Hoodie", "Scarf", "Sneakers", "Cap", "Raincoat")),
    "beauty": (4.0, 90.0, ("Face Cream", "Shampoo", "Lip Balm", "Perfume", "Soap Set", "Hair Oil")),
    "sports": (
        9.0, 400.0, ("Yoga Mat", "Water Bottle", "Dumbbell", "Tennis Racket", "Bike Light", "Backpack")
    ),
}
_ITEM_ADJECTIVES = (
    "Classic", "Compact", "Deluxe", "Eco", "Everyday", "Nordic", "Pro", "Retro", "Smart", "Travel",
)  # fmt: skip

# --- customers ----------------------------------------------------------------------------------------
_COUNTRIES = ["US", "GB", "DE", "FR", "NL", "ES", "IT", "SE", "PL", "CA"]
_COUNTRY_SHARE = [0.22, 0.14, 0.14, 0.11, 0.08, 0.08, 0.07, 0.06, 0.05, 0.05]
_BUSINESS_SHARE = 0.18
_SIGNED_UP_BEFORE_START = 0.4  # the rest sign up during the first year
_FIRST_NAMES = (
    "Ada", "Ben", "Chloe", "Dmitri", "Elif", "Finn", "Grace", "Hugo", "Ines", "Jonas", "Kenji", "Lea",
    "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wim", "Yara",
)  # fmt: skip
_LAST_NAMES = (
    "Andersson", "Bakker", "Costa", "Dubois", "Evans", "Fischer", "Garcia", "Hansen", "Ivanova",
    "Jansen", "Kowalski", "Lopez", "Martin", "Novak", "Okafor", "Peters", "Rossi", "Schmidt", "Tanaka",
    "Weber",
)  # fmt: skip


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
    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
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
) -> AppendResult:
    """Append the next hours of orders to the Delta sources, in place: ``hours`` hours after the data's
    end (:func:`loaded_until`), or up to ``until`` (an hour boundary), by default up to the last complete
    hour before ``now`` (the clock unless given).

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
    if end <= start:
        return AppendResult(start, start, {"raw.orders": 0, "raw.order_items": 0})
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
        late_orders=sum(len(b.order_ts) for b in late), late_hours=late_hours, quiet_hours=quiet,
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


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=timezone.utc)


def _micros(instant: datetime) -> int:
    return _days_since_epoch(instant.date()) * _MICROS_PER_DAY + (instant - _midnight(instant.date())) // timedelta(microseconds=1)


def _hours_since_epoch(instant: datetime) -> int:
    return _micros(instant) // _MICROS_PER_HOUR


def _hours(start: datetime, end: datetime) -> list[datetime]:
    out, hour = [], start
    while hour < end:
        out.append(hour)
        hour += timedelta(hours=1)
    return out


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


def _days_since_epoch(day: date) -> int:
    return (day - _EPOCH).days


def _take(labels: list[str], codes: np.ndarray) -> pa.Array:
    """Strings for integer codes, without building a numpy string array per row."""
    return pc.take(pa.array(labels, pa.string()), pa.array(codes))


def _make_items(seed: int) -> pa.Table:
    rng = np.random.default_rng([seed, _ITEMS_STREAM])
    category_names = list(_CATEGORIES)
    categories = rng.permutation(np.arange(_ITEM_COUNT) % len(category_names))
    names: list[str] = []
    prices: list[float] = []
    used: set[str] = set()
    for category_index in categories:
        low, high, nouns = _CATEGORIES[category_names[category_index]]
        name = f"{rng.choice(_ITEM_ADJECTIVES)} {rng.choice(nouns)}"
        while name in used:  # every item gets its own name
            name = f"{rng.choice(_ITEM_ADJECTIVES)} {rng.choice(nouns)}"
        used.add(name)
        names.append(name)
        # Log-uniform so cheap items are common; shop prices end in .99 or .49.
        price = math.exp(rng.uniform(math.log(low), math.log(high)))
        prices.append(math.floor(price) + (0.99 if rng.random() < 0.8 else 0.49))
    return pa.table(
        {
            "item_id": pa.array(np.arange(_ITEM_COUNT, dtype=np.int64) + _FIRST_ITEM_ID),
            "name": pa.array(names, pa.string()),
            "category": _take(category_names, categories),
            "unit_price": pa.array(np.round(prices, 2)).cast(pa.decimal128(10, 2)),
        }
    )


def _make_customers(start: date, orders_per_day: int, seed: int) -> pa.Table:
    rng = np.random.default_rng([seed, _CUSTOMERS_STREAM])
    count = max(50, orders_per_day * 10)
    start_day = _days_since_epoch(start)
    before = rng.random(count) < _SIGNED_UP_BEFORE_START
    offsets = np.where(
        before, -rng.integers(1, 3 * 365 + 1, size=count), rng.integers(0, 365, size=count)
    )
    # Customer ids are handed out in signup order, as a real shop's sequence would.
    signup_days = np.sort(start_day + offsets).astype(np.int32)

    first = _take(list(_FIRST_NAMES), rng.integers(0, len(_FIRST_NAMES), size=count))
    last = _take(list(_LAST_NAMES), rng.integers(0, len(_LAST_NAMES), size=count))
    names = pc.binary_join_element_wise(first, last, " ")

    country_codes = rng.choice(len(_COUNTRIES), size=count, p=_COUNTRY_SHARE)
    countries = _take(_COUNTRIES, country_codes)
    # Raw data from the signup form: some codes typed in lower case, some with stray spaces.
    lower = pa.array(rng.random(count) < 0.12)
    padded = pa.array(rng.random(count) < 0.05)
    countries = pc.if_else(lower, pc.utf8_lower(countries), countries)
    countries = pc.if_else(padded, pc.binary_join_element_wise(" ", countries, " ", ""), countries)

    business = rng.random(count) < _BUSINESS_SHARE
    return pa.table(
        {
            "customer_id": pa.array(np.arange(1, count + 1, dtype=np.int64)),
            "name": names,
            "country": countries,
            "signup_date": pa.array(signup_days, pa.date32()),
            "segment": _take(["consumer", "business"], business.astype(np.int8)),
        }
    )


def _volume_factor(day: date) -> float:
    """How busy a day is relative to an ordinary mid-2024 day: weekday, growth and the holiday rush."""
    years = (day - _TREND_ANCHOR).days / 365.25
    growth = _YEARLY_GROWTH**years
    day_of_year = day.timetuple().tm_yday
    rush = 1.0 + 0.35 * math.exp(-0.5 * ((day_of_year - 340) / 14) ** 2)
    return float(_WEEKDAY_FACTOR[day.weekday()]) * growth * rush


@dataclass(frozen=True)
class _DayBatch:
    """Orders and their lines for some days, before order ids are assigned (ids are positions)."""

    order_ts: np.ndarray  # int64 microseconds since the epoch, sorted within each day
    customer_id: np.ndarray
    status: np.ndarray
    channel: np.ndarray
    line_order: np.ndarray  # position of each line's order in this batch
    line_no: np.ndarray
    item_id: np.ndarray
    quantity: np.ndarray

    @staticmethod
    def concat(batches: list[_DayBatch]) -> _DayBatch:
        order_counts = np.array([len(b.order_ts) for b in batches], dtype=np.int64)
        shifts = np.concatenate([[0], np.cumsum(order_counts)[:-1]])
        return _DayBatch(
            order_ts=np.concatenate([b.order_ts for b in batches]),
            customer_id=np.concatenate([b.customer_id for b in batches]),
            status=np.concatenate([b.status for b in batches]),
            channel=np.concatenate([b.channel for b in batches]),
            line_order=np.concatenate([b.line_order + s for b, s in zip(batches, shifts)]),
            line_no=np.concatenate([b.line_no for b in batches]),
            item_id=np.concatenate([b.item_id for b in batches]),
            quantity=np.concatenate([b.quantity for b in batches]),
        )

    def select(self, keep: np.ndarray) -> _DayBatch:
        """The orders where ``keep`` is true, with their lines."""
        positions = np.cumsum(keep) - 1  # new position of each kept order
        lines = keep[self.line_order]
        return _DayBatch(
            order_ts=self.order_ts[keep],
            customer_id=self.customer_id[keep],
            status=self.status[keep],
            channel=self.channel[keep],
            line_order=positions[self.line_order[lines]],
            line_no=self.line_no[lines],
            item_id=self.item_id[lines],
            quantity=self.quantity[lines],
        )

    def to_tables(self, *, first_order_id: int) -> tuple[pa.Table, pa.Table]:
        order_ids = np.arange(len(self.order_ts), dtype=np.int64) + first_order_id
        order_dates = (self.order_ts // _MICROS_PER_DAY).astype(np.int32)
        timestamp = pa.timestamp("us", tz="UTC")
        orders = pa.table(
            {
                "order_id": pa.array(order_ids),
                "customer_id": pa.array(self.customer_id),
                "order_ts": pa.array(self.order_ts, timestamp),
                "order_date": pa.array(order_dates, pa.date32()),
                "status": _take(_STATUSES, self.status),
                "channel": _take(_CHANNELS, self.channel),
            }
        )
        order_items = pa.table(
            {
                "order_id": pa.array(order_ids[self.line_order]),
                "line_no": pa.array(self.line_no),
                "item_id": pa.array(self.item_id),
                "quantity": pa.array(self.quantity),
                "order_ts": pa.array(self.order_ts[self.line_order], timestamp),
                "order_date": pa.array(order_dates[self.line_order], pa.date32()),
            }
        )
        return orders, order_items


@dataclass(frozen=True)
class _Shop:
    """What a day's orders are drawn from: customers (by signup day) and items (by popularity)."""

    customer_ids: np.ndarray  # sorted by signup day
    signup_days: np.ndarray
    items_by_popularity: np.ndarray  # item ids, best seller first
    seed: int

    @staticmethod
    def from_tables(customers: pa.Table, items: pa.Table, seed: int) -> _Shop:
        customers = customers.sort_by([("signup_date", "ascending"), ("customer_id", "ascending")])
        item_ids = np.sort(items["item_id"].to_numpy())
        rng = np.random.default_rng([seed, _ITEMS_STREAM, 1])
        return _Shop(
            customer_ids=customers["customer_id"].to_numpy(),
            signup_days=customers["signup_date"].cast(pa.int32()).to_numpy(),
            items_by_popularity=rng.permutation(item_ids),
            seed=seed,
        )

    def orders_for_day(
        self, day: date, orders_per_day: int, *, late_after: int = 0, hour: int | None = None, count: int | None = None
    ) -> _DayBatch:
        """One day's orders; with ``late_after`` (orders already loaded) a small late batch instead;
        ``hour`` and ``count`` give exactly ``count`` orders, all in that hour of the day."""
        rng = np.random.default_rng([self.seed, _DAY_STREAM, day.toordinal(), late_after])
        noise = math.exp(rng.normal(0.0, 0.08))
        expected = orders_per_day * _volume_factor(day) * noise
        if count is None:
            count = max(1, round(expected * _LATE_SHARE if late_after else expected))

        hours = rng.choice(24, size=count, p=_HOURLY_CURVE)
        if hour is not None:
            hours = np.full(count, hour)
        order_ts = np.sort(
            _days_since_epoch(day) * _MICROS_PER_DAY
            + hours * _MICROS_PER_HOUR
            + rng.integers(0, _MICROS_PER_HOUR, size=count)
        )
        hours = (order_ts % _MICROS_PER_DAY) // _MICROS_PER_HOUR

        # Only customers who have signed up by this day can order; long-standing ones order most.
        eligible = int(np.searchsorted(self.signup_days, _days_since_epoch(day), side="right"))
        eligible = eligible or len(self.customer_ids)
        picks = np.floor(rng.random(count) ** 1.6 * eligible).astype(np.int64)
        customer_id = self.customer_ids[picks]

        status = rng.choice(len(_STATUSES), size=count, p=_STATUS_SHARE).astype(np.int8)
        channel = rng.choice(len(_CHANNELS), size=count, p=_CHANNEL_SHARE).astype(np.int8)
        store_closed = (hours < _STORE_OPEN_HOURS[0]) | (hours >= _STORE_OPEN_HOURS[1])
        channel[(channel == _CHANNELS.index("store")) & store_closed] = _CHANNELS.index("web")

        # Lines: the first item by popularity, the others near it in the ranking and all different
        # (rank + k * step mod 100 with k <= 3 and step < 25 never repeats).
        lines = rng.choice(4, size=count, p=_LINES_PER_ORDER_SHARE) + 1
        line_order = np.repeat(np.arange(count, dtype=np.int64), lines)
        first_line = np.repeat(np.cumsum(lines) - lines, lines)
        line_index = np.arange(len(line_order)) - first_line
        item_count = len(self.items_by_popularity)
        first_rank = np.floor(rng.random(count) ** 2.2 * item_count).astype(np.int64)
        step = rng.integers(1, max(2, item_count // 4), size=count)
        ranks = (first_rank[line_order] + line_index * step[line_order]) % item_count
        quantity = rng.choice(5, size=len(line_order), p=_QUANTITY_SHARE) + 1

        return _DayBatch(
            order_ts=order_ts,
            customer_id=customer_id,
            status=status,
            channel=channel,
            line_order=line_order,
            line_no=(line_index + 1).astype(np.int32),
            item_id=self.items_by_popularity[ranks],
            quantity=quantity.astype(np.int32),
        )


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


if __name__ == "__main__":
    _main()
