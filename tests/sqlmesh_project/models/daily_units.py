import typing as t
from datetime import datetime

import pandas as pd
from sqlmesh import ExecutionContext, model
from sqlmesh.core.model.kind import ModelKindName


@model(
    "bakery.daily_units",
    kind=dict(name=ModelKindName.INCREMENTAL_BY_TIME_RANGE, time_column="ds"),
    columns={"ds": "date", "units": "int"},
    depends_on=["bakery.daily_sales"],
)
def execute(context: ExecutionContext, start: datetime, end: datetime, execution_time: datetime, **kwargs: t.Any) -> pd.DataFrame:
    table = context.resolve_table("bakery.daily_sales")
    return context.fetchdf(
        f"SELECT ds, CAST(SUM(quantity) AS INT) AS units FROM {table} "
        f"WHERE ds BETWEEN DATE '{start.date()}' AND DATE '{end.date()}' GROUP BY ds"
    )
