"""The simulated shop behind the demo's data: items, customers and each day's orders, seeded and
deterministic (no files written here)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_EPOCH = date(1970, 1, 1)

_MICROS_PER_HOUR = 3_600_000_000

_MICROS_PER_DAY = 24 * _MICROS_PER_HOUR

# Random streams: each kind of data draws from its own stream so that changing one never shifts another.
_ITEMS_STREAM = 1

_CUSTOMERS_STREAM = 2

_DAY_STREAM = 3

# --- volume -------------------------------------------------------------------------------------------
# orders_per_day is the volume of an ordinary mid-2024 day; growth compounds from there.
_TREND_ANCHOR = date(2024, 7, 1)

_YEARLY_GROWTH = 1.20

# Monday .. Sunday, normalised to average 1.
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
    "sports": (9.0, 400.0, ("Yoga Mat", "Water Bottle", "Dumbbell", "Tennis Racket", "Bike Light", "Backpack")),
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


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=timezone.utc)


def _micros(instant: datetime) -> int:
    return _days_since_epoch(instant.date()) * _MICROS_PER_DAY + (instant - _midnight(instant.date())) // timedelta(
        microseconds=1
    )


def _hours_since_epoch(instant: datetime) -> int:
    return _micros(instant) // _MICROS_PER_HOUR


def _hours(start: datetime, end: datetime) -> list[datetime]:
    out, hour = [], start
    while hour < end:
        out.append(hour)
        hour += timedelta(hours=1)
    return out


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
    offsets = np.where(before, -rng.integers(1, 3 * 365 + 1, size=count), rng.integers(0, 365, size=count))
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
