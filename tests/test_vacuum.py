"""`vacuum`: replaced data files past the retention and staging folders of dead runs go; the table, its
live files and a running run's staging folder stay."""

from __future__ import annotations

import os
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

from deltalake import DeltaTable
from test_concurrency import DAY, commit, stage

from incremental_assets import cli, delta
from incremental_assets.load.project import load_project
from incremental_assets.spark.executor import Executor

from helpers import table_rows


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def _dead_runs_staging(uri: str) -> Path:
    """A staging folder with files, made on this host by a process that is gone."""
    dead = stage(uri, "killed", [DAY])
    dead_name = Path(dead).name.rsplit("-", 2)[0] + f"-{_dead_pid()}-" + Path(dead).name.rsplit("-", 1)[1]
    os.rename(dead, Path(uri) / dead_name)
    return Path(uri) / dead_name


def test_each_executor_sweeps_dead_runs_staging_once_per_table(spark, make_project):
    root = make_project({"models/x.sql": "MODEL (name t.x, kind FULL); SELECT 1 AS k"})
    project = load_project(root)
    uri = delta.table_uri(project.settings.warehouse, "t.x")
    commit(uri, stage(uri, "first", [DAY]), DAY)
    first = _dead_runs_staging(uri)
    executor = Executor(spark, project)
    executor.sweep(uri)
    assert not first.exists()
    second = _dead_runs_staging(uri)
    executor.sweep(uri)
    assert second.exists(), "an executor sweeps a table once"
    Executor(spark, project).sweep(uri)  # the next run's executor, in the same long-lived process
    assert not second.exists()
    assert table_rows(uri) == [("first", 0), ("first", 1), ("first", 2)]


def test_vacuum_removes_replaced_files_and_dead_runs_staging(make_project, capsys):
    root = make_project(
        {
            "models/x.sql": "MODEL (name t.x, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), start "
            "'2024-01-01'); SELECT "
            "ts FROM t.y",
            "models/y.sql": "MODEL (name t.y, kind FULL); SELECT CAST('2024-01-01' AS TIMESTAMP) AS ts",
        }
    )
    project = load_project(root)
    uri = delta.table_uri(project.settings.warehouse, "t.x")
    commit(uri, stage(uri, "first", [DAY]), DAY)
    commit(uri, stage(uri, "second", [DAY]), DAY)  # replaces the first run's file
    live = stage(uri, "running", [DAY])  # this process's run, staged but not yet committed
    dead_name = _dead_runs_staging(uri).name  # a run on this host whose process is gone
    foreign = Path(uri) / "run-20200101T000000-0000aaaa-1-abcdef12"  # another host's, years old
    shutil.copytree(Path(uri) / dead_name, foreign)
    recent = Path(uri) / f"run-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-0000aaaa-1-abcdef13"
    shutil.copytree(Path(uri) / dead_name, recent)  # another host's, just made: may be running
    assert set(map(os.path.basename, delta.orphan_staging_dirs(uri))) == {dead_name, foreign.name}
    assert delta.orphan_staging_dirs(uri, older_than=timedelta(days=365 * 100)) == [str(Path(uri) / dead_name)]

    args = ["--project", str(root)]
    assert cli.main(["vacuum", "--retention-hours", "0", "--dry-run", "-v", *args]) == 0
    out = capsys.readouterr().out
    assert "t.x: would remove 1 replaced file(s), 2 staging folder(s) of dead runs" in out
    assert "t.y" not in out  # no table yet: nothing to do
    assert (Path(uri) / dead_name).exists() and foreign.exists()

    version, rows = DeltaTable(uri).version(), table_rows(uri)
    assert cli.main(["vacuum", "--retention-hours", "0", *args]) == 0
    assert "t.x: removed 1 replaced file(s), 2 staging folder(s) of dead runs" in capsys.readouterr().out
    assert not (Path(uri) / dead_name).exists() and not foreign.exists()
    assert Path(live).exists() and recent.exists()
    assert table_rows(uri) == rows == [("second", 0), ("second", 1), ("second", 2)]
    assert DeltaTable(uri).version() >= version  # vacuum may log itself; the data is the same
    # The default retention keeps replaced files for time travel.
    commit(uri, stage(uri, "third", [DAY]), DAY)
    assert cli.main(["vacuum", *args]) == 0
    assert "t.x: removed 0 replaced file(s)" in capsys.readouterr().out
    assert table_rows(uri) == [("third", 0), ("third", 1), ("third", 2)]


def test_status_warns_when_recorded_intervals_have_no_table(make_project, tmp_path, monkeypatch, capsys):
    import dagster as dg

    from incremental_assets.orchestration.instance import open_instance

    root = make_project(
        {
            "models/x.sql": "MODEL (name t.x, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), start "
            "'2024-01-01'); SELECT "
            "ts FROM t.y",
            "models/y.sql": "MODEL (name t.y, kind FULL); SELECT CAST('2024-01-01' AS TIMESTAMP) AS ts",
        }
    )
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    instance = open_instance(tmp_path / "home")
    instance.report_runless_asset_event(
        dg.AssetMaterialization(asset_key=dg.AssetKey(["t", "x"]), partition="2024-01-01")
    )
    assert cli.main(["status", "t.x", "--project", str(root)]) == 1  # recorded but not in a table
    out = capsys.readouterr().out
    assert (
        "t.x: NOT IN TABLE: [2024-01-01, 2024-01-02) recorded but absent (Dagster records intervals of t.x "
        "but there is no table at" in out
    )
    assert "lost:    [2024-01-01, 2024-01-02) (recorded, but not in the table)" in out
