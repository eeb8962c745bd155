"""``incremental-assets spark start`` warms its new server with the project's own models, into a scratch folder:
the project's tables, Dagster instance and cache are as before, the scratch folder is gone; a project whose
source has no rows still starts; ``--no-warm-up`` skips it. Every server is stopped by its PID at the end.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterInstance
from test_spark_server import run_cli, server_project, stopped_at_end

from incremental_assets.cli.spark_warm_up import SCRATCH_PREFIX
from incremental_assets.spark import connect_server as server

pytestmark = pytest.mark.cluster


def _files(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` with its size and modification time (ns); not SQLite's write-ahead log
    and shared-memory index of a database (a connection that this test's own reads keep open makes them)."""
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(skip) and not p.name.endswith(("-wal", "-shm"))
    }


def _started(root: Path, *flags: str) -> str:
    started = run_cli(root, "spark", "start", *flags)
    assert started.returncode == 0, started.stdout + started.stderr
    return started.stdout


def test_start_warms_up_without_touching_the_project(tmp_path, monkeypatch):
    root = server_project(tmp_path / "project", 24 * 10)
    with stopped_at_end(root) as settings:
        out = _started(root, "--no-warm-up")
        assert "warmed up" not in out and "warm-up skipped" not in out, out
        ran = run_cli(root, "run", "s.hourly", "s.daily", "--start", "2024-01-02", "--end", "2024-01-03")
        assert ran.returncode == 0 and "2 run(s) succeeded" in ran.stdout, ran.stdout[-2000:] + ran.stderr[-2000:]
        assert run_cli(root, "spark", "stop").returncode == 0
        home = server.state_dir(settings)
        state = {"cache": root / ".cache", "warehouse": Path(settings.warehouse), "dagster": home}
        before = {name: _files(folder, ("spark-connect", "command-server")) for name, folder in state.items()}
        monkeypatch.setenv("DAGSTER_HOME", str(home))  # the instance's dagster.yaml reads it
        runs = len(DagsterInstance.from_config(str(home)).get_run_records())

        assert runs >= 2 and before["warehouse"] and before["dagster"], (runs, before)

        out = _started(root)
        assert "warmed up with 2 model(s) in " in out, out

        assert {name: _files(folder, ("spark-connect", "command-server")) for name, folder in state.items()} == before
        assert len(DagsterInstance.from_config(str(home)).get_run_records()) == runs
        assert not [p for p in home.iterdir() if p.name.startswith(SCRATCH_PREFIX)]


def test_a_project_whose_source_has_no_rows_starts(tmp_path):
    root = server_project(tmp_path / "empty", 0)
    with stopped_at_end(root) as settings:
        out = _started(root)
        assert "warmed up with 2 model(s)" in out or "warm-up skipped: " in out, out
        assert server.server_status(settings).up
        assert not list(Path(settings.warehouse).glob("*")) if Path(settings.warehouse).exists() else True
        assert not [p for p in server.state_dir(settings).iterdir() if p.name.startswith(SCRATCH_PREFIX)]


def test_the_warm_up_runs_hourly_and_daily_sql_models_whose_upstreams_it_runs(tmp_path):
    from incremental_assets.cli.spark_warm_up import warm_up_models
    from incremental_assets.load.project import load_project

    root = server_project(tmp_path / "mixed", 1)
    extra = {
        "models/dims.sql": "MODEL (name s.dims, kind FULL);\nSELECT DISTINCT k FROM raw.events\n",
        "models/keyed.sql": "MODEL (name s.keyed, kind INCREMENTAL_BY_TIME_RANGE (time_column ts),"
        " start '2024-01-01');\nSELECT e.ts, d.k FROM raw.events AS e JOIN s.dims AS d ON e.k = d.k"
        " WHERE e.ts BETWEEN @start_dt AND @end_dt\n",
        "models/monthly.sql": "MODEL (name s.monthly, kind INCREMENTAL_BY_TIME_RANGE (time_column m),"
        " start '2024-01-01', cron '@monthly');\nSELECT date_trunc('MONTH', ds) AS m, SUM(n) AS n FROM s.daily"
        " WHERE ds BETWEEN @start_ds AND @end_ds GROUP BY 1\n",
        # a pre-statement may write outside the warehouse: the warm-up must not run it a second time
        "models/noted.sql": "MODEL (name s.noted, kind INCREMENTAL_BY_TIME_RANGE (time_column ts),"
        " start '2024-01-01');\nCREATE TABLE IF NOT EXISTS default.side_effect (x INT);\n"
        "SELECT ts FROM s.hourly WHERE ts BETWEEN @start_dt AND @end_dt\n",
    }
    for rel, text in extra.items():
        (root / rel).write_text(text)
    project = load_project(root)
    assert project.model("s.noted").pre_statements, "the model's pre-statement was not read as one"
    assert [m.name for m in warm_up_models(project)] == ["s.hourly", "s.daily"]


def test_a_project_with_before_all_statements_is_not_warmed_up(tmp_path):
    from incremental_assets.cli.spark_warm_up import warm_up_with_models

    root = server_project(tmp_path / "statements", 1)
    (root / "config.yaml").write_text("before_all:\n  - CREATE TABLE IF NOT EXISTS default.side_effect (x INT)\n")
    done = warm_up_with_models([root], tmp_path / "state", "sc://127.0.0.1:1")
    assert done.skipped and "before_all" in done.skipped, done
    assert not (tmp_path / "state").exists() or not list((tmp_path / "state").iterdir())
