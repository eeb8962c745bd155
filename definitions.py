"""The example shop as one Dagster code location: its SQL models (models/, sources.yaml) and a Python asset
downstream of them.

The Python asset reads a model's partitions through dagster-deltalake's IO manager, as it would read any
Delta table: the model assets say which column holds their partitions (``partition_expr`` metadata, the
model's time column), so a Python user downstream of the SQL models writes nothing custom.

``dagster dev`` (workspace.yaml), ``dg dev``, ``dg list defs`` and ``dg check defs`` in this folder load it.
It is the example project's own code, written as any project with Python assets of its own writes it; a
project with SQL models only needs no such file (``-m incremental_assets.definitions`` loads any folder).
"""

from pathlib import Path

import dagster as dg
import pyarrow as pa
from dagster_deltalake import DeltaLakePyarrowIOManager, LocalConfig

from incremental_assets import ModelTranslator, build_definitions, load_project

project = load_project(Path(__file__).resolve().parent)
translator = ModelTranslator()
order_lines = project.model("shop.order_lines")

# Every day of shop.order_lines that is materialized (again: late rows, a rebuild) is read again, any day, not
# only the latest: Dagster's eager condition without its latest-window limit, evaluated by the sensor below.
KEEP_UP = dg.AutomationCondition.eager().without(dg.AutomationCondition.in_latest_time_window())


@dg.asset(
    key=["analytics", "daily_channel_revenue"],
    ins={"lines": dg.AssetIn(key=translator.get_asset_key(order_lines))},
    partitions_def=translator.get_partitions_def(order_lines),
    metadata={"partition_expr": "order_date"},
    group_name="analytics",
    kinds={"python", "delta"},
    description="Revenue and orders per day and channel, computed in Python from shop.order_lines",
    automation_condition=KEEP_UP,
)
def daily_channel_revenue(context: dg.AssetExecutionContext, lines: pa.Table) -> pa.Table:
    """One day of order lines (the IO manager reads only that partition) summed per channel."""
    by_channel = lines.group_by(["order_date", "channel"]).aggregate(
        [("revenue", "sum"), ("order_id", "count_distinct")]
    )
    out = by_channel.rename_columns(["order_date", "channel", "revenue", "orders"])
    context.add_output_metadata({"lines_read": lines.num_rows})
    return out.select(["order_date", "channel", "orders", "revenue"])


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
        resources={
            "io_manager": DeltaLakePyarrowIOManager(root_uri=project.settings.warehouse, storage_options=LocalConfig())
        },
    ),
)
