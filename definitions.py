"""The example shop as one Dagster code location: its SQL models (models/, sources.yaml) and a Python asset
downstream of them.

The Python asset reads a model's table as it would read any Delta table, with the ``deltalake`` package: the
model's days are the table's ``order_date`` values (its ``partition_expr`` metadata names that column), and a
run over a range of days reads and replaces exactly those days, so a backfill of years is one run. (dagster-
deltalake's IO manager reads and writes one partition per run: given a range it reads only the first day.)

``dagster dev`` (workspace.yaml), ``dg dev``, ``dg list defs`` and ``dg check defs`` in this folder load it.
It is the example project's own code, written as any project with Python assets of its own writes it; a
project with SQL models only needs no such file (``-m incremental_assets.definitions`` loads any folder).
"""

from pathlib import Path

import dagster as dg
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from incremental_assets import ModelTranslator, build_definitions, load_project

project = load_project(Path(__file__).resolve().parent)
translator = ModelTranslator()
order_lines = project.model("shop.order_lines")
LINES_URI = f"{project.settings.warehouse}/shop/order_lines"
REVENUE_URI = f"{project.settings.warehouse}/analytics/daily_channel_revenue"

# Every day of shop.order_lines that is materialized (again: late rows, a rebuild) is read again, any day, not
# only the latest, and a day missing here whose upstream day is there is filled, also one the sensor finds
# missing on its first tick (the tables were built before it ran). Dagster's eager condition, without its
# latest-window limit and without forgetting what was missing at the sensor's first evaluation; each day is
# requested once per change (a failed run is not retried in a loop).
#
# "Its model day updated since this day was last updated, and since it was last requested" is written as two
# `since` conditions on single events rather than one on `newly_requested() | newly_updated()`: when a trigger and
# a reset fall in the same tick, Dagster keeps the one that happened later only if neither side is an OR of
# conditions (it has no event times for an OR) and otherwise drops the trigger. A model day replaced just after
# this day's own run, before the sensor's next tick, was then never read again.
_AC = dg.AutomationCondition
_MODEL_DAY_UPDATED = _AC.any_deps_match(_AC.newly_updated()).with_label("model day updated")
KEEP_UP = (
    (
        _AC.newly_missing().since(_AC.newly_requested() | _AC.newly_updated())
        | (_MODEL_DAY_UPDATED.since(_AC.newly_updated()) & _MODEL_DAY_UPDATED.since(_AC.newly_requested())).with_label(
            "model day updated since this day was updated and requested"
        )
    )
    & ~_AC.any_deps_missing()
    & ~_AC.any_deps_in_progress()
    & ~_AC.in_progress()
).with_label("keep_up")


@dg.asset(
    key=["analytics", "daily_channel_revenue"],
    deps=[translator.get_asset_key(order_lines)],
    partitions_def=translator.get_partitions_def(order_lines),
    metadata={"partition_expr": "order_date", "dagster/uri": REVENUE_URI},
    group_name="analytics",
    kinds={"python", "delta"},
    description="Revenue and orders per day and channel, computed in Python from shop.order_lines",
    automation_condition=KEEP_UP,
    backfill_policy=dg.BackfillPolicy.single_run(),  # a range of days is one run
)
def daily_channel_revenue(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    """The run's days of order lines summed per day and channel; those days of the table replaced in one commit."""
    first, end = (t.date() for t in context.partition_time_window)
    days = (pc.field("order_date") >= first) & (pc.field("order_date") < end)
    lines = (
        DeltaTable(LINES_URI)
        .to_pyarrow_dataset()
        .to_table(columns=["order_date", "channel", "order_id", "revenue"], filter=days)
    )
    by_channel = lines.group_by(["order_date", "channel"]).aggregate(
        [("revenue", "sum"), ("order_id", "count_distinct")]
    )
    out = by_channel.rename_columns(["order_date", "channel", "revenue", "orders"])
    out = out.select(["order_date", "channel", "orders", "revenue"]).sort_by([("order_date", "ascending")])
    write_deltalake(
        REVENUE_URI,
        out,
        mode="overwrite",
        predicate=f"order_date >= '{first.isoformat()}' AND order_date < '{end.isoformat()}'",
        partition_by=["order_date"],
    )
    return dg.MaterializeResult(metadata={"lines_read": lines.num_rows, "rows_written": out.num_rows})


python_automation = dg.AutomationConditionSensorDefinition(
    "python_assets_automation",
    target=[daily_channel_revenue],
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=5,
    description="Keeps the Python assets downstream of the models up to date (their automation conditions)",
)

defs = dg.Definitions.merge(
    build_definitions(project, translator=translator),
    dg.Definitions(
        assets=[daily_channel_revenue],
        sensors=[python_automation],
    ),
)
