"""Stale intervals judged from where the last look stopped
(:func:`incremental_assets.orchestration.staleness.stale_intervals`).

A year of hourly operation records thousands of partitions: judging every one of them again on every
command grew with the history. The look now remembers where it stopped in the instance and reads only the
materializations recorded after it, plus the intervals still waiting to be recomputed. Here, on a real
Dagster instance without Spark, every step of an irregular history (late upstream hours, a lookback that
reaches back a day, recomputes, confirmations, a dimension changing its definition, a model changing its
own) is answered both ways, from where the last look stopped and from everything again, and both must
agree with what a user expects at that step.
"""

from __future__ import annotations

import dagster as dg
import pytest

from incremental_assets.load.project import load_project
from incremental_assets.orchestration import staleness
from incremental_assets.orchestration.confirm import CONFIRMED
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.orchestration.translator import ModelTranslator

MODELS = {
    "models/hourly.sql": """
        MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly');
        SELECT CAST(@start_ts AS TIMESTAMP) AS h, 1 AS n
    """,
    "models/dim.sql": """
        MODEL (name s.dim, kind FULL);
        SELECT 1 AS k, 'a' AS label
    """,
    "models/daily.sql": """
        MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT CAST(h AS DATE) AS ds, SUM(n) AS n, MAX(d.label) AS label
        FROM s.hourly JOIN s.dim AS d ON d.k = 1
        WHERE h BETWEEN @start_ts AND @end_ts GROUP BY 1
    """,
    "models/rolling.sql": """
        MODEL (name s.rolling, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT CAST(@start_ds AS DATE) AS ds, SUM(n) AS n FROM s.daily
        WHERE ds BETWEEN @start_ds - INTERVAL 1 DAY AND @end_ds
    """,
}


class History:
    """Materializations and confirmations recorded in an instance, as runs record them."""

    def __init__(self, root, home, models=MODELS):
        for path, text in models.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        self.root = root
        self.project = load_project(root)
        self.instance = open_instance(home)
        self.translator = ModelTranslator()

    def reload(self, path: str, text: str) -> None:
        (self.root / path).write_text(text)
        self.project = load_project(self.root)

    def key(self, name: str) -> dg.AssetKey:
        return self.translator.get_asset_key(self.project.models[name])

    def materialized(self, name: str, *partitions: str) -> None:
        fingerprint = self.project.models[name].fingerprint
        for partition in partitions or (None,):
            self.instance.report_runless_asset_event(
                dg.AssetMaterialization(
                    asset_key=self.key(name), partition=partition, metadata={"fingerprint": fingerprint}
                )
            )

    def confirmed(self, name: str, *partitions: str) -> None:
        for partition in partitions:
            self.instance.report_runless_asset_event(
                dg.AssetObservation(
                    asset_key=self.key(name), partition=partition, metadata={CONFIRMED: "no input column changed"}
                )
            )

    def stale(self, name: str) -> tuple[list[str], tuple[str, ...]]:
        """The stale intervals and their causes, answered from where the last look stopped; the same
        answer must come from judging everything again."""
        model = self.project.models[name]
        since = staleness.stale_intervals(self.instance, self.project, model, self.translator)
        everything = staleness.stale_intervals_from_everything(self.instance, self.project, model, self.translator)
        assert since == everything, f"{name}: from the last look {since}, from everything {everything}"
        return [f"{w.start:%m-%d %H}..{w.end:%m-%d %H}" for w in since.windows], since.causes


def hours(day: int, first: int = 0, last: int = 23) -> list[str]:
    return [f"2024-01-{day:02d}-{h:02d}:00" for h in range(first, last + 1)]


@pytest.fixture
def history(tmp_path):
    (tmp_path / "p").mkdir()
    return History(tmp_path / "p", tmp_path / "home")


def test_late_hours_lookback_recompute_and_confirmation_agree_with_judging_everything(history):
    h = history
    assert h.stale("s.daily") == ([], ())  # nothing built yet
    h.materialized("s.dim")
    h.materialized("s.hourly", *hours(1), *hours(2, 0, 11), *hours(2, 13, 23), *hours(3))  # 01-02 12:00 empty
    h.materialized("s.daily", "2024-01-01", "2024-01-02", "2024-01-03")
    h.materialized("s.rolling", "2024-01-01", "2024-01-02", "2024-01-03")
    assert h.stale("s.daily") == ([], ())
    assert h.stale("s.rolling") == ([], ())

    # A late hour on 01-02: its day is stale, and only that day.
    h.materialized("s.hourly", "2024-01-02-12:00")
    assert h.stale("s.daily") == (["01-02 00..01-03 00"], ("s.hourly",))
    # The day recomputed: s.daily is current; s.rolling reads that day and the one before: 01-02 and 01-03.
    h.materialized("s.daily", "2024-01-02")
    assert h.stale("s.daily") == ([], ())
    assert h.stale("s.rolling") == (["01-02 00..01-04 00"], ("s.daily",))
    # One of them confirmed current (a rebuild that changed no column it reads), the other recomputed.
    h.confirmed("s.rolling", "2024-01-02")
    assert h.stale("s.rolling") == (["01-03 00..01-04 00"], ("s.daily",))
    h.materialized("s.rolling", "2024-01-03")
    assert h.stale("s.rolling") == ([], ())

    # Two late hours on two days at once, a new day in between; a look in the middle of the recomputes.
    h.materialized("s.hourly", *hours(4), "2024-01-01-05:00", "2024-01-03-23:00")
    assert h.stale("s.daily") == (["01-01 00..01-02 00", "01-03 00..01-04 00"], ("s.hourly",))
    h.materialized("s.daily", "2024-01-01")
    assert h.stale("s.daily") == (["01-03 00..01-04 00"], ("s.hourly",))
    h.materialized("s.daily", "2024-01-03", "2024-01-04")
    assert h.stale("s.daily") == ([], ())

    # A materialization of the dimension with the same definition stales nothing (new rows of a FULL
    # model are read by new intervals only); a new definition stales every interval built before it.
    h.materialized("s.dim")
    assert h.stale("s.daily") == ([], ())
    h.reload("models/dim.sql", "MODEL (name s.dim, kind FULL);\nSELECT 1 AS k, 'b' AS label\n")
    h.materialized("s.dim")
    assert h.stale("s.daily") == (["01-01 00..01-05 00"], ("s.dim",))
    h.materialized("s.daily", "2024-01-02")
    assert h.stale("s.daily") == (["01-01 00..01-02 00", "01-03 00..01-05 00"], ("s.dim",))
    h.materialized("s.dim")  # again, same new definition: nothing more
    h.materialized("s.daily", "2024-01-01", "2024-01-03", "2024-01-04")
    assert h.stale("s.daily") == ([], ())


def test_a_changed_model_is_judged_again_from_everything(history):
    h = history
    h.materialized("s.hourly", *hours(1), *hours(2))
    h.materialized("s.daily", "2024-01-01", "2024-01-02")
    h.materialized("s.rolling", "2024-01-01", "2024-01-02")
    assert h.stale("s.rolling") == ([], ())
    h.materialized("s.daily", "2024-01-01")
    assert h.stale("s.rolling") == (["01-01 00..01-03 00"], ("s.daily",))
    # s.rolling now reads two days back: what was judged with the old reach is judged again.
    h.reload("models/rolling.sql", MODELS["models/rolling.sql"].replace("INTERVAL 1 DAY", "INTERVAL 2 DAY"))
    h.materialized("s.rolling", "2024-01-01", "2024-01-02")
    assert h.stale("s.rolling") == ([], ())
    h.materialized("s.daily", "2024-01-01")
    assert h.stale("s.rolling") == (["01-01 00..01-03 00"], ("s.daily",))


def test_the_look_from_where_it_stopped_asks_dagster_only_about_new_events_and_waiting_intervals(history, monkeypatch):
    """After the first look, no query of the instance covers every partition of an asset: the cost of a
    look does not grow with the history."""
    h = history
    days = [f"2024-01-{d:02d}" for d in range(1, 15)]
    h.materialized("s.dim")
    h.materialized("s.hourly", *[k for d in range(1, 15) for k in hours(d)])
    h.materialized("s.daily", *days)
    model = h.project.models["s.daily"]
    assert staleness.stale_intervals(h.instance, h.project, model, h.translator).windows == ()

    asked: list[tuple] = []
    original = type(h.instance).get_latest_storage_id_by_partition

    def counted(instance, key, event_type, partitions=None, after_cursor=None):
        asked.append((key.to_user_string(), partitions, after_cursor))
        return original(instance, key, event_type, partitions=partitions, after_cursor=after_cursor)

    monkeypatch.setattr(type(h.instance), "get_latest_storage_id_by_partition", counted)
    h.materialized("s.hourly", "2024-01-14-23:00", "2024-01-07-03:00")
    got = staleness.stale_intervals(h.instance, h.project, model, h.translator)
    assert [w.start.day for w in got.windows] == [7, 14]
    assert asked, "the look asked Dagster nothing"
    assert all(partitions is not None or after_cursor is not None for _, partitions, after_cursor in asked), asked
    assert all(len(partitions) <= 2 for _, partitions, _ in asked if partitions is not None), asked
    # The recomputed days are dropped from what waits; the next look asks about nothing of the past.
    h.materialized("s.daily", "2024-01-07", "2024-01-14")
    asked.clear()
    assert staleness.stale_intervals(h.instance, h.project, model, h.translator).windows == ()
    assert all(partitions is None or len(partitions) <= 2 for _, partitions, _ in asked)
    assert all(partitions is not None or after_cursor is not None for _, partitions, after_cursor in asked), asked
