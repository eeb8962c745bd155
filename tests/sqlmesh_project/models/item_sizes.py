import typing as t
from datetime import datetime

import pandas as pd
from sqlmesh import ExecutionContext, model

from models.shared import size_label


@model(
    "bakery.item_sizes",
    kind="FULL",
    columns={"item": "text", "quantity": "int", "size": "text"},
    depends_on=["bakery.item_totals"],
)
def execute(context: ExecutionContext, start: datetime, end: datetime, execution_time: datetime, **kwargs: t.Any) -> pd.DataFrame:
    table = context.resolve_table("bakery.item_totals")
    df = context.fetchdf(f"SELECT item, quantity FROM {table}")
    df["size"] = df["quantity"].map(size_label)
    return df
