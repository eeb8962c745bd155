"""One more day of orders for the demo's sources: the day :func:`generate_demo_data` would have given,
or late orders for a day already loaded."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from incremental_assets.demo.shop import _midnight
from incremental_assets.demo.sources import loaded_until, loaded_until_commit, location, next_order_id, saved_shop


def append_demo_day(project_dir: str | Path, day: date, *, orders_per_day: int = 200, seed: int = 7) -> dict[str, int]:
    """Append one day of orders and order lines to the Delta sources (one new Delta version each).

    For a day that is not loaded yet this appends exactly the rows that
    :func:`~incremental_assets.demo.history.generate_demo_data` with one more day would have produced
    (same ``orders_per_day`` and ``seed``): new data arrived. For a day that is already loaded it appends
    a small batch of late-arriving orders (about 5% of a day's volume) to that day instead, different on
    each call. Order ids continue after the largest existing one. Customers and items are read from the
    project's files, so call ``generate_demo_data`` first.

    Returns the number of rows appended per source name.

    >>> import tempfile
    >>> from incremental_assets.demo.history import generate_demo_data
    >>> project = tempfile.mkdtemp()
    >>> first = generate_demo_data(project, start=date(2024, 3, 1), days=2, orders_per_day=50)
    >>> added = append_demo_day(project, date(2024, 3, 3), orders_per_day=50)
    >>> sorted(added)
    ['raw.order_items', 'raw.orders']
    """
    root = Path(project_dir)
    shop = saved_shop(root, seed)

    existing = DeltaTable(location(root, "raw.orders")).to_pyarrow_dataset()
    already_loaded = existing.count_rows(filter=pc.field("order_date") == pa.scalar(day, pa.date32()))

    if already_loaded:
        batch = shop.orders_for_day(day, orders_per_day, late_after=already_loaded)
    else:
        batch = shop.orders_for_day(day, orders_per_day)
    orders, order_items = batch.to_tables(first_order_id=next_order_id(existing))
    reached = max(loaded_until(root), _midnight(day + timedelta(days=1)))
    for name, table in (("raw.orders", orders), ("raw.order_items", order_items)):
        commit = loaded_until_commit(reached)
        write_deltalake(
            location(root, name), table, mode="append", partition_by=["order_date"], commit_properties=commit
        )
    return {"raw.orders": orders.num_rows, "raw.order_items": order_items.num_rows}
