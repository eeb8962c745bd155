"""Dagster's bookkeeping per partition: the same data and query as a daily and as an hourly model.

Two models over one hourly Delta source differ only in their interval unit (``cron '@daily'`` vs
``'@hourly'``). Each is backfilled over ``days`` days by ``incremental-assets run MODEL --auto --end E``
(a fresh process each, a fresh Dagster home and warehouse each, as a user runs it), in three variants,
repetitions interleaved: ``before``, Dagster's default SQLite event log writing each event on its own and
the hourly table cut into one file per hour; ``hour_files``, the project's event log storage (one
transaction per batch of events), still one file per hour; ``after``, the project's event log and one file
per day (``hourly_files: day``, the default). Reported: hourly/daily per
variant and the extra cost per extra partition, ``(hourly - daily) / (hourly partitions - daily partitions)``
(which includes Spark's and Delta's per-partition cost: more interval values, files and log entries).

The same runs in this process (``Runner.run(auto=True)``, what the command calls, one warm Spark session)
time the event log storage itself: its seconds per partition are the bookkeeping proper. On a real
PostgreSQL (when its binaries are installed), an asset with no work over 1 vs 240 hourly partitions:
dagster-postgres as is, with ``DAGSTER_EVENT_BATCH_SIZE`` set, and the project's batched Postgres event log;
and the CLI's daily and hourly ``run --auto`` with the Dagster home on that PostgreSQL.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))

START = datetime(2024, 1, 1, tzinfo=timezone.utc)
SOURCES = """\
- name: raw.events
  location: data/events
  format: delta
  time_column: ts
  interval_unit: hour
"""
MODEL = """\
MODEL (name b.{name}, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), start '2024-01-01', cron '@{name}');
SELECT ts, k, v FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
"""
MODELS = ("daily", "hourly")
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
# before: Dagster's own SQLite event log and one file per hour (the state before both changes);
# hour_files: the project's batched event log, one file per hour; after: batched, one file per day.
VARIANTS = ("before", "hour_files", "after")
HOURLY_FILES = {"before": "hour", "hour_files": "hour", "after": "day"}


def run_argv(model: str, end: str, root) -> list[str]:
    """The CLI command that brings model ``b.<model>`` of the project at ``root`` up to ``end``."""
    return [
        sys.executable,
        "-m",
        "incremental_assets.cli",
        "run",
        f"b.{model}",
        "--auto",
        "--end",
        end,
        "--project",
        str(root),
    ]


def write_project(root: Path, days: int, per_hour: int) -> Path:
    from helpers import write_events

    (root / "models").mkdir(parents=True)
    (root / "sources.yaml").write_text(SOURCES)
    for name in MODELS:
        (root / "models" / f"{name}.sql").write_text(MODEL.format(name=name))
    write_events(root / "data" / "events", START, days * 24, per_hour=per_hour)
    return root


def default_event_log_yaml() -> str:
    """The project's dagster.yaml without its event log storage (Dagster's default SQLite event log) and
    without the product's mark, so the CLI keeps it as the user's file."""
    from incremental_assets.orchestration.instance import dagster_yaml

    text = dagster_yaml(2).split("\n", 1)[1]
    plain = re.sub(r"# Dagster's SQLite event log.*?env: DAGSTER_HOME\n", "", text, flags=re.S)
    assert "event_log_storage" not in plain and "RunCoordinator" in plain
    return plain


def prepare_home(home: Path, variant: str) -> None:
    home.mkdir(parents=True)
    if variant == "before":
        (home / "dagster.yaml").write_text(default_event_log_yaml())


def variant_env(variant: str, home: Path, warehouse: Path) -> dict[str, str]:
    from incremental_assets.orchestration.event_log import BATCH_SIZE_ENV

    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "INCREMENTAL_ASSETS_WAREHOUSE": str(warehouse),
        "INCREMENTAL_ASSETS_SPARK_MASTER": "local[2]",
        "PYTHONPATH": str(REPO),
        "INCREMENTAL_ASSETS_HOURLY_FILES": HOURLY_FILES[variant],
    }
    env.pop(BATCH_SIZE_ENV, None)
    return env


def recorded(home: Path, model: str) -> int:
    import dagster as dg

    from incremental_assets.orchestration.instance import open_instance

    with open_instance(home) as instance:
        return len(instance.get_materialized_partitions(dg.AssetKey(["b", model])))


def cli_runs(root: Path, days: int, reps: int) -> dict[str, dict[str, float]]:
    """Seconds of ``run --auto`` per variant and model, medians of ``reps`` interleaved repetitions."""
    from peer import run

    end = (START + timedelta(days=days)).date().isoformat()
    times: dict[str, dict[str, list[float]]] = {v: {m: [] for m in MODELS} for v in VARIANTS}
    for rep in range(reps):
        for variant in VARIANTS if rep % 2 == 0 else VARIANTS[::-1]:
            for model in MODELS:
                home, warehouse = root / f"home-{variant}-{model}-{rep}", root / f"wh-{variant}-{model}-{rep}"
                prepare_home(home, variant)
                argv = run_argv(model, end, root)
                seconds = run(argv, root, variant_env(variant, home, warehouse))
                partitions = days * (24 if model == "hourly" else 1)
                assert recorded(home, model) == partitions, f"{variant} {model}: not every partition recorded"
                times[variant][model].append(seconds)
                print(f"bookkeeping: CLI {variant} {model} ({partitions} partitions) {seconds:.2f}s", flush=True)
    return {v: {m: statistics.median(ts) for m, ts in by_model.items()} for v, by_model in times.items()}


class StorageClock:
    """Seconds an instance's event log storage spends storing events (nested calls counted once)."""

    def __init__(self, instance):
        self.seconds, self.depth = 0.0, 0
        storage = instance.event_log_storage
        for name in ("store_event", "store_event_batch"):
            setattr(storage, name, self.timed(getattr(storage, name)))

    def timed(self, fn):
        def call(*args, **kwargs):
            self.depth += 1
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.seconds += time.perf_counter() - began

        return call


def in_process_runs(spark, root: Path, days: int, tag: str = "") -> dict[str, dict[str, Any]]:
    """Each variant and model once in this process: the run's seconds and the storage's seconds."""
    import dataclasses

    from incremental_assets.load.project import load_project
    from incremental_assets.orchestration.build_definitions import build_definitions
    from incremental_assets.orchestration.event_log import BATCH_SIZE_ENV
    from incremental_assets.orchestration.instance import open_instance
    from incremental_assets.orchestration.runner import Runner

    end = START + timedelta(days=days)
    out: dict[str, dict[str, Any]] = {v: {} for v in VARIANTS}
    saved = os.environ.get(BATCH_SIZE_ENV)
    try:
        for variant in VARIANTS:
            for model in MODELS:
                os.environ.pop(BATCH_SIZE_ENV, None)
                home = root / f"{tag}inproc-home-{variant}-{model}"
                prepare_home(home, variant)
                project = load_project(root)
                settings = dataclasses.replace(
                    project.settings,
                    warehouse=str(root / f"{tag}inproc-wh-{variant}-{model}"),
                    hourly_files=HOURLY_FILES[variant],
                )
                project = dataclasses.replace(project, settings=settings)
                instance = open_instance(home)
                clock = StorageClock(instance)
                runner = Runner(project, instance, build_definitions(project))
                began = time.perf_counter()
                report = runner.run([project.model(f"b.{model}")], auto=True, end=end)
                seconds = time.perf_counter() - began
                assert report.success, [r.error for r in report.records]
                partitions = days * (24 if model == "hourly" else 1)
                out[variant][model] = {
                    "partitions": partitions,
                    "run_s": round(seconds, 2),
                    "storage_s": round(clock.seconds, 2),
                    "storage_ms_per_partition": round(1000 * clock.seconds / partitions, 2),
                }
                print(
                    f"bookkeeping: {tag}in process {variant} {model}: run {seconds:.2f}s, event log "
                    f"{clock.seconds:.2f}s "
                    f"({1000 * clock.seconds / partitions:.2f} ms per partition)",
                    flush=True,
                )
                instance.dispose()
    finally:
        os.environ.pop(BATCH_SIZE_ENV, None)
        if saved is not None:
            os.environ[BATCH_SIZE_ENV] = saved
    return out


def per_extra_partition(daily: float, hourly: float, days: int) -> float:
    """Milliseconds each extra partition costs: the hourly model has 23 more per day."""
    return round(1000 * (hourly - daily) / (23 * days), 2)


def scenario_bookkeeping(spark, root: Path, *, days: int, reps: int, per_hour: int = 4) -> dict:
    write_project(root, days, per_hour)
    partitions = {"daily": days, "hourly": days * 24}
    in_process_runs(spark, root, 1, tag="warm-up-")  # the session, the instance code, the first table
    inproc = in_process_runs(spark, root, days)
    for variant, by_model in inproc.items():
        daily, hourly = by_model["daily"], by_model["hourly"]
        by_model["hourly_over_daily"] = round(hourly["run_s"] / daily["run_s"], 2)
        by_model["run_ms_per_extra_partition"] = per_extra_partition(daily["run_s"], hourly["run_s"], days)
        by_model["event_log_ms_per_extra_partition"] = per_extra_partition(
            daily["storage_s"], hourly["storage_s"], days
        )
        print(
            f"bookkeeping: in process {variant}: hourly/daily {by_model['hourly_over_daily']}x, "
            f"{by_model['run_ms_per_extra_partition']} ms per extra partition, "
            f"of which the event log {by_model['event_log_ms_per_extra_partition']} ms",
            flush=True,
        )
    cli = cli_runs(root, days, reps)
    result: dict = {
        "days": days,
        "rows": days * 24 * per_hour,
        "reps": reps,
        "partitions": partitions,
        "in_process": inproc,
        "cli_s": {},
    }
    for variant in VARIANTS:
        daily, hourly = cli[variant]["daily"], cli[variant]["hourly"]
        extra_ms = per_extra_partition(daily, hourly, days)
        result["cli_s"][variant] = {
            "daily": round(daily, 2),
            "hourly": round(hourly, 2),
            "hourly_over_daily": round(hourly / daily, 2),
            "ms_per_extra_partition": round(extra_ms, 2),
        }
        print(
            f"bookkeeping: CLI {variant}: daily {daily:.2f}s, hourly {hourly:.2f}s: {hourly / daily:.2f}x, "
            f"{extra_ms:.1f} ms per extra partition",
            flush=True,
        )
    from cluster.services import postgres_unavailable_reason

    reason = postgres_unavailable_reason()
    result["sqlite_options"] = sqlite_event_logs(root, 240)
    result["postgres"] = {"skipped": reason} if reason else postgres_event_logs(root, 240)
    result["postgres_cli_s"] = {"skipped": reason} if reason else postgres_cli_runs(root, days, reps)
    return result


POSTGRES_VARIANTS = {
    # name: (event log module, class, DAGSTER_EVENT_BATCH_SIZE)
    "dagster-postgres": ("dagster_postgres.event_log", "PostgresEventLogStorage", None),
    "dagster-postgres, batch size set": ("dagster_postgres.event_log", "PostgresEventLogStorage", "10000"),
    "ours": ("incremental_assets.orchestration.event_log_postgres", "BatchedPostgresEventLogStorage", None),
}


def postgres_instance_yaml(url: str, module: str, cls: str) -> str:
    storages = {
        "run_storage": ("dagster_postgres.run_storage", "PostgresRunStorage"),
        "event_log_storage": (module, cls),
        "schedule_storage": ("dagster_postgres.schedule_storage", "PostgresScheduleStorage"),
    }
    return "telemetry:\n  enabled: false\n" + "".join(
        f'{key}:\n  module: {m}\n  class: {c}\n  config:\n    postgres_url: "{url}"\n'
        for key, (m, c) in storages.items()
    )


def postgres_home(server, home: Path, database: str, variant: str) -> Path:
    """A Dagster home whose runs, event log (of ``variant``) and schedules live in a new database."""
    conn = server.connect("postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{database}"')
    conn.close()
    url = f"postgresql+psycopg2://{server.user}:{server.password}@{server.host}:{server.port}/{database}"
    module, cls, _ = POSTGRES_VARIANTS[variant]
    home.mkdir()
    (home / "dagster.yaml").write_text(postgres_instance_yaml(url, module, cls))
    return home


def empty_asset_job():
    """An hourly asset that does no work (one run over a range of partitions) and its partition keys."""
    import dagster as dg

    hours = dg.HourlyPartitionsDefinition(start_date="2024-01-01-00:00")

    @dg.asset(partitions_def=hours, backfill_policy=dg.BackfillPolicy.single_run())
    def nothing(context):  # no annotation: this module's annotations are strings, dg is local
        return dg.MaterializeResult(metadata={"partitions": len(context.partition_keys)})

    job = dg.Definitions(assets=[nothing]).resolve_implicit_global_asset_job_def()
    return job, nothing.key, hours.get_partition_keys(current_time=START + timedelta(days=400))


def time_partitions(home: Path, batch: str | None, partitions: int, what: str) -> dict:
    """Runs over 1 partition (best of 3) and over ``partitions`` on the instance in ``home``, with
    DAGSTER_EVENT_BATCH_SIZE as given (None: unset, unless the instance's event log sets it)."""
    import dagster as dg

    from incremental_assets.orchestration.event_log import BATCH_SIZE_ENV

    job, key, keys = empty_asset_job()
    os.environ.pop(BATCH_SIZE_ENV, None)
    if batch:
        os.environ[BATCH_SIZE_ENV] = batch
    saved_home = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(home)  # the project's event log storages read their folder from it
    try:
        out = _time_partitions(dg, job, key, keys, home, partitions)
    finally:  # later scenarios (their subprocesses) must not inherit this home
        os.environ.pop(BATCH_SIZE_ENV, None)
        os.environ.pop("DAGSTER_HOME", None)
        if saved_home is not None:
            os.environ["DAGSTER_HOME"] = saved_home
    print(
        f"bookkeeping: {what}: 1 partition {out['one_partition_s']:.2f}s, {partitions} partitions "
        f"{out[f'{partitions}_partitions_s']:.2f}s, "
        f"{out['ms_per_extra_partition']} ms per extra partition",
        flush=True,
    )
    return out


def _time_partitions(dg, job, key, keys, home: Path, partitions: int) -> dict:
    with dg.DagsterInstance.from_config(str(home)) as instance:

        def run(first: int, last: int) -> float:
            began = time.perf_counter()
            tags = {"dagster/asset_partition_range_start": keys[first], "dagster/asset_partition_range_end": keys[last]}
            assert job.execute_in_process(instance=instance, tags=tags, run_config=QUIET).success
            return time.perf_counter() - began

        one = min(run(i, i) for i in range(3))
        many = run(3, 2 + partitions)
        assert len(instance.get_materialized_partitions(key)) == partitions + 3
    return {
        "one_partition_s": round(one, 2),
        f"{partitions}_partitions_s": round(many, 2),
        "ms_per_extra_partition": round(1000 * (many - one) / (partitions - 1), 2),
    }


def postgres_event_logs(root: Path, partitions: int) -> dict:
    """Dagster's event log on a real PostgreSQL (started on loopback, fsync off), per variant."""
    from cluster.services import postgres_server

    with postgres_server() as server:
        return {
            name: time_partitions(
                postgres_home(server, root / f"pg-home-{n}", f"v{n}", name), batch, partitions, f"Postgres, {name}"
            )
            for n, (name, (_, _, batch)) in enumerate(POSTGRES_VARIANTS.items())
        }


def postgres_cli_runs(root: Path, days: int, reps: int) -> dict:
    """``run --auto`` of the daily and the hourly model, as in :func:`cli_runs` (one file per day), with the
    Dagster home's runs, event log (the project's batched Postgres one) and schedules on a real PostgreSQL."""
    from cluster.services import postgres_server
    from peer import run

    end = (START + timedelta(days=days)).date().isoformat()
    times: dict[str, list[float]] = {m: [] for m in MODELS}
    with postgres_server() as server:
        for rep in range(reps):
            for model in MODELS if rep % 2 == 0 else MODELS[::-1]:
                home = postgres_home(server, root / f"pg-cli-{model}-{rep}", f"cli_{model}_{rep}", "ours")
                argv = run_argv(model, end, root)
                seconds = run(argv, root, variant_env("after", home, root / f"wh-pg-{model}-{rep}"))
                partitions = days * (24 if model == "hourly" else 1)
                assert recorded(home, model) == partitions, f"Postgres {model}: not every partition recorded"
                times[model].append(seconds)
                print(f"bookkeeping: CLI on Postgres {model} ({partitions} partitions) {seconds:.2f}s", flush=True)
    daily, hourly = statistics.median(times["daily"]), statistics.median(times["hourly"])
    return {
        "daily": round(daily, 2),
        "hourly": round(hourly, 2),
        "hourly_over_daily": round(hourly / daily, 2),
        "ms_per_extra_partition": round(per_extra_partition(daily, hourly, days), 2),
        "every_run_s": times,
    }


def sqlite_event_logs(root: Path, partitions: int) -> dict:
    """The SQLite options: Dagster's default event log, the same with ``PRAGMA synchronous=NORMAL`` on every
    connection (its databases are in WAL mode already), and the project's batched event log."""
    import sqlalchemy

    from incremental_assets.orchestration.instance import dagster_yaml

    def normal_sync(dbapi_connection, _record):
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")

    out = {}
    for name in ("default", "synchronous=NORMAL", "batched"):
        home = root / f"sqlite-options-{len(out)}"
        home.mkdir()
        (home / "dagster.yaml").write_text(dagster_yaml(1) if name == "batched" else default_event_log_yaml())
        if name == "synchronous=NORMAL":
            sqlalchemy.event.listen(sqlalchemy.engine.Engine, "connect", normal_sync)
        try:
            out[name] = time_partitions(home, None, partitions, f"SQLite, {name}")
        finally:
            if name == "synchronous=NORMAL":
                sqlalchemy.event.remove(sqlalchemy.engine.Engine, "connect", normal_sync)
    return out


if __name__ == "__main__":
    # python benchmarks/bookkeeping.py [DAYS]: the whole scenario, once; `options N`: only the event log
    # variants on SQLite and Postgres with an asset that does no work, over N partitions.
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        if sys.argv[1:2] == ["postgres-cli"]:  # `postgres-cli DAYS REPS`: only the CLI's hourly/daily on Postgres
            days = int(sys.argv[2]) if len(sys.argv) > 2 else 90
            write_project(Path(tmp), days, 4)
            print(postgres_cli_runs(Path(tmp), days, int(sys.argv[3]) if len(sys.argv) > 3 else 2))
        elif sys.argv[1:2] == ["options"]:
            n = int(sys.argv[2]) if len(sys.argv) > 2 else 240
            print({"sqlite": sqlite_event_logs(Path(tmp), n), "postgres": postgres_event_logs(Path(tmp), n)})
        else:
            print(scenario_bookkeeping(None, Path(tmp), days=int(sys.argv[1]) if len(sys.argv) > 1 else 7, reps=1))
