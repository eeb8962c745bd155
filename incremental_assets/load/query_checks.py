"""Checks of a model's query against its header: the time column, the event-time column, a keyed kind's
key, and SQL that Spark runs the same."""

from __future__ import annotations

from typing import Any, Mapping

from sqlglot import exp
from sqlglot.errors import ErrorLevel, UnsupportedError

from incremental_assets.load.header import Property
from incremental_assets.load.query import node_line, output_columns
from incremental_assets.load.reader import HeaderReader
from incremental_assets.model.kinds import (
    CURSOR_MACROS,
    IncrementalByCursor,
    IncrementalByTimeRange,
    Kind,
    MergeKind,
    ScdType2,
    key_columns_missing,
)


def check_spark_equivalent(reader: HeaderReader, query: exp.Query, dialect: str, line: int) -> None:
    """A query in another dialect must have a Spark equivalent: refuse what sqlglot cannot transpile."""
    for join in query.find_all(exp.Join):
        if str(join.args.get("method") or "").upper() == "ASOF":
            raise reader.fail(
                node_line(join, 0) or line,
                f"an ASOF join ({dialect}) has no Spark equivalent",
                hint="rewrite it as a join on the key with a window function picking the latest earlier row",
            )
    try:
        query.sql(dialect="spark", unsupported_level=ErrorLevel.RAISE)
    except UnsupportedError as exc:
        raise reader.fail(
            line, f"the query ({dialect}) has no Spark equivalent: {exc}", hint="rewrite that construct in Spark SQL"
        ) from None


def check_time_column(
    reader: HeaderReader, query: exp.Query, column: str, line: int, declared: Mapping[str, str]
) -> None:
    names = output_columns(query)
    if names is None:
        if declared and column not in declared:
            raise reader.fail(line, f"time_column '{column}' is not among the declared columns")
        return
    if column not in names:
        raise reader.fail(
            line,
            f"time_column '{column}' is not an output column of the query (outputs: {', '.join(names)})",
            hint=f"select the time column, e.g. `... AS {column}`, or name the right column in the kind",
        )


def check_event_time_column(
    reader: HeaderReader, query: exp.Query, kind: Kind, values: Mapping[str, Any], seen: Mapping[str, Property]
) -> None:
    """An event-time column refines the time column of a time-partitioned model and is one of its outputs."""
    column = values.get("event_time_column")
    if column is None:
        return
    line = (seen.get("event_time_column") or seen["physical_properties"]).line
    if not isinstance(kind, IncrementalByTimeRange):
        raise reader.fail(
            line,
            f"event_time_column {column} needs a time column: the model is {kind.name}",
            hint="use kind INCREMENTAL_BY_TIME_RANGE (time_column <partition column>), or remove event_time_column",
        )
    if column == kind.time_column.lower():
        raise reader.fail(
            line, f"event_time_column and the time_column are both {column}", hint="remove event_time_column"
        )
    names = output_columns(query)
    if names is not None and column not in names:
        raise reader.fail(
            line,
            f"event_time_column '{column}' is not an output column of the query (outputs: {', '.join(names)})",
            hint=f"select the event time, e.g. `... AS {column}`",
        )


def check_keyed_kind(reader: HeaderReader, query: exp.Query, kind: Kind, line: int) -> None:
    """Key, cursor and SCD columns must be outputs; cursor macros belong to cursor models only."""
    if not isinstance(kind, IncrementalByCursor):
        for param in query.find_all(exp.Parameter):
            if param.name in CURSOR_MACROS:
                raise reader.fail(
                    node_line(param, 0) or line,
                    f"@{param.name} is a macro of INCREMENTAL_BY_CURSOR models",
                    hint="use kind INCREMENTAL_BY_CURSOR (cursor <column>) or a date macro",
                )
    if not isinstance(kind, MergeKind):
        return
    names = output_columns(query)
    missing = key_columns_missing(kind, names) if names is not None else []
    if missing:
        raise reader.fail(
            line,
            f"kind {kind.name} needs column(s) {', '.join(missing)}, which the query does not output "
            f"(outputs: {', '.join(names or [])})",
            hint="select them, or name the right columns in the kind",
        )
    if isinstance(kind, ScdType2) and names is not None:
        clash = [c for c in (kind.valid_from_name, kind.valid_to_name) if c in names]
        if clash:
            raise reader.fail(
                line,
                f"the query outputs {', '.join(clash)}, which SCD_TYPE_2 adds itself",
                hint="rename the column or set valid_from_name / valid_to_name",
            )
