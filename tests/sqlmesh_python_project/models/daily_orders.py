from sqlglot import exp

from macros.macros import in_window
from sqlmesh import model
from sqlmesh.core.macros import MacroEvaluator


@model(
    "shop.daily_orders",
    is_sql=True,
    kind=dict(name="INCREMENTAL_BY_TIME_RANGE", time_column=("order_ds", "%Y-%m-%d")),
    cron="@daily",
    pre_statements=["@noop()"],
)
def entrypoint(evaluator: MacroEvaluator) -> exp.Select:
    names = [c for c in evaluator.columns_to_types("shop.orders") if c in ("order_ds",)]
    return (
        exp.select(*names, "COUNT(*) AS orders")
        .from_("shop.orders")
        .where(in_window(evaluator, exp.to_column("order_ds")))
        .group_by(*names)
    )
