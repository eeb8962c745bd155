"""The automation sensor's decisions (:func:`incremental_assets.orchestration.sensors.evaluate`) on a real
Dagster instance, without Spark: materializations, failures and runs are recorded in the instance as
Dagster records them, and the scene is read from what ``evaluate`` returns (requests, run tags, the lines
that say what waits and why). The look at the tables' integrity is left out (there are no tables here:
every recorded interval would be lost; see test_automation_integrity.py)."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster._core.storage.dagster_run import DagsterRun

from incremental_assets.load.project import load_project
from incremental_assets.orchestration import sensors, tags
from incremental_assets.orchestration.decisions import Decision
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.orchestration.run_groups import group_job_name
from incremental_assets.orchestration.translator import ModelTranslator

from helpers import utc

# Three days complete at NOW: 2024-01-01, 02 and 03.
NOW = utc(2024, 1, 4)
MODELS = {
    "models/a.sql": """
        MODEL (name s.a, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT CAST(@start_ds AS DATE) AS ds, 1 AS n
    """,
    "models/b.sql": """
        MODEL (name s.b, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT ds, SUM(n) AS n FROM s.a WHERE ds BETWEEN @start_ds AND @end_ds GROUP BY ds
    """,
    "models/total.sql": """
        MODEL (name s.total, kind FULL);
        SELECT SUM(n) AS n FROM s.b
    """,
}
DAY1, DAY2, DAY3 = "2024-01-01", "2024-01-02", "2024-01-03"


class Scene:
    """A project of three models on an instance in a tmp folder, and the sensor's decision at NOW."""

    def __init__(self, root, home):
        self.project = load_project(root)
        self.instance = open_instance(home)
        self.translator = ModelTranslator()

    def key(self, name: str) -> dg.AssetKey:
        return self.translator.get_asset_key(self.project.models[name])

    def materialized(self, name: str, *days: str) -> None:
        """Intervals (or the whole table, without days) recorded as materialized, in this order."""
        for day in days or (None,):
            self.instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=self.key(name), partition=day))

    def failed(self, name: str, day: str) -> None:
        """An interval whose run failed (as Dagster records a failed materialization)."""
        partitions = self.translator.get_partitions_def(self.project.models[name])

        @dg.asset(key=self.key(name), partitions_def=partitions)
        def broken():
            raise RuntimeError("the run failed")

        assert not dg.materialize([broken], instance=self.instance, partition_key=day, raise_on_error=False).success

    def running(self, name: str, first: str, last: str) -> str:
        """A run computing the days ``first``..``last`` of a model, started and not finished."""
        range_tags = {tags.RANGE_START_TAG: first, tags.RANGE_END_TAG: last}
        run = DagsterRun(
            job_name="__ASSET_JOB",
            status=dg.DagsterRunStatus.STARTED,
            asset_selection=frozenset({self.key(name)}),
            tags=range_tags,
        )
        return self.instance.add_run(run).run_id

    def decide(self, cursor: str | None = None) -> Decision:
        return sensors.evaluate(self.project, self.translator, self.instance, cursor, NOW)


def ranges(decision: Decision) -> list[tuple[str, str | None, str | None]]:
    """Each request: the model, and the first and last interval of its range (None: the whole table)."""
    return [
        (r.asset_selection[0].to_user_string(), r.tags.get(tags.RANGE_START_TAG), r.tags.get(tags.RANGE_END_TAG))
        for r in decision.requests
    ]


@pytest.fixture
def scene(make_project, tmp_path, monkeypatch):
    monkeypatch.setattr(sensors, "watch_tables", lambda *args: set())
    return Scene(make_project(MODELS), tmp_path / "home")


def runs(decision: Decision) -> list[tuple[tuple[str, ...], str | None, str | None]]:
    """Each request: its models (upstream first), and the first and last interval of its range."""
    return [
        (
            tuple(k.to_user_string() for k in r.asset_selection or ()),
            r.tags.get(tags.RANGE_START_TAG),
            r.tags.get(tags.RANGE_END_TAG),
        )
        for r in decision.requests
    ]


def test_missing_intervals_and_what_reads_them_are_requested_in_one_run_upstreams_first(scene):
    decision = scene.decide()
    # s.b reads s.a's days, s.total reads s.b: one run computes them in that order (same days, one
    # partitions definition), nothing waits for a later tick.
    assert runs(decision) == [(("s/a", "s/b", "s/total"), DAY1, DAY3)]
    (request,) = decision.requests
    partitions = scene.translator.get_partitions_def(scene.project.models["s.a"])
    assert request.job_name == group_job_name(partitions)
    assert request.tags[tags.LAUNCHED_BY_TAG] == "automation"
    assert request.tags[tags.REASON_TAG] == (
        "s.a: missing intervals; s.b: missing intervals, upstream in the same run; "
        "s.total: never materialized, upstream in the same run"
    )
    assert request.run_key.startswith("s.a+s.b+s.total:2024-01-01T00:00:00+00:00..2024-01-04T00:00:00+00:00:")
    assert decision.waiting == []
    # Evaluated again on the same state: the same run key, so Dagster launches nothing twice.
    assert [r.run_key for r in scene.decide().requests] == [request.run_key]


def test_one_request_per_contiguous_range_of_missing_intervals(scene):
    scene.materialized("s.a", DAY2)
    decision = scene.decide()
    # s.a's first and third days are two runs, s.b's days join them; its second day reads what s.a has.
    # s.total reads all of s.b: it waits for the three runs.
    assert runs(decision) == [
        (("s/a", "s/b"), DAY1, DAY1),
        (("s/a", "s/b"), DAY3, DAY3),
        (("s/b",), DAY2, DAY2),
    ]
    assert decision.waiting == ["s.total waits for s.b: requested [2024-01-01, 2024-01-04) (never materialized)"]


def test_without_the_job_of_a_run_of_several_models_each_model_runs_alone_and_what_joined_waits(scene):
    # A code location loaded before the models shared a partitions definition has no job for them.
    decision = sensors.evaluate(scene.project, scene.translator, scene.instance, None, NOW, jobs=set())
    assert runs(decision) == [(("s/a",), DAY1, DAY3)]


def test_a_failed_interval_is_not_retried_and_what_reads_it_waits_saying_why(scene):
    scene.materialized("s.a", DAY1, DAY2)
    scene.failed("s.a", DAY3)
    decision = scene.decide()
    # Only what s.a has: its failed day is not requested again, s.b computes the days it can.
    assert ranges(decision) == [("s/b", DAY1, DAY2)]
    assert "s.a: failed [2024-01-03, 2024-01-04) not retried until an input changes" in decision.notes
    assert decision.waiting[0] == "s.b [2024-01-03, 2024-01-04) waits for s.a [2024-01-03, 2024-01-04)"
    assert "s.a: failed" in decision.summary()


def test_an_upstream_interval_materialized_again_makes_what_reads_it_stale(scene):
    scene.materialized("s.a", DAY1, DAY2, DAY3)
    scene.materialized("s.b", DAY1, DAY2, DAY3)
    scene.materialized("s.total")
    assert scene.decide().requests == [] and scene.decide().summary() == "every model is up to date"
    scene.materialized("s.a", DAY2)  # late data computed again
    decision = scene.decide()
    # s.total, which reads all of s.b, is computed again in s.b's run, after it.
    assert runs(decision) == [(("s/b", "s/total"), DAY2, DAY2)]
    assert decision.requests[0].tags[tags.REASON_TAG] == "s.b: upstream s.a changed; s.total: upstream in the same run"
    assert decision.waiting == []


def test_the_downstream_of_an_upstream_being_computed_waits(scene):
    scene.materialized("s.a", DAY1, DAY2)
    scene.materialized("s.b", DAY1, DAY2, DAY3)
    scene.materialized("s.total")
    run_id = scene.running("s.a", DAY3, DAY3)
    decision = scene.decide()
    assert decision.requests == []
    assert decision.running == [f"s.a: computing [2024-01-03, 2024-01-04) in run {run_id[:8]}"]
    assert decision.waiting == [
        f"s.b waits for s.a: computing [2024-01-03, 2024-01-04) in run {run_id[:8]}",
        "s.total waits for s.b: waits for s.a",
    ]


# Two hourly models, a daily model reading the second and a daily model reading that one.
CHAIN_MODELS = {
    "models/src.sql": """
        MODEL (name s.src, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly');
        SELECT CAST(@start_dt AS TIMESTAMP) AS h, 1 AS n
    """,
    "models/h.sql": """
        MODEL (name s.h, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly');
        SELECT h, n FROM s.src WHERE h BETWEEN @start_dt AND @end_dt
    """,
    "models/d.sql": """
        MODEL (name s.d, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT CAST(h AS DATE) AS ds, SUM(n) AS n FROM s.h WHERE h BETWEEN @start_dt AND @end_dt GROUP BY 1
    """,
    "models/d2.sql": """
        MODEL (name s.d2, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT ds, n FROM s.d WHERE ds BETWEEN @start_ds AND @end_ds
    """,
}
HOURS = [f"2024-01-0{d}-{h:02d}:00" for d in (1, 2, 3) for h in range(24)]


@pytest.fixture
def chain(make_project, tmp_path, monkeypatch):
    monkeypatch.setattr(sensors, "watch_tables", lambda *args: set())
    return Scene(make_project(CHAIN_MODELS), tmp_path / "home")


def test_a_model_of_another_unit_is_requested_with_the_run_it_waits_for_when_runs_may_follow(chain):
    # Without: the hours run first, the days wait for them (the next tick requests them).
    plain = chain.decide()
    assert runs(plain) == [(("s/src", "s/h"), HOURS[0], HOURS[-1])]
    assert plain.waiting[0].startswith("s.d [2024-01-01, 2024-01-04) waits for s.h: requested")
    # With runs that may follow: the days are requested in the same tick, in a run of their own that waits
    # for the hours' run; the days reading those days wait (a run waits for runs that wait for none).
    decision = sensors.evaluate(chain.project, chain.translator, chain.instance, None, NOW, chain=True)
    assert runs(decision) == [(("s/src", "s/h"), HOURS[0], HOURS[-1]), (("s/d",), DAY1, DAY3)]
    hours, days = decision.requests
    assert tags.AFTER_UPSTREAM_TAG not in hours.tags and days.tags[tags.AFTER_UPSTREAM_TAG] == "true"
    assert days.tags[tags.REASON_TAG] == "missing intervals; after the run of s.h requested with it"
    assert decision.waiting == ["s.d2 [2024-01-01, 2024-01-04) waits for s.d: requested [2024-01-01, 2024-01-04)"]
    # The same state, the same run keys: Dagster launches nothing twice.
    again = sensors.evaluate(chain.project, chain.translator, chain.instance, None, NOW, chain=True)
    assert [r.run_key for r in again.requests] == [r.run_key for r in decision.requests]


def test_an_interval_recomputed_upstream_has_its_downstream_requested_with_it(chain):
    chain.materialized("s.src", *HOURS)
    chain.materialized("s.h", *HOURS)
    chain.materialized("s.d", DAY1, DAY2, DAY3)
    chain.materialized("s.d2", DAY1, DAY2, DAY3)
    chain.materialized("s.src", "2024-01-02-10:00")  # late data computed again
    decision = sensors.evaluate(chain.project, chain.translator, chain.instance, None, NOW, chain=True)
    # The hour is recomputed; the day that reads it follows in a run of its own, s.d2's day waits for that.
    assert runs(decision) == [(("s/h",), "2024-01-02-10:00", "2024-01-02-10:00"), (("s/d",), DAY2, DAY2)]
    assert decision.requests[1].tags[tags.REASON_TAG] == "upstream s.h changes; after the run of s.h requested with it"
    assert decision.waiting == ["s.d2 waits for s.d: requested [2024-01-02, 2024-01-03)"]


def test_what_follows_a_run_that_is_not_launched_waits(chain):
    # The code location does not have s.h yet: the run of s.src and s.h is not launched, nor the run of s.d
    # that would follow it (launched alone, it would read hours that are not there).
    served = set(chain.project.models) - {"s.h"}
    decision = sensors.evaluate(chain.project, chain.translator, chain.instance, None, NOW, chain=True, served=served)
    assert runs(decision) == []
    assert "s.h is new: waits for the code location to reload" in decision.waiting


def test_runs_follow_where_the_queue_gives_them_slots_of_their_own(chain, tmp_path, monkeypatch):
    from incremental_assets.orchestration import run_coordinator

    assert isinstance(chain.instance.run_coordinator, run_coordinator.ProjectRunCoordinator)
    # With a Spark of their own (a JVM starts while they wait) and with the long-lived Spark alike.
    assert run_coordinator.runs_may_follow(chain.instance)
    monkeypatch.setattr(run_coordinator, "server_up_in", lambda root: True)
    assert run_coordinator.runs_may_follow(chain.instance)
    # Three runs at once on the server: three more may wait for upstream runs, in slots of their own.
    three = open_instance(tmp_path / "three", 1, 3)
    queue = three.get_concurrency_config().run_queue_config
    assert queue is not None and queue.max_concurrent_runs == 6
    assert {"key": tags.AFTER_UPSTREAM_TAG, "value": "false", "limit": 3} in queue.tag_concurrency_limits
    assert {"key": tags.AFTER_UPSTREAM_TAG, "value": "true", "limit": 3} in queue.tag_concurrency_limits
    assert run_coordinator.runs_may_follow(three)
    # A dagster.yaml of the user's own, without those limits: no run is queued to wait for others.
    home = tmp_path / "user"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        "run_coordinator:\n  module: dagster.core.run_coordinator\n  class: QueuedRunCoordinator\n"
    )
    assert not run_coordinator.runs_may_follow(dg.DagsterInstance.from_config(str(home)))


def test_a_run_waits_for_an_upstream_run_until_its_step_of_that_upstream_succeeded(chain):
    """A run of several models is waited for until the step that commits what the waiting run reads has
    succeeded, not until the whole run ends."""
    from dagster._core.events import DagsterEvent, StepMaterializationData, StepSuccessData

    from incremental_assets.model.intervals import TimeWindow
    from incremental_assets.orchestration.instance import pending_upstream_runs

    # A run of s.src and s.h over the second day, started.
    both = DagsterRun(
        job_name="__ASSET_JOB",
        status=dg.DagsterRunStatus.STARTED,
        asset_selection=frozenset({chain.key("s.src"), chain.key("s.h")}),
        tags={tags.RANGE_START_TAG: HOURS[24], tags.RANGE_END_TAG: HOURS[47]},
    )
    run_id = chain.instance.add_run(both).run_id
    day2 = TimeWindow.parse("2024-01-02", "2024-01-03")

    def pending(seen: set | None = None) -> list[str]:
        model = chain.project.models["s.d"]
        return pending_upstream_runs(chain.instance, chain.project, model, day2, chain.translator, "other", seen)

    def report(event: DagsterEvent) -> None:
        chain.instance.report_dagster_event(event, run_id=run_id)

    assert pending() == [f"s.h in run {run_id[:8]} (started)"]
    materialized = DagsterEvent(
        event_type_value="ASSET_MATERIALIZATION",
        job_name=both.job_name,
        step_key="s__h",
        event_specific_data=StepMaterializationData(dg.AssetMaterialization(chain.key("s.h"), partition=HOURS[24])),
    )
    report(materialized)
    assert pending() != []  # materialized, its step not over yet
    done = DagsterEvent(
        event_type_value="STEP_SUCCESS",
        job_name=both.job_name,
        step_key="s__src",
        event_specific_data=StepSuccessData(duration_ms=1.0),
    )
    report(done)
    assert pending() != []  # another step of the run succeeded
    report(done._replace(step_key="s__h"))
    seen: set = set()
    assert pending(seen) == []
    assert seen == {(run_id, chain.key("s.h"))}
    # A wait keeps what it found finished and does not read that run's steps again.
    chain.instance.event_log_storage.delete_events(run_id)
    assert pending() != []
    assert pending(seen) == []
