"""The integrity check and the opening of a table against the length of its history.

An hourly model's table gains one commit (one tiny file) per hour, each recorded in Dagster as the
materialization of its hour; no Spark is needed to build it (the files are written with pyarrow and
committed through the product's commit path). At each history length the benchmark measures:

- ``open``: opening the table at its current version (a checkpoint and the commits after it; before:
  the same table with no checkpoint, every commit file replayed);
- ``check_full``: the integrity check as every command made it before (the whole log, every data file
  stat'ed, the latest record of every partition), which is also what the first check of a table costs;
- ``check_since``: the check a command makes after one more hour was committed and recorded (only
  what changed since the last check);
- ``plan``: what a command reads of Dagster's records to plan the model (its covered, failed and running
  intervals, and the commits Dagster missed); ``plan_dagster``: the intervals read as before, each key
  through Dagster's partitions definition and the status of every key of the definition.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

MODEL = """
MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly');
SELECT h, k FROM raw.events WHERE h BETWEEN @start_dt AND @end_dt
"""
SOURCES = """\
- name: raw.events
  location: data/events
  format: delta
  time_column: h
  interval_unit: hour
"""


class History:
    """One hourly table and its Dagster records, grown an hour at a time."""

    def __init__(self, root: Path):
        from incremental_assets.load.project import load_project
        from incremental_assets.orchestration.instance import open_instance
        from incremental_assets.orchestration.translator import ModelTranslator

        (root / "models").mkdir(parents=True)
        (root / "models" / "hourly.sql").write_text(MODEL)
        (root / "sources.yaml").write_text(SOURCES)
        self.project = load_project(root)
        self.model = self.project.model("s.hourly")
        self.translator = ModelTranslator()
        self.key = self.translator.get_asset_key(self.model)
        self.partitions = self.translator.get_partitions_def(self.model)
        self.uri = self.project.settings.table_location(self.model.name)
        self.instance = open_instance(
            str(root / "home"), self.project.settings.max_concurrent_runs
        )  # the product's storage
        self.hours = 0

    def add_hour(self, *, record: bool = True) -> None:
        """Commit the next hour; ``record=False`` leaves Dagster without its record (a process that died
        between the commit and the record)."""
        import dagster as dg
        import pyarrow as pa
        import pyarrow.parquet as pq

        from incremental_assets import delta
        from incremental_assets.model.intervals import IntervalUnit, TimeWindow, utc

        start = utc(2024, 1, 1) + timedelta(hours=self.hours)
        unit = IntervalUnit.HOUR
        staging = Path(delta.new_staging_dir(self.uri)) / f"{delta.PARTITION_COLUMN}={unit.partition_key(start)}"
        staging.mkdir(parents=True)
        pq.write_table(pa.table({"h": [start], "k": ["a"]}), staging / "part-0.parquet")
        run_id = f"run-{self.hours}"
        result = delta.commit_staged(
            self.uri,
            str(staging.parent),
            pa.schema([("h", pa.timestamp("us", tz="UTC")), ("k", pa.string())]),
            delta.ReplaceWindow(TimeWindow(start, start + timedelta(hours=1)), unit),
            metadata={
                "model": self.model.name,
                "run_id": run_id,
                "fingerprint": self.model.fingerprint,
                "window_start": start.isoformat(),
                "window_end": (start + timedelta(hours=1)).isoformat(),
            },
            name=self.model.name,
        )
        key = self.partitions.get_partition_key_for_timestamp(start.timestamp())
        if record:
            self.instance.report_runless_asset_event(
                dg.AssetMaterialization(
                    self.key, partition=key, metadata={"delta_version": result.version, "committed_by_run": run_id}
                )
            )
        self.hours += 1

    def plan(self) -> None:
        """What a command reads of Dagster's records to plan this model: its intervals (covered, failed,
        running) and the commits Dagster missed."""
        from incremental_assets.orchestration.reconcile import unrecorded_commits
        from incremental_assets.orchestration.status import model_status

        model_status(self.instance, self.model)
        unrecorded_commits(self.instance, self.project, self.model, self.translator)

    def plan_with_dagsters_keys(self) -> None:
        """The same intervals read as the product read them before: each key through Dagster's partitions
        definition, and the status of every key of the definition."""
        keys = [k for k in self.instance.get_materialized_partitions(self.key) if self.partitions.has_partition_key(k)]
        [self.partitions.time_window_for_partition_key(k) for k in keys]
        self.instance.get_status_by_partition(self.key, self.partitions.get_partition_keys(), self.partitions)

    def check(self):
        from incremental_assets.orchestration.integrity import check_model

        return check_model(self.instance, self.project, self.model, self.translator)

    def forget(self) -> None:
        from incremental_assets.orchestration import integrity_since

        integrity_since.remember(self.instance, self.uri, None)


def _without_checkpoints(uri: str, target: Path) -> str:
    """The same table as the product kept it before checkpoints: its commit files alone (every one is
    still there: none is older than the log retention), the data files not needed to open it."""
    log = target / "_delta_log"
    log.mkdir(parents=True)
    for name in os.listdir(Path(uri) / "_delta_log"):
        if name.endswith(".json"):
            shutil.copy(Path(uri) / "_delta_log" / name, log / name)
    return str(target)


def _median(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def scenario_log_history(sizes: tuple[int, ...], reps: int = 3) -> dict:
    from deltalake import DeltaTable

    out: dict = {"sizes": list(sizes), "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        after = History(Path(tmp) / "after")
        for size in sizes:
            built = time.perf_counter()
            while after.hours < size:
                after.add_hour()
            build_seconds = time.perf_counter() - built
            before = _without_checkpoints(after.uri, Path(tmp) / f"before-{size}")
            assert after.check().ok
            row = {"commits": size, "build_seconds": round(build_seconds, 1)}
            row["open_before_ms"] = 1000 * _median(lambda: DeltaTable(before).version(), reps * 3)
            row["open_after_ms"] = 1000 * _median(lambda: DeltaTable(after.uri).version(), reps * 3)

            def full() -> None:
                after.forget()
                assert after.check().ok

            row["check_full_ms"] = 1000 * _median(full, reps)
            after.check()
            since = []
            for _ in range(reps):
                after.add_hour()  # one more hour committed and recorded, as between two commands
                began = time.perf_counter()
                assert after.check().ok
                since.append(time.perf_counter() - began)
            row["check_since_ms"] = 1000 * statistics.median(since)
            row["log_files_after"] = len(os.listdir(Path(after.uri) / "_delta_log"))
            after.add_hour()
            row["plan_dagster_ms"] = 1000 * _median(after.plan_with_dagsters_keys, reps)
            row["plan_ms"] = 1000 * _median(after.plan, reps)
            row = {k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}
            print(row, flush=True)
            out["rows"].append(row)
    first, last = out["rows"][1] if len(out["rows"]) > 1 else out["rows"][0], out["rows"][-1]
    out["check_since_growth"] = round(last["check_since_ms"] / first["check_since_ms"], 2)
    out["open_after_growth"] = round(last["open_after_ms"] / first["open_after_ms"], 2)
    out["plan_growth"] = round(last["plan_ms"] / first["plan_ms"], 2)
    return out


if __name__ == "__main__":
    import sys

    print(scenario_log_history(tuple(int(s) for s in (sys.argv[1:] or ["10", "100", "300"]))))
