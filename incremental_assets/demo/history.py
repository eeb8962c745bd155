"""The demo's sources from a start day: items, customers, and every order up to a day or an hour,
replacing what was there."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from deltalake import write_deltalake

from incremental_assets.demo.shop import _DayBatch, _make_customers, _make_items, _micros, _midnight, _Shop
from incremental_assets.demo.sources import hour_boundary, loaded_until_commit, location, replacing


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
    :func:`~incremental_assets.demo.sources.last_complete_hour`) every hour from ``start`` up to ``until``;
    ``days`` is then ignored. Returns the number of rows written per source name.

    >>> import tempfile
    >>> counts = generate_demo_data(tempfile.mkdtemp(), days=7, orders_per_day=50)
    >>> sorted(counts)
    ['raw.customers', 'raw.items', 'raw.order_items', 'raw.orders']
    >>> counts["raw.items"], counts["raw.customers"]
    (100, 500)
    """
    if until is not None:
        until = hour_boundary(until, "until")
        days = (until.date() - start).days + (1 if until.time() != time(0) else 0)
        if until <= _midnight(start):
            raise ValueError(f"until {until.isoformat()} must be after start {start.isoformat()}")
    if days < 1:
        raise ValueError(f"days must be at least 1, got {days}")
    if orders_per_day < 1:
        raise ValueError(f"orders_per_day must be at least 1, got {orders_per_day}")
    root = Path(project_dir)
    location(root, "raw.orders").parent.mkdir(parents=True, exist_ok=True)
    items, customers = _write_items_and_customers(root, start, orders_per_day, seed)
    shop = _Shop.from_tables(customers, items, seed)
    day_batches = [shop.orders_for_day(start + timedelta(days=i), orders_per_day) for i in range(days)]
    batch = _DayBatch.concat(day_batches)
    loaded = until or _midnight(start + timedelta(days=days))
    if until is not None:
        batch = batch.select(batch.order_ts < _micros(until))
    orders, order_items = batch.to_tables(first_order_id=1)
    for name, table in (("raw.order_items", order_items), ("raw.orders", orders)):
        write_deltalake(
            location(root, name),
            table,
            mode="overwrite",
            schema_mode="overwrite",
            partition_by=["order_date"],
            commit_properties=loaded_until_commit(loaded),
        )
    return {
        "raw.orders": orders.num_rows,
        "raw.order_items": order_items.num_rows,
        "raw.customers": customers.num_rows,
        "raw.items": items.num_rows,
    }


def _write_items_and_customers(root: Path, start: date, orders_per_day: int, seed: int) -> tuple[pa.Table, pa.Table]:
    """The shop's items (CSV) and customers (parquet), each file replaced whole."""
    items = _make_items(seed)
    with replacing(location(root, "raw.items")) as tmp:
        pa_csv.write_csv(items, tmp, pa_csv.WriteOptions(quoting_style="needed"))
    customers = _make_customers(start, orders_per_day, seed)
    with replacing(location(root, "raw.customers")) as tmp:
        pq.write_table(customers, tmp)
    return items, customers
