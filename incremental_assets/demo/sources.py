"""The demo's four sources on disk: where each lives, files replaced whole, and how far the data reaches.

How far a Delta source reaches is recorded in each of its commits (:data:`LOADED_UNTIL_KEY` in the commit
info), so appends continue exactly where the last one stopped.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.dataset as pa_ds
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable

from incremental_assets.demo.shop import _midnight, _Shop
from incremental_assets.model import clock

#: Where each source lives, relative to the project directory.
SOURCE_LOCATIONS: dict[str, str] = {
    "raw.orders": "data/raw/orders",
    "raw.order_items": "data/raw/order_items",
    "raw.customers": "data/raw/customers.parquet",
    "raw.items": "data/raw/items.csv",
}

# Commit info key recording the instant (an hour boundary) up to which the source holds its data.
LOADED_UNTIL_KEY = "incremental_assets.demo.loaded_until"


def location(root: Path, source: str) -> Path:
    return root / SOURCE_LOCATIONS[source]


class replacing:
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


def last_complete_hour(now: datetime | None = None) -> datetime:
    """The end of the last complete hour before ``now`` (default: the clock), in UTC.

    >>> last_complete_hour(datetime(2024, 12, 2, 6, 59, tzinfo=timezone.utc)).isoformat()
    '2024-12-02T06:00:00+00:00'
    """
    now = (now or clock.now()).astimezone(timezone.utc)
    return now.replace(minute=0, second=0, microsecond=0)


def hour_boundary(instant: datetime, what: str) -> datetime:
    """``instant`` in UTC (naive: taken as UTC); an error naming ``what`` when it is not on an hour boundary."""
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=timezone.utc)
    instant = instant.astimezone(timezone.utc)
    if instant != last_complete_hour(instant):
        before = last_complete_hour(instant).isoformat()
        raise ValueError(f"{what} {instant.isoformat()} is not on an hour boundary (use {before})")
    return instant


def loaded_until(project_dir: str | Path, source: str = "raw.orders") -> datetime:
    """The instant up to which a Delta source of the demo holds its data (an hour boundary).

    Read from the newest commit that recorded it; data written before commits recorded it ends at
    midnight after its last order day."""
    path = location(Path(project_dir), source)
    table = DeltaTable(path)
    for commit in table.history():
        if LOADED_UNTIL_KEY in commit:
            return datetime.fromisoformat(commit[LOADED_UNTIL_KEY]).astimezone(timezone.utc)
    last = pc.max(table.to_pyarrow_dataset().to_table(columns=["order_date"])["order_date"]).as_py()
    if last is None:
        raise ValueError(f"{path} holds no orders: generate the demo data first")
    return _midnight(last + timedelta(days=1))


def loaded_until_commit(instant: datetime) -> CommitProperties:
    """The commit properties recording that a source now reaches ``instant``."""
    return CommitProperties(custom_metadata={LOADED_UNTIL_KEY: instant.astimezone(timezone.utc).isoformat()})


def first_loaded_hour(root: Path) -> datetime | None:
    table = DeltaTable(location(root, "raw.orders")).to_pyarrow_dataset()
    first = pc.min(table.to_table(columns=["order_ts"])["order_ts"]).as_py()
    return last_complete_hour(first) if first is not None else None


def saved_shop(root: Path, seed: int) -> _Shop:
    """The shop of the customers and items files written before (appends read them, never regenerate)."""
    customers = pq.read_table(location(root, "raw.customers"))
    items = pa_csv.read_csv(location(root, "raw.items"))
    return _Shop.from_tables(customers, items, seed)


def next_order_id(orders: pa_ds.Dataset) -> int:
    """The order id after the largest one in the orders source."""
    return (pc.max(orders.to_table(columns=["order_id"])["order_id"]).as_py() or 0) + 1
