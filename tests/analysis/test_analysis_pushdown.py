"""Pushdown: every time-series reference reads only [run_start - before, run_end + after)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlglot
from analysis_sql import parse_model_sql
from sqlglot import exp

from incremental_assets.analysis import SourceBound, analyze_query, pushdown

START = datetime(2024, 3, 10, tzinfo=timezone.utc)
END = datetime(2024, 3, 11, tzinfo=timezone.utc)
TIME_COLUMNS = {"raw.events": "ts", "raw.sessions": "started_at", "dim.users": None}
BOUNDS = {
    "raw.events": SourceBound(timedelta(minutes=30), timedelta(0)),
    "raw.sessions": SourceBound(timedelta(0), timedelta(hours=1)),
    "dim.users": None,
}


def _push(sql: str, bounds=BOUNDS, **kwargs) -> exp.Expression:
    return pushdown(
        parse_model_sql(sql), bounds=bounds, time_columns=TIME_COLUMNS, run_start=START, run_end=END, **kwargs
    )


def _filters(query: exp.Expression) -> dict[str, list[str]]:
    """Alias of each pushed-down derived table -> its filter, in Spark SQL."""
    found: dict[str, list[str]] = {}
    for sub in query.find_all(exp.Subquery):
        inner = sub.this
        if (
            isinstance(inner, exp.Select)
            and inner.args.get("where")
            and isinstance(inner.args["from_"].this, exp.Table)
        ):
            table = inner.args["from_"].this
            key = f"{sub.alias} <- {'.'.join(p.name for p in table.parts)}"
            found.setdefault(key, []).append(inner.args["where"].this.sql("spark"))
    return found


EVENTS_FILTER = "ts >= CAST('2024-03-09 23:30:00' AS TIMESTAMP) AND ts < CAST('2024-03-11 00:00:00' AS TIMESTAMP)"
SESSIONS_FILTER = (
    "started_at >= CAST('2024-03-10 00:00:00' AS TIMESTAMP) AND started_at < CAST('2024-03-11 01:00:00' AS TIMESTAMP)"
)


def test_each_reference_gets_its_own_filter_and_keeps_its_alias():
    out = _push(
        "SELECT e.ts, s.session_id, u.plan FROM raw.events AS e "
        "JOIN raw.sessions s ON s.user_id = e.user_id JOIN dim.users AS u ON u.user_id = e.user_id"
    )
    assert _filters(out) == {"e <- raw.events": [EVENTS_FILTER], "s <- raw.sessions": [SESSIONS_FILTER]}
    # The dimension is read in full, untouched.
    assert [t.sql("spark") for t in out.find_all(exp.Table) if t.name == "users"] == ["dim.users AS u"]


def test_unaliased_reference_is_aliased_by_its_table_name():
    out = _push("SELECT events.ts FROM raw.events WHERE events.ts > @start_dt")
    assert _filters(out) == {"events <- raw.events": [EVENTS_FILTER]}
    assert out.sql("spark").startswith("SELECT events.ts FROM (SELECT * FROM raw.events WHERE")


def test_db_qualified_columns_follow_the_new_alias():
    out = _push("SELECT raw.events.ts FROM raw.events")
    assert out.sql("spark").startswith("SELECT events.ts FROM (SELECT * FROM raw.events WHERE")


def test_quoted_alias_and_table_are_kept_as_written():
    out = _push("SELECT `E`.`ts` FROM `raw`.`events` AS `E`")
    assert out.sql("spark") == f"SELECT `E`.`ts` FROM (SELECT * FROM `raw`.`events` WHERE {EVENTS_FILTER}) AS `E`"


def test_references_inside_ctes_subqueries_and_self_joins_are_all_filtered():
    out = _push(
        """
        WITH recent AS (SELECT * FROM raw.events WHERE kind = 'click')
        SELECT a.ts FROM recent AS a
        JOIN raw.events AS b ON b.user_id = a.user_id
        WHERE a.user_id IN (SELECT user_id FROM raw.events AS c WHERE c.kind = 'buy')
          AND EXISTS (SELECT 1 FROM raw.sessions AS s WHERE s.user_id = a.user_id)
        """
    )
    assert _filters(out) == {
        "events <- raw.events": [EVENTS_FILTER],
        "b <- raw.events": [EVENTS_FILTER],
        "c <- raw.events": [EVENTS_FILTER],
        "s <- raw.sessions": [SESSIONS_FILTER],
    }
    # The CTE name is not a table: it is not wrapped.
    assert "FROM recent AS a" in out.sql("spark")


def test_the_input_query_is_not_modified():
    query = parse_model_sql("SELECT e.ts FROM raw.events AS e JOIN raw.events AS f ON f.id = e.id")
    before = query.copy()
    out = pushdown(query, bounds=BOUNDS, time_columns=TIME_COLUMNS, run_start=START, run_end=END)
    assert query == before
    assert query.sql("spark") == "SELECT e.ts FROM raw.events AS e JOIN raw.events AS f ON f.id = e.id"
    assert out is not query


def test_tables_without_a_bound_are_read_in_full():
    sql = "SELECT e.ts FROM raw.events AS e JOIN raw.other AS o ON o.id = e.id"
    out = _push(sql, bounds={"raw.events": None})
    assert out.sql("spark") == parse_model_sql(sql).sql("spark")


def test_output_round_trips_through_the_spark_dialect():
    out = _push(
        "WITH x AS (SELECT * FROM raw.events) "
        "SELECT x.ts, s.session_id FROM x JOIN raw.sessions AS s ON s.started_at BETWEEN x.ts - INTERVAL 1 "
        "HOUR AND x.ts"
    )
    text = out.sql("spark")
    assert sqlglot.parse_one(text, read="spark").sql("spark") == text


def test_custom_literal_gets_the_table_name_and_the_instant():
    calls = []

    def literal(table: str, instant: datetime) -> exp.Expression:
        calls.append((table, instant))
        return exp.Literal.string(instant.strftime("%Y%m%d%H"))

    out = _push("SELECT ts FROM raw.events", literal=literal)
    assert calls == [("raw.events", START - timedelta(minutes=30)), ("raw.events", END)]
    assert "WHERE ts >= '2024030923' AND ts < '2024031100'" in out.sql("spark")


def test_timezone_aware_instants_are_written_in_utc():
    berlin = timezone(timedelta(hours=1))
    out = pushdown(
        parse_model_sql("SELECT ts FROM raw.events"),
        bounds={"raw.events": SourceBound(timedelta(0), timedelta(0))},
        time_columns=TIME_COLUMNS,
        run_start=datetime(2024, 3, 10, 1, tzinfo=berlin),
        run_end=datetime(2024, 3, 10, 2, tzinfo=berlin),
    )
    assert (
        "ts >= CAST('2024-03-10 00:00:00' AS TIMESTAMP) AND ts < CAST('2024-03-10 01:00:00' AS TIMESTAMP)"
        in out.sql("spark")
    )


def test_analysis_bounds_drive_the_pushdown_end_to_end():
    query = parse_model_sql(
        "SELECT s.started_at, e.url FROM raw.sessions AS s "
        "JOIN raw.events AS e ON e.ts BETWEEN s.started_at - INTERVAL 30 MINUTES AND s.started_at "
        "WHERE s.started_at BETWEEN @start_dt AND @end_dt"
    )
    analysis = analyze_query(
        query, model_name="m.sessions", time_column="started_at", time_columns=TIME_COLUMNS, interval=timedelta(hours=1)
    )
    assert analysis.safety_class == "FullyBatchSafe"
    out = pushdown(query, bounds=analysis.bounds, time_columns=TIME_COLUMNS, run_start=START, run_end=END)
    assert _filters(out) == {
        "s <- raw.sessions": [
            "started_at >= CAST('2024-03-10 00:00:00' AS TIMESTAMP) AND started_at < CAST('2024-03-11 "
            "00:00:00' AS TIMESTAMP)"
        ],
        "e <- raw.events": [EVENTS_FILTER],
    }
