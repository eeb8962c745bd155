"""A backfill across upstreams that fails in the middle, its retry with --auto, and the run history."""

from __future__ import annotations

from test_dagster import env  # noqa: F401  (hourly -> daily (batches of 2 days) -> weekly, on raw.events)

from incremental_assets import cli, delta
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.status import model_status
from incremental_assets.spark.executor import Executor

from helpers import table_rows, utc


def test_failed_backfill_keeps_completed_intervals_and_retry_runs_only_the_rest(env, monkeypatch, capsys):  # noqa: F811
    """A failed batch leaves the model's other batches to run (they do not build on it: SQLMesh runs them
    too) and skips what is downstream; the retry runs the failed batch, then downstream."""
    project, instance, defs = env
    real = Executor.execute

    def flaky(self, plan, **kwargs):
        if plan.model == "s.daily" and plan.window.start == utc(2024, 1, 5):
            raise RuntimeError("executor lost in the middle of the backfill")
        return real(self, plan, **kwargs)

    monkeypatch.setattr(Executor, "execute", flaky)
    report = Runner(project, instance, defs).run(
        project.select("+s.weekly"), start=utc(2023, 12, 31), end=utc(2024, 1, 14)
    )
    outcome = [(r.model, str(r.window), r.success) for r in report.records]
    assert outcome[:4] == [
        ("s.hourly", "[2024-01-01, 2024-01-14)", True),  # FullyBatchSafe: one run for 13 days of hours
        ("s.daily", "[2024-01-01, 2024-01-03)", True),  # batch_size 2: chunks of two days, in order
        ("s.daily", "[2024-01-03, 2024-01-05)", True),
        ("s.daily", "[2024-01-05, 2024-01-07)", False),
    ]
    assert [(w, ok) for m, w, ok in outcome[4:] if m == "s.daily"] == [
        ("[2024-01-07, 2024-01-09)", True),
        ("[2024-01-09, 2024-01-11)", True),
        ("[2024-01-11, 2024-01-13)", True),
        ("[2024-01-13, 2024-01-14)", True),
    ]
    assert outcome[-1] == ("s.weekly", "[2023-12-31, 2024-01-14)", False)  # downstream of the hole: skipped
    daily = model_status(instance, project.model("s.daily"), until=utc(2024, 1, 14), now=utc(2024, 2, 1))
    assert daily.covered == (
        TimeWindow(utc(2024, 1, 1), utc(2024, 1, 5)),
        TimeWindow(utc(2024, 1, 7), utc(2024, 1, 14)),
    )
    assert daily.failed == (TimeWindow(utc(2024, 1, 5), utc(2024, 1, 7)),)

    monkeypatch.setattr(Executor, "execute", real)
    root = str(project.directory)
    assert cli.main(["run", "+s.weekly", "--auto", "--end", "2024-01-14", "--project", root]) == 0
    out = capsys.readouterr().out
    # Only what is missing runs: no hourly run, the failed daily chunk, then the two weeks.
    assert "s.hourly" not in out.split("\n", 1)[1]
    ran = [line.split("] ", 1)[1].split(":")[0] for line in out.splitlines() if line.startswith("[")]
    assert ran == ["s.daily [2024-01-05, 2024-01-07)", "s.weekly [2023-12-31, 2024-01-14)"]
    weekly = delta.table_uri(project.settings.warehouse, "s.weekly")
    assert table_rows(weekly) == [(utc(2023, 12, 31).date(), 24 * 6), (utc(2024, 1, 7).date(), 24 * 7)]
    assert model_status(instance, project.model("s.daily"), until=utc(2024, 1, 14), now=utc(2024, 2, 1)).gaps == ()

    assert cli.main(["history", "s.daily", "--limit", "7", "--project", root]) == 0
    out = capsys.readouterr().out
    assert (
        "\n    RuntimeError: executor lost in the middle of the backfill" in out
        or "executor lost in the middle of the backfill" in out
    )
    lines = [line for line in out.splitlines() if not line.startswith("    ")]
    assert len(lines) == 7
    assert "SUCCESS   s.daily  2024-01-05...2024-01-06  2 rows" in lines[0]
    failure = next(line for line in lines if "FAILURE" in line)
    assert "2024-01-05...2024-01-06" in failure and "(cli)" in failure
    assert cli.main(["history", "--limit", "1", "--project", root]) == 0
    assert "executor lost" not in capsys.readouterr().out
    # --since / --until select runs by creation time.
    assert cli.main(["history", "s.daily", "--since", "2999-01-01", "--project", root]) == 0
    assert capsys.readouterr().out.strip() == "no runs recorded yet"
    assert (
        cli.main(
            ["history", "s.daily", "--since", "2000-01-01", "--until", "2999-01-01", "--limit", "3", "--project", root]
        )
        == 0
    )
    assert len([line for line in capsys.readouterr().out.splitlines() if not line.startswith("    ")]) == 3
