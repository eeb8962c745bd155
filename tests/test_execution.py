"""Spark + Delta: windows are replaced atomically, the leakage guard holds, readers see only commits."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from incremental_assets import delta
from incremental_assets.errors import StorageError, WindowError
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.plan.run_plan import plan_run, plan_window
from incremental_assets.spark.executor import Executor

from helpers import EVENTS_SOURCE, table_rows, table_uri, utc, write_events

SOURCES = EVENTS_SOURCE

DAILY = """\
MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
SELECT CAST(ts AS DATE) AS ds, k, COUNT(*) AS n, SUM(v) AS total
FROM raw.events
WHERE ts BETWEEN @start_dt AND @end_dt
GROUP BY CAST(ts AS DATE), k
"""


@pytest.fixture
def project(make_project):
    def build(models: dict[str, str], days: int = 6):
        root = make_project({"sources.yaml": SOURCES, **{f"models/{k}.sql": v for k, v in models.items()}})
        write_events(root / "data" / "events", utc(2024, 1, 1), 24 * days)
        return load_project(root)

    return build


def run(spark, p, name, start=None, end=None, **kw):
    window = TimeWindow(utc(*start), utc(*end)) if start else None
    ex = Executor(spark, p)
    return [
        ex.execute(plan, **kw)
        for plan in (plan_window(p, p.model(name), window) if window else [plan_run(p, p.model(name), None)])
    ]


def test_window_replace_touches_only_its_partitions(spark, project):
    p = project({"daily": DAILY})
    (first,) = run(spark, p, "s.daily", (2024, 1, 1), (2024, 1, 4))
    assert first.rows == 9 and first.version == 0 and first.partitions == 3
    (second,) = run(spark, p, "s.daily", (2024, 1, 4), (2024, 1, 6))
    assert second.version == 1
    rows = table_rows(table_uri(p, "s.daily"))
    assert len(rows) == 15 and sum(r[2] for r in rows) == 24 * 5
    assert DeltaTable(table_uri(p, "s.daily")).metadata().partition_columns == ["ia_interval"]


def test_rerunning_a_window_is_idempotent(spark, project):
    p = project({"daily": DAILY})
    run(spark, p, "s.daily", (2024, 1, 1), (2024, 1, 6))
    before = table_rows(table_uri(p, "s.daily"))
    (again,) = run(spark, p, "s.daily", (2024, 1, 2), (2024, 1, 4))
    assert again.rows == 6 and again.version == 1
    assert table_rows(table_uri(p, "s.daily")) == before


def test_leakage_guard_drops_rows_outside_the_window(spark, project):
    # The WHERE is deliberately wrong: it reads three days before the window too.
    leaky = DAILY.replace(
        "WHERE ts BETWEEN @start_dt AND @end_dt", "WHERE ts BETWEEN @start_dt - INTERVAL 3 DAYS AND @end_dt"
    )
    p = project({"daily": leaky})
    run(spark, p, "s.daily", (2024, 1, 1), (2024, 1, 3))
    marker = table_rows(table_uri(p, "s.daily"))
    (result,) = run(spark, p, "s.daily", (2024, 1, 4), (2024, 1, 5))
    assert result.rows == 3, "only the window's own day may be written"
    rows = table_rows(table_uri(p, "s.daily"))
    assert [r for r in rows if str(r[0]) < "2024-01-04"] == marker, "earlier intervals were overwritten"
    assert {str(r[0]) for r in rows} == {"2024-01-01", "2024-01-02", "2024-01-04"}


def test_empty_window_removes_stale_rows(spark, project):
    p = project({"daily": DAILY})
    run(spark, p, "s.daily", (2024, 1, 1), (2024, 1, 4))
    # The source loses day 2 (e.g. a correction upstream): re-running day 2 must leave it empty.
    write_events(Path(p.directory) / "data" / "events", utc(2024, 1, 1), 24)
    (result,) = run(spark, p, "s.daily", (2024, 1, 2), (2024, 1, 3))
    assert result.rows == 0
    assert {str(r[0]) for r in table_rows(table_uri(p, "s.daily"))} == {"2024-01-01", "2024-01-03"}


def test_misaligned_window_is_rejected(spark, project):
    p = project({"daily": DAILY})
    with pytest.raises(WindowError, match=r"not on day boundaries: end 2024-01-02 12:00 falls inside"):
        plan_run(p, p.model("s.daily"), TimeWindow(utc(2024, 1, 1), utc(2024, 1, 2, 12)))
    with pytest.raises(WindowError, match="starts before the model's start"):
        plan_run(p, p.model("s.daily"), TimeWindow(utc(2023, 12, 31), utc(2024, 1, 2)))


def test_failed_commit_leaves_the_table_as_it_was(spark, project, monkeypatch):
    p = project({"daily": DAILY})
    run(spark, p, "s.daily", (2024, 1, 1), (2024, 1, 4))
    before = table_rows(table_uri(p, "s.daily"))

    def broken(*args, **kwargs):
        raise StorageError("simulated: the object store refused the commit")

    monkeypatch.setattr(delta, "commit_staged", broken)
    with pytest.raises(StorageError, match="simulated"):
        run(spark, p, "s.daily", (2024, 1, 2), (2024, 1, 6))
    assert DeltaTable(table_uri(p, "s.daily")).version() == 0
    assert table_rows(table_uri(p, "s.daily")) == before


def test_stray_files_in_the_table_folder_are_never_read(spark, project, make_project):
    p = project(
        {
            "daily": DAILY,
            "weekly": """
        MODEL (name s.total, kind FULL);
        SELECT k, SUM(n) AS n FROM s.daily GROUP BY k
    """,
        }
    )
    staged = []
    run(spark, p, "s.daily", (2024, 1, 1), (2024, 1, 3), before_commit=staged.append)
    # A crashed run's files (here: a copy with absurd counts) sit in the folder but were never committed.
    orphan = Path(staged[0]) / "ia_interval=2024-01-01" / "part-orphan.parquet"
    pq.write_table(
        pa.table(
            {
                "ds": pa.array([None], pa.date32()),
                "k": ["k0"],
                "n": pa.array([10**9], pa.int64()),
                "total": pa.array([1], pa.int64()),
            }
        ),
        orphan,
    )
    (total,) = run(spark, p, "s.total")
    assert sorted(table_rows(table_uri(p, "s.total"))) == [("k0", 16), ("k1", 16), ("k2", 16)]


def test_full_model_is_replaced_whole(spark, project):
    p = project(
        {
            "daily": DAILY,
            "total": """
        MODEL (name s.total, kind FULL);
        SELECT k, SUM(n) AS n FROM s.daily GROUP BY k
    """,
        }
    )
    run(spark, p, "s.daily", (2024, 1, 1), (2024, 1, 3))
    run(spark, p, "s.total")
    assert table_rows(table_uri(p, "s.total")) == [("k0", 16), ("k1", 16), ("k2", 16)]
    run(spark, p, "s.daily", (2024, 1, 3), (2024, 1, 5))
    (r,) = run(spark, p, "s.total")
    assert r.version == 1 and r.rows == 3
    assert table_rows(table_uri(p, "s.total")) == [("k0", 32), ("k1", 32), ("k2", 32)]


def test_view_is_inlined_into_consumers(spark, project):
    p = project(
        {
            "daily": DAILY,
            "v": """
        MODEL (name s.v, kind VIEW);
        SELECT ds, n * 10 AS n10 FROM s.daily
    """,
            "total": """
        MODEL (name s.total, kind FULL);
        SELECT SUM(n10) AS n FROM s.v
    """,
        }
    )
    run(spark, p, "s.daily", (2024, 1, 1), (2024, 1, 2))
    (view,) = run(spark, p, "s.v")
    assert view.write == "view" and view.rows is None and not delta.exists(table_uri(p, "s.v"))
    run(spark, p, "s.total")
    assert table_rows(table_uri(p, "s.total")) == [(240,)]


def test_hourly_model_and_string_time_column_with_format(spark, project):
    p = project(
        {
            "hourly": """
            MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly');
            SELECT date_trunc('HOUR', ts) AS h, COUNT(*) AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
              GROUP BY 1
        """,
            "bystring": """
            MODEL (name s.bystring, kind INCREMENTAL_BY_TIME_RANGE (time_column (day_key, '%Y%m%d')),
              start '2024-01-01');
            SELECT date_format(ts, 'yyyyMMdd') AS day_key, COUNT(*) AS n FROM raw.events
            WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1
        """,
        }
    )
    (h,) = run(spark, p, "s.hourly", (2024, 1, 1, 22), (2024, 1, 2, 2))
    assert h.rows == 4 and h.partitions == 2  # an hourly table's files are cut by day
    actions = pa.table(DeltaTable(table_uri(p, "s.hourly")).get_add_actions(flatten=True))
    assert set(actions.column("partition.ia_day").to_pylist()) == {"2024-01-01", "2024-01-02"}
    keys = set(delta.interval_row_counts(table_uri(p, "s.hourly")))
    assert keys == {"2024-01-01T22", "2024-01-01T23", "2024-01-02T00", "2024-01-02T01"}
    (s,) = run(spark, p, "s.bystring", (2024, 1, 2), (2024, 1, 4))
    assert table_rows(table_uri(p, "s.bystring")) == [("20240102", 24), ("20240103", 24)]


def test_integer_time_column_with_format(spark, project):
    """``time_column (day_int, '%Y%m%d')`` on an INTEGER column (20240102), as SQLMesh allows."""
    p = project(
        {
            "byint": """
            MODEL (name s.byint, kind INCREMENTAL_BY_TIME_RANGE (time_column (day_int, '%Y%m%d')),
              start '2024-01-01');
            SELECT CAST(date_format(ts, 'yyyyMMdd') AS INT) AS day_int, COUNT(*) AS n FROM raw.events
            WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1
        """
        }
    )
    (r,) = run(spark, p, "s.byint", (2024, 1, 2), (2024, 1, 4))
    assert r.partitions == 2
    assert table_rows(table_uri(p, "s.byint")) == [(20240102, 24), (20240103, 24)]
    run(spark, p, "s.byint", (2024, 1, 3), (2024, 1, 5))  # replaces its window's day only
    assert table_rows(table_uri(p, "s.byint")) == [(20240102, 24), (20240103, 24), (20240104, 24)]


def test_unaliased_expressions_are_named_as_in_sqlmesh(spark, project):
    """``SELECT v * 2`` writes a column ``_col_0`` (SQLMesh's name), which a downstream model selects."""
    p = project(
        {
            "u": "MODEL (name s.u, kind FULL); SELECT v * 2, UPPER(k), CAST(ts AS DATE), k FROM raw.events",
            "down": "MODEL (name s.down, kind FULL); SELECT SUM(_col_0) AS doubled, MAX(_col_1) AS k FROM s.u",
        },
        days=1,
    )
    run(spark, p, "s.u")
    assert DeltaTable(table_uri(p, "s.u")).schema().to_arrow().names == ["_col_0", "_col_1", "ts", "k"]
    run(spark, p, "s.down")
    assert len(table_rows(table_uri(p, "s.down"))) == 1


def test_an_interval_column_is_refused_in_one_line_before_anything_is_written(spark, project):
    from incremental_assets.errors import ModelQueryError

    p = project({"iv": "MODEL (name s.iv, kind FULL);\nSELECT k,\n  INTERVAL 1 DAY AS one_day FROM raw.events"}, days=1)
    with pytest.raises(ModelQueryError) as caught:
        run(spark, p, "s.iv")
    assert str(caught.value).startswith(f"{p.model('s.iv').path}:3: model s.iv: column one_day is of type interval")
    assert "cannot store (fix: cast it" in str(caught.value)
    assert not Path(table_uri(p, "s.iv")).exists()


def test_a_failed_first_run_leaves_no_table_folder(spark, project):
    p = project({"daily": DAILY}, days=1)

    def refuse(staging: str) -> None:
        assert Path(staging).is_dir() and Path(staging).parent == Path(table_uri(p, "s.daily"))
        raise RuntimeError("lost before the commit")

    with pytest.raises(RuntimeError, match="lost before the commit"):
        run(spark, p, "s.daily", (2024, 1, 1), (2024, 1, 2), before_commit=refuse)
    assert not Path(table_uri(p, "s.daily")).exists()  # no empty folder a reader would take for a broken table
    (first,) = run(spark, p, "s.daily", (2024, 1, 1), (2024, 1, 2))
    assert first.version == 0


def test_render_names_every_input_and_the_clamp(spark, project):
    p = project({"daily": DAILY})
    text = plan_run(p, p.model("s.daily"), TimeWindow(utc(2024, 1, 1), utc(2024, 1, 8))).render()
    assert "-- raw__events: source raw.events" in text
    assert "FROM raw__events AS events" in text
    assert "CAST('2024-01-07 23:59:59.999999' AS TIMESTAMP)" in text
    assert "__window.ds < CAST('2024-01-08 00:00:00' AS TIMESTAMP)" in text


def test_delta_source_files_are_pruned_to_the_window(spark, make_project):
    import pyarrow.compute as pc
    from deltalake import write_deltalake

    root = make_project({"sources.yaml": SOURCES, "models/daily.sql": DAILY})
    path = root / "data" / "events"
    write_events(path, utc(2024, 1, 1), 24 * 10)
    table = DeltaTable(str(path)).to_pyarrow_table()
    table = table.append_column("day", pc.cast(table.column("ts"), pa.date32()))
    write_deltalake(str(path), table, mode="overwrite", partition_by=["day"], schema_mode="overwrite")
    p = load_project(root)
    (result,) = run(spark, p, "s.daily", (2024, 1, 4), (2024, 1, 6))
    assert result.inputs["raw__events"].startswith("raw.events: 2 files"), result.inputs
    assert result.rows == 6
