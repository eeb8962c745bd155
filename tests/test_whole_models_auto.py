"""`run --auto` and unpartitioned models (FULL, materialized VIEW): each runs when something it reads
changed since its last run (a source without a time column: a file added, removed or rewritten, a new Delta
version), and is left alone otherwise, as the automation sensor decides; a query whose rows depend on when
it runs runs again once its cron ticked since its last run (as the sensor runs it), and one that reads what
the source watch cannot see runs every time.

Real Spark, real Delta tables, the CLI in this process; every table is checked against a recompute with
pandas from the source's rows."""

from __future__ import annotations

from datetime import datetime, timedelta

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from incremental_assets.load.project import load_project
from incremental_assets.model import clock
from incremental_assets.orchestration.instance import open_instance

from helpers import EVENTS_SOURCE, cli_output, table_uri, utc, write_events

SOURCES = (
    EVENTS_SOURCE
    + """- name: raw.keys
  location: data/keys.csv
  format: csv
- name: raw.regions
  location: data/regions
  format: delta
"""
)
MODELS = {
    "models/daily.sql": """MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
SELECT CAST(ts AS DATE) AS ds, k, COUNT(*) AS n, SUM(v) AS v FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
GROUP BY 1, 2
""",
    # reads a model: runs when s.daily was materialized after it
    "models/total.sql": """MODEL (name s.total, kind FULL);
SELECT k, SUM(n) AS n, SUM(v) AS v FROM s.daily GROUP BY k
""",
    # reads a watched source directly: runs when new rows were noticed in it
    "models/all_events.sql": """MODEL (name s.all_events, kind VIEW (materialized true));
SELECT k, COUNT(*) AS n FROM raw.events GROUP BY k
""",
    # its rows depend on when it runs: again after each tick of its cron (none given: daily)
    "models/dated.sql": """MODEL (name s.dated, kind FULL);
SELECT k, SUM(n) AS n, current_date() AS asof FROM s.daily GROUP BY k
""",
    # read sources without a time column: a run when a file or the table changed
    "models/keys.sql": """MODEL (name s.keys, kind FULL);
SELECT k FROM raw.keys
""",
    "models/regions.sql": """MODEL (name s.regions, kind FULL);
SELECT region, COUNT(*) AS n FROM raw.regions GROUP BY region
""",
}
WHOLE = ("s.total", "s.all_events", "s.dated", "s.keys", "s.regions")


def _events(path) -> list[dict]:
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def _append(path, stamps: list[datetime]) -> None:
    table = pa.table(
        {
            "ts": pa.array(stamps, pa.timestamp("us", tz="UTC")),
            "k": pa.array([f"k{i % 3}" for i in range(len(stamps))]),
            "v": pa.array([100 + i for i in range(len(stamps))], pa.int64()),
        }
    )
    write_deltalake(str(path), table, mode="append")


def _recomputed(events: list[dict], until: datetime) -> dict[str, tuple[int, int]]:
    """Per key, the rows and the sum of v of every complete day before ``until`` (what s.total holds)."""
    import pandas as pd

    frame = pd.DataFrame(events)
    frame = frame[frame["ts"] < pd.Timestamp(until)]
    grouped = frame.groupby("k").agg(n=("v", "size"), v=("v", "sum"))
    return {k: (int(r.n), int(r.v)) for k, r in grouped.iterrows()}


@pytest.fixture
def shop(spark, make_project, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    root = make_project({"sources.yaml": SOURCES, **MODELS})
    write_events(root / "data" / "events", utc(2024, 1, 1), 36)  # a day and a half
    (root / "data" / "keys.csv").write_text("k\nk0\nk1\n")
    write_deltalake(str(root / "data" / "regions"), pa.table({"k": ["k0", "k1"], "region": ["north", "south"]}))
    return root


def test_run_auto_runs_a_whole_model_only_when_what_it_reads_changed(shop, capsys):
    root = shop
    project = load_project(root)
    events = root / "data" / "events"

    def versions() -> dict[str, int]:
        return {name: DeltaTable(table_uri(project, name)).version() for name in WHOLE}

    def run(end: datetime, at: datetime = utc(2024, 1, 5, 12)) -> str:
        with clock.pinned(at):
            code, out = cli_output(root, capsys, "run", "--auto", "--end", end.isoformat())
        assert code == 0, out
        return out

    def total() -> dict[str, tuple[int, int]]:
        rows = DeltaTable(table_uri(project, "s.total")).to_pyarrow_table().to_pylist()
        return {r["k"]: (r["n"], r["v"]) for r in rows}

    run(utc(2024, 1, 2, 12))
    first = versions()
    assert total() == _recomputed(_events(events), utc(2024, 1, 2))

    # Nothing new: the FULL models over s.daily and over the key sources, the view over the source and
    # the one reading the clock (its cron did not tick since) are left alone, and said so.
    out = run(utc(2024, 1, 2, 12), at=utc(2024, 1, 5, 23, 59))
    assert versions() == first, out
    for name in ("s.total", "s.keys", "s.regions"):
        assert f"{name}: nothing it reads changed since its last run; not run again" in out
    assert "s.dated: nothing it reads changed and its cron (@daily) did not tick since its last run" in out
    # Past midnight the one reading the clock runs again, alone, and holds the new date; then not again.
    out = run(utc(2024, 1, 2, 12), at=utc(2024, 1, 6, 0, 1))
    assert {n for n, v in versions().items() if v != first[n]} == {"s.dated"}, out
    record = open_instance(project.settings.dagster_home).fetch_materializations(dg.AssetKey(["s", "dated"]), limit=1)
    assert record.records[0].asset_materialization.metadata["execution_time"].value == "2024-01-06T00:01:00+00:00"
    out = run(utc(2024, 1, 2, 12), at=utc(2024, 1, 6, 12))
    assert {n for n, v in versions().items() if v != first[n]} == {"s.dated"}, out
    first = versions()

    # The CSV of keys is rewritten with a key more, then moved away and back (the same file: nothing to
    # run); the regions table gets a new version: each runs its reader alone, once, with the new rows.
    (root / "data" / "keys.csv").write_text("k\nk0\nk1\nk2\n")
    before, out = versions(), run(utc(2024, 1, 2, 12))
    changed = {n for n, v in versions().items() if v != before[n]}
    assert changed == {"s.keys"}, out
    assert sorted(r["k"] for r in DeltaTable(table_uri(project, "s.keys")).to_pyarrow_table().to_pylist()) == [
        "k0",
        "k1",
        "k2",
    ]
    (root / "data" / "keys.csv").rename(root / "data" / "keys-1.csv")
    (root / "data" / "keys-1.csv").rename(root / "data" / "keys.csv")
    before, out = versions(), run(utc(2024, 1, 2, 12))
    assert versions()["s.keys"] == before["s.keys"], out  # the same file, name, size and time as before
    write_deltalake(str(root / "data" / "regions"), pa.table({"k": ["k2"], "region": ["north"]}), mode="append")
    before, out = versions(), run(utc(2024, 1, 2, 12))
    assert {n for n, v in versions().items() if v != before[n]} == {"s.regions"}, out
    regions = DeltaTable(table_uri(project, "s.regions")).to_pyarrow_table().to_pylist()
    assert {r["region"]: r["n"] for r in regions} == {"north": 2, "south": 1}

    # An hour that does not complete the day: the source changed (its view runs), s.daily did not (s.total
    # stays); an empty hour after it changes nothing more.
    _append(events, [utc(2024, 1, 2, 12, 30)])
    before, out = versions(), run(utc(2024, 1, 2, 13))
    after = versions()
    assert after["s.all_events"] == before["s.all_events"] + 1 and after["s.total"] == before["s.total"], out
    assert {r["k"]: r["n"] for r in DeltaTable(table_uri(project, "s.all_events")).to_pyarrow_table().to_pylist()} == {
        k: n for k, (n, _) in _recomputed(_events(events), utc(2100, 1, 1)).items()
    }
    before, out = versions(), run(utc(2024, 1, 2, 14))
    assert versions()["s.all_events"] == before["s.all_events"], out

    # The rest of the day arrives: s.daily computes it, and s.total runs after it in the same command.
    _append(events, [utc(2024, 1, 2, 14) + timedelta(hours=h) for h in range(10)])
    before, out = versions(), run(utc(2024, 1, 3))
    assert versions()["s.total"] == before["s.total"] + 1, out
    assert out.index("s.daily [2024-01-02") < out.index("s.total full")
    assert total() == _recomputed(_events(events), utc(2024, 1, 3))

    # A late row for a day computed long ago: s.daily recomputes that day, s.total follows.
    _append(events, [utc(2024, 1, 1, 5, 30)])
    before, out = versions(), run(utc(2024, 1, 3))
    assert versions()["s.total"] == before["s.total"] + 1, out
    assert total() == _recomputed(_events(events), utc(2024, 1, 3))

    # Its definition changes: it runs with the new one although nothing it reads changed.
    (root / "models" / "total.sql").write_text(MODELS["models/total.sql"].replace("SUM(v) AS v", "SUM(v) * 2 AS v"))
    before, out = versions(), run(utc(2024, 1, 3))
    assert versions()["s.total"] == before["s.total"] + 1, out
    assert total() == {k: (n, 2 * v) for k, (n, v) in _recomputed(_events(events), utc(2024, 1, 3)).items()}


def test_a_whole_model_whose_table_was_removed_runs_again(shop, capsys):
    import shutil

    root = shop
    project = load_project(root)
    code, out = cli_output(root, capsys, "run", "--auto", "--end", "2024-01-02T00:00:00+00:00")
    assert code == 0, out
    shutil.rmtree(table_uri(project, "s.total").removeprefix("file://"))
    code, out = cli_output(root, capsys, "run", "--auto", "--end", "2024-01-02T00:00:00+00:00")
    assert code == 0, out
    rows = DeltaTable(table_uri(project, "s.total")).to_pyarrow_table().to_pylist()
    assert {r["k"]: (r["n"], r["v"]) for r in rows} == _recomputed(_events(root / "data" / "events"), utc(2024, 1, 2))


def test_an_unchanged_seed_is_written_once(spark, make_project, tmp_path, monkeypatch, capsys):
    """As SQLMesh: a seed runs when its CSV or definition changed since its table was written, never again
    otherwise, and the FULL model reading it is left alone too."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    root = make_project(
        {
            "models/codes.sql": "MODEL (name s.codes, kind SEED (path 'seeds/codes.csv'));\n",
            "models/named.sql": "MODEL (name s.named, kind FULL);\nSELECT code, UPPER(name) AS name FROM s.codes\n",
            "seeds/codes.csv": "code,name\n1,one\n2,two\n",
        }
    )
    project = load_project(root)

    def versions() -> dict[str, int]:
        return {name: DeltaTable(table_uri(project, name)).version() for name in ("s.codes", "s.named")}

    def run() -> str:
        code, out = cli_output(root, capsys, "run", "--auto")
        assert code == 0, out
        return out

    run()
    first = versions()
    for _ in range(2):
        out = run()
        assert versions() == first, out
        assert "s.codes: its CSV and definition are unchanged since its table was written; not run again" in out
        assert "s.named: nothing it reads changed since its last run; not run again" in out
    (root / "seeds" / "codes.csv").write_text("code,name\n1,one\n2,two\n3,three\n")
    out = run()
    assert versions() == {n: v + 1 for n, v in first.items()}, out
    rows = DeltaTable(table_uri(project, "s.named")).to_pyarrow_table().to_pylist()
    assert sorted(r["name"] for r in rows) == ["ONE", "THREE", "TWO"]
