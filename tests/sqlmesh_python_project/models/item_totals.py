from sqlglot import exp

from sqlmesh import model
from sqlmesh.core.macros import MacroEvaluator


@model("shop.item_totals", is_sql=True, kind="FULL", audits=["not_null_items"])
def entrypoint(evaluator: MacroEvaluator) -> str:
    # SQL text in the project's dialect (DuckDB), as ibis.to_sql(...) returns it
    return 'SELECT "item", CAST(SUM("amount") AS DECIMAL(10, 2)) AS "total" FROM "shop"."orders" GROUP BY 1'
