"""What a table's Delta log says about its contents without reading a data file: row counts and column types.

Every writer records ``numRecords`` in the statistics of each file it adds, so the table's row count (and
each interval partition's) is a sum over the current version's add actions: no Spark job, no scan.
Column types are the log's schema in Spark SQL's names (``bigint``, ``decimal(18,2)``), the names model
headers and ``sources.yaml`` use.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from incremental_assets.delta.day_files import interval_range
from incremental_assets.delta.tables import BUCKET_COLUMN, DAY_COLUMN, PARTITION_COLUMN, exists, open_table

# Delta's primitive type names that Spark SQL spells differently.
_SPARK_NAMES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}


def spark_type(delta_type: Any) -> str:
    """A Delta schema type in Spark SQL's spelling, nested types included.

    >>> from deltalake.schema import PrimitiveType, ArrayType
    >>> spark_type(PrimitiveType("long")), spark_type(ArrayType(PrimitiveType("integer")))
    ('bigint', 'array<int>')
    """
    kind = getattr(delta_type, "type", None)
    if kind == "array":
        return f"array<{spark_type(delta_type.element_type)}>"
    if kind == "map":
        return f"map<{spark_type(delta_type.key_type)},{spark_type(delta_type.value_type)}>"
    if kind == "struct":
        fields = ",".join(f"{f.name}:{spark_type(f.type)}" for f in delta_type.fields)
        return f"struct<{fields}>"
    return _SPARK_NAMES.get(str(kind), str(kind))


def file_stats(footer: pq.FileMetaData, *, by_day: bool) -> str:
    """The statistics an add action records for a data file: its row count, and for a file of a table
    cut by day the first and last ``ia_interval`` it holds (what a later replace of some of them reads)."""
    stats: dict[str, object] = {"numRecords": footer.num_rows}
    span = interval_range(footer) if by_day else None
    if span is not None:
        stats.update(minValues={PARTITION_COLUMN: span[0]}, maxValues={PARTITION_COLUMN: span[1]})
    return json.dumps(stats)


def column_types(
    uri: str, *, drop: tuple[str, ...] = (PARTITION_COLUMN, DAY_COLUMN, BUCKET_COLUMN)
) -> dict[str, str] | None:
    """The table's columns and their Spark SQL types, in table order (None: no table yet).

    The interval and bucket partition columns are the framework's own and are left out."""
    if not exists(uri):
        return None
    try:
        table = open_table(uri)
    except TableNotFoundError:
        return None
    return {f.name: spark_type(f.type) for f in table.schema().fields if f.name not in drop}


def _add_actions(table: DeltaTable) -> pa.Table:
    return pa.table(table.get_add_actions(flatten=True))


def row_count(uri: str) -> int | None:
    """Rows in the table's current version, summed from the log's file statistics (None: no table, or a
    file was added without statistics, so the log alone cannot say)."""
    if not exists(uri):
        return None
    actions = _add_actions(open_table(uri))
    if actions.num_rows == 0:
        return 0
    counts = actions.column("num_records").to_pylist()
    if any(c is None for c in counts):
        return None
    return int(sum(counts))


def interval_row_counts(uri: str) -> dict[str, int] | None:
    """Rows per interval partition (the interval's key, as in ``ia_interval``) of the current version,
    from the log's file statistics; None when the table is not partitioned by interval or lacks statistics.

    A table cut by day holds several intervals per file: its counts come from the ``ia_interval`` column
    of its files (that column only is read)."""
    if not exists(uri):
        return None
    table = open_table(uri)
    if DAY_COLUMN in table.metadata().partition_columns:
        return _counted(table)
    if PARTITION_COLUMN not in table.metadata().partition_columns:
        return None
    actions = _add_actions(table)
    out: dict[str, int] = {}
    if actions.num_rows == 0:
        return out
    for key, count in zip(
        actions.column(f"partition.{PARTITION_COLUMN}").to_pylist(), actions.column("num_records").to_pylist()
    ):
        if count is None:
            return None
        out[str(key)] = out.get(str(key), 0) + int(count)
    return out


def _counted(table: DeltaTable) -> dict[str, int]:
    """Rows per ``ia_interval`` value of a day-cut table, counted from that column of its files."""
    values = table.to_pyarrow_dataset().to_table(columns=[PARTITION_COLUMN]).column(PARTITION_COLUMN)
    return {str(item["values"]): int(item["counts"]) for item in values.value_counts().to_pylist()}
