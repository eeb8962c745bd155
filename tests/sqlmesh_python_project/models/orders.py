import typing as t
from datetime import datetime

import pandas as pd
from helper import days
from sqlglot.expressions import to_column

from sqlmesh import model
from sqlmesh.core.model import IncrementalByTimeRangeKind, TimeColumn

ITEMS = "shop.items"


@model(
    "shop.orders",
    kind=IncrementalByTimeRangeKind(time_column=TimeColumn(column="order_ds", format="%Y-%m-%d"), batch_size=2),
    start="2024-01-01",
    cron="@daily",
    columns={"order_id": "int", "item": "text", "amount": "decimal(7, 2)", "order_ds": "text"},
    column_descriptions={"amount": "What the order cost"},
    audits=[
        "assert_amounts_not_negative",
        ("not_null", {"columns": [to_column("order_id"), to_column("item")]}),
        ("accepted_values", {"column": to_column("item"), "is_in": ["apple", "pear"]}),
    ],
)
def execute(context, start: datetime, end: datetime, orders_per_day: int, **kwargs: t.Any) -> pd.DataFrame:
    prices = context.fetchdf(f"SELECT item, price FROM {context.resolve_table(ITEMS)} ORDER BY item", quote_identifiers=True)
    rows = []
    for day in days(start, end):
        for n in range(orders_per_day):
            item = prices["item"][n % len(prices)]
            rows.append({"order_id": day.day * 10 + n, "item": item, "amount": float(prices["price"][n % len(prices)]) * (n + 1), "order_ds": day.isoformat()})
    return pd.DataFrame(rows)
