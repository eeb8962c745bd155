import typing as t
from datetime import datetime

import pandas as pd
from sqlglot import exp

from sqlmesh import ExecutionContext, model

ORDERS = "shop.orders"
SELF = "shop.order_counts"


@model(
    "shop.order_counts",
    kind=dict(name="FULL"),
    cron="@daily",
    columns={"runs": "int", "orders": "int", "last_end": "date", "executed_at": "timestamp"},
)
def execute(context: ExecutionContext, end: datetime, execution_time: datetime, **kwargs: t.Any) -> pd.DataFrame:
    previous = context.fetchdf(exp.select("runs").from_(context.resolve_table(SELF), dialect=context.engine_adapter.dialect))
    orders = context.engine_adapter.fetchdf(exp.select("COUNT(*) AS n").from_(context.resolve_table(ORDERS)), quote_identifiers=True)
    runs = 1 if previous.empty else int(previous["runs"].max()) + 1
    return pd.DataFrame([{"runs": runs, "orders": int(orders["n"][0]), "last_end": end.date(), "executed_at": execution_time}])
