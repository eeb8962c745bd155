"""The project's Dagster instance and what the product asks of it: recorded intervals, active runs,
upstream coverage, runs whose process died."""

from __future__ import annotations

import hashlib
import os
import socket
import sys
from pathlib import Path

import dagster as dg

from incremental_assets.errors import IncrementalAssetsError
from incremental_assets.load.settings import default_max_concurrent_runs, default_runs_on_server
from incremental_assets.model.intervals import (
    TimeWindow,
    ceil,
    floor,
    subtract,
    to_utc,
)
from incremental_assets.model.kinds import IncrementalByTimeRange
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.partition_keys import partition_states, time_partitions
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.analyses import input_bound

# The dagster.yaml that earlier versions wrote, byte for byte: such a file is upgraded in place.
LEGACY_DAGSTER_YAMLS = (
    """\
# Dagster instance of this project: runs from the CLI and from `dagster dev` are recorded here.
telemetry:
  enabled: false
run_coordinator:
  module: dagster.core.run_coordinator
  class: DefaultRunCoordinator
""",
)

MANAGED_MARK = "# incremental-assets managed file, sha256:"

DAGSTER_YAML = """\
# Dagster instance of this project: runs from the CLI and from `dagster dev` are recorded here.
# Written by incremental-assets, and rewritten when the project's max_concurrent_runs changes (setting
# or INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS) as long as nobody edited it: edit anything here (or delete
# the first line) and it is yours, left exactly as you wrote it.
telemetry:
  enabled: false
# Dagster's SQLite run and schedule storage (same files and tables), opened without reading Dagster's
# schema scripts once the databases are set up.
run_storage:
  module: incremental_assets.orchestration.sqlite_storage
  class: ProjectSqliteRunStorage
  config:
    dagster_home:
      env: DAGSTER_HOME
schedule_storage:
  module: incremental_assets.orchestration.sqlite_storage
  class: ProjectSqliteScheduleStorage
  config:
    dagster_home:
      env: DAGSTER_HOME
# Dagster's SQLite event log (same files and tables) writing a batch of events, e.g. every partition's
# materialization of a run over a range, in one transaction instead of one per event.
event_log_storage:
  module: incremental_assets.orchestration.event_log
  class: BatchedSqliteEventLogStorage
  config:
    dagster_home:
      env: DAGSTER_HOME
# Dagster's compute logs (a run's stdout and stderr, shown in the UI) in the same folder, copied on to the
# terminal by a thread of the run's process rather than four processes of their own per run.
compute_logs:
  module: incremental_assets.orchestration.compute_logs
  class: ProjectComputeLogManager
  config:
    dagster_home:
      env: DAGSTER_HOME
# Runs from the UI, schedules, sensors and backfills wait in a queue; the daemon (`dagster dev` or
# `dagster-daemon run`) starts at most max_concurrent_runs of those that start a Spark of their own at
# once, and at most max_concurrent_runs_on_server while the long-lived Spark (`incremental-assets spark
# start`) is up: the project's coordinator (Dagster's queue) tags each run it queues with which it is.
# Runs the automation queues with the upstream runs they read, to wait for them in their run, have as
# many slots again of their own: they never take the slot of a run they wait for.
run_coordinator:
  module: incremental_assets.orchestration.run_coordinator
  class: ProjectRunCoordinator
  config:
    dequeue_interval_seconds: 1
concurrency:
  runs:
    max_concurrent_runs: {total}
    tag_concurrency_limits:
      - key: incremental_assets/spark
        value: own
        limit: {max_concurrent_runs}
      - key: incremental_assets/after_upstream_runs
        value: "false"
        limit: {all_runs}
      - key: incremental_assets/after_upstream_runs
        value: "true"
        limit: {all_runs}
  # Every model asset is in the pool of its table (`table/<model name>`): one step at a time writes a
  # table. A queued run whose table is busy stays queued; an in-process CLI run waits for the slot.
  pools:
    granularity: op
    default_limit: 1
# Dagster's default launcher (through the code server), except while `incremental-assets spark start` keeps
# the project's command server: then a run starts in a copy of it with its libraries imported.
run_launcher:
  module: incremental_assets.orchestration.run_launcher
  class: ProjectRunLauncher
# The daemon frees the table slots a run still held when it ended (a run worker that was killed), and
# fails a run whose process is gone (the project's launcher tells it), so the run retries start it again.
run_monitoring:
  enabled: true
  free_slots_after_run_end_seconds: 30
  poll_interval_seconds: 10
# A queued run that failed for a reason other than its input (a killed run worker, a Spark server that
# went away) is run again by the daemon, twice at most; a run that failed on input the user must fix is
# tagged not to be (it would fail the same way).
run_retries:
  enabled: true
  max_retries: 2
"""


def dagster_yaml(max_concurrent_runs: int, on_server: int | None = None) -> str:
    """The dagster.yaml the project writes, first line a mark with the checksum of the rest: at most
    ``max_concurrent_runs`` runs with a Spark of their own at once, ``on_server`` in all (default: see
    :func:`incremental_assets.load.settings.default_runs_on_server`), and as many again of the runs that
    wait for upstream runs queued with them (:data:`~.tags.AFTER_UPSTREAM_TAG`)."""
    own = int(max_concurrent_runs)
    all_runs = max(own, int(on_server if on_server is not None else default_runs_on_server()))
    body = DAGSTER_YAML.format(max_concurrent_runs=own, all_runs=all_runs, total=2 * all_runs)
    return f"{MANAGED_MARK}{hashlib.sha256(body.encode()).hexdigest()[:16]}\n{body}"


def instance_config_owner(text: str) -> str:
    """Who a dagster.yaml belongs to: ``product`` if its text is exactly what some version of the
    product wrote (an older version's file, or a marked file whose checksum still matches), else ``user``.

    >>> instance_config_owner(dagster_yaml(2)), instance_config_owner(dagster_yaml(2).replace(": 2", ": 3"))
    ('product', 'user')
    >>> instance_config_owner(LEGACY_DAGSTER_YAMLS[0]), instance_config_owner("telemetry: {enabled: false}\\n")
    ('product', 'user')
    """
    if text in LEGACY_DAGSTER_YAMLS:
        return "product"
    first, _, body = text.partition("\n")
    if first.startswith(MANAGED_MARK) and first[len(MANAGED_MARK) :] == hashlib.sha256(body.encode()).hexdigest()[:16]:
        return "product"
    return "user"


def ensure_instance_config(home: Path | str, max_concurrent_runs: int, on_server: int | None = None) -> str:
    """Write, upgrade or keep ``<home>/dagster.yaml``: ``created``, ``updated``, ``current`` or ``user``
    (a file someone edited: never rewritten). Writes go to a temporary name renamed into place, so a
    webserver or daemon reading it never sees half a file."""
    config = Path(home) / "dagster.yaml"
    wanted = dagster_yaml(max_concurrent_runs, on_server)
    if config.exists():
        text = config.read_text(encoding="utf-8")
        if text == wanted:
            return "current"
        if instance_config_owner(text) == "user":
            queued = any(name in text for name in ("QueuedRunCoordinator", "ProjectRunCoordinator"))
            if not queued and not _warned_unqueued.get(str(config)):
                _warned_unqueued[str(config)] = True
                print(
                    f"note: {config} is yours (edited), so it is left as is; it does not queue runs "
                    "(run_coordinator QueuedRunCoordinator): delete it to get the project's queue and per-table pools",
                    file=sys.stderr,
                )
            return "user"
        state = "updated"
    else:
        state = "created"
    tmp = config.with_name(f".dagster.yaml.{os.getpid()}.tmp")
    tmp.write_text(wanted, encoding="utf-8")
    os.replace(tmp, config)
    return state


_warned_unqueued: dict[str, bool] = {}


def table_pool(model_name: str) -> str:
    """The Dagster concurrency pool of a model's table. The project's instance limits every pool to 1
    (``concurrency.pools.default_limit``), so two runs writing one table never overlap: the second
    waits in the queue (or, in process, for the slot) instead of racing the first's Delta commit."""
    return f"table/{model_name}"


def open_instance(
    home: Path | str, max_concurrent_runs: int | None = None, on_server: int | None = None
) -> dg.DagsterInstance:
    """The project's Dagster instance (SQLite under ``home`` unless its dagster.yaml says otherwise).

    Its dagster.yaml queues runs (at most ``max_concurrent_runs`` that start a Spark of their own at once,
    default: what fits this machine, see :func:`incremental_assets.load.settings.default_max_concurrent_runs`;
    at most ``on_server`` while the long-lived Spark is up) and limits each
    table's pool to one writer; see :func:`ensure_instance_config` for when it is (re)written."""
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    if max_concurrent_runs is None:
        max_concurrent_runs = default_max_concurrent_runs("local[2]")
    ensure_instance_config(home, max_concurrent_runs, on_server)
    os.environ["DAGSTER_HOME"] = str(home)
    return dg.DagsterInstance.from_config(str(home))


def project_instance(project: Project) -> dg.DagsterInstance:
    """The project's Dagster instance, opened as its settings say (home, runs at once); see :func:`open_instance`."""
    home = project.settings.dagster_home
    if home is None:
        raise IncrementalAssetsError(
            "the project's settings have no dagster_home (fix: load the project with load_project, or set DAGSTER_HOME)"
        )
    return open_instance(home, project.settings.max_concurrent_runs, project.settings.max_concurrent_runs_on_server)


def register_table_pools(instance: dg.DagsterInstance, project: Project) -> list[str]:
    """Create the pool of each model's table (limit: the instance's default, 1) if it does not exist yet.

    Dagster creates a pool when a step first claims it; until then the run queue does not know the
    pool and would start two queued runs of one new table together (the second then waits, blocked,
    inside its run). Registered up front, the second stays queued. Returns the pools created."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits or instance.global_op_concurrency_default_limit is None:
        return []
    existing = storage.get_concurrency_keys()
    created = [table_pool(m.name) for m in project.models.values() if table_pool(m.name) not in existing]
    for pool in created:
        storage.initialize_concurrency_limit_to_default(pool)
    return created


def fail_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark as failed the CLI runs still recorded as running whose process, on this host, is gone
    (killed, out of memory): their intervals then show as failed, not as running forever."""
    host = socket.gethostname()
    failed = []
    for record in instance.get_run_records(
        filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING])
    ):
        run = record.dagster_run
        pid = run.tags.get(tags.PID_TAG)
        if run.tags.get(tags.HOST_TAG) != host or pid is None or not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        instance.report_run_failed(run, message=f"the process of this run (pid {pid}) died without finishing it")
        if instance.event_log_storage.supports_global_concurrency_limits:
            # the table's pool slot it held (or waited for) is free again
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        failed.append(run.run_id)
    return failed


def materialized_windows(
    instance: dg.DagsterInstance, key: dg.AssetKey, partitions: dg.TimeWindowPartitionsDefinition
) -> list[TimeWindow]:
    """The intervals Dagster has recorded as materialized, merged into ranges."""
    return partition_states(instance, key, partitions, within=False).materialized


def missing_upstream(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, window: TimeWindow, translator: ModelTranslator
) -> list[str]:
    """Describe upstream intervals the window needs, lookback included, that Dagster has not recorded
    (backfills do not check intervals outside the range they run)."""
    problems = []
    for upstream in project.upstream_models(model):
        if not isinstance(upstream.kind, IncrementalByTimeRange):
            continue
        partitions = translator.get_partitions_def(upstream)
        partitions = time_partitions(partitions, upstream.name)
        assert upstream.start is not None
        bound = input_bound(project, model.name, upstream.name)
        needed = window.widen(bound.before, bound.after) if bound is not None else window
        unit = upstream.unit
        need_start = max(floor(needed.start, unit), upstream.start)
        need_end = ceil(needed.end, unit)
        if upstream.end:
            need_end = min(need_end, upstream.end)
        if need_end <= need_start:
            continue
        gaps = subtract(
            TimeWindow(need_start, need_end),
            materialized_windows(instance, translator.get_asset_key(upstream), partitions),
        )
        if gaps:
            problems.append(
                f"{upstream.name} is missing {', '.join(str(g) for g in gaps[:5])}" + (" ..." if len(gaps) > 5 else "")
            )
    return problems


ACTIVE_RUN_STATUSES = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def pending_upstream_runs(
    instance: dg.DagsterInstance,
    project: Project,
    model: SqlModel,
    window: TimeWindow | None,
    translator: ModelTranslator,
    own_run_id: str,
    done: set[tuple[str, dg.AssetKey]] | None = None,
) -> list[str]:
    """Other runs, queued or running, that are rebuilding upstream data this run would read (and have not
    finished the step that does: a run of several models is waited for only until its step of the upstream
    succeeded, its commit made and recorded). ``done``: the (run, upstream) pairs found finished by earlier
    looks of the same wait, kept up to date here; a finished step stays finished, so those are not read again.

    A sensor or a user may launch an upstream re-run and its downstream runs together; the downstream
    must not read the upstream's old rows while the new ones are being written, so it waits for them.
    """
    keys = {translator.get_asset_key(u): u for u in project.upstream_models(model)}
    if not keys:
        return []
    pending = []
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=ACTIVE_RUN_STATUSES)):
        run = record.dagster_run
        if run.run_id == own_run_id:
            continue
        for key in set(run.asset_selection or ()) & set(keys):
            upstream = keys[key]
            start, end = run.tags.get(tags.RANGE_START_TAG), run.tags.get(tags.RANGE_END_TAG)
            partitions = translator.get_partitions_def(upstream)
            if window is not None and start and end and isinstance(partitions, dg.TimeWindowPartitionsDefinition):
                first = partitions.time_window_for_partition_key(start)
                last = partitions.time_window_for_partition_key(end)
                bound = input_bound(project, model.name, upstream.name)
                needed = window.widen(bound.before, bound.after) if bound is not None else window
                if not TimeWindow(to_utc(first.start), to_utc(last.end)).overlaps(needed):
                    continue
            if done is not None and (run.run_id, key) in done:
                continue
            if run.status == dg.DagsterRunStatus.STARTED and _step_done(instance, run.run_id, key):
                if done is not None:
                    done.add((run.run_id, key))
                continue
            pending.append(f"{upstream.name} in run {run.run_id[:8]} ({run.status.value.lower()})")
    return pending


def _step_done(instance: dg.DagsterInstance, run_id: str, key: dg.AssetKey) -> bool:
    """Whether the step of a run that materializes ``key`` has succeeded (its events all recorded)."""
    from dagster._core.events import DagsterEventType

    events = instance.all_logs(run_id, of_type={DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.STEP_SUCCESS})
    steps = {
        e.step_key
        for e in events
        if e.dagster_event is not None
        and e.dagster_event.event_type == DagsterEventType.ASSET_MATERIALIZATION
        and e.dagster_event.asset_key == key
    }
    return any(
        e.step_key in steps
        for e in events
        if e.dagster_event is not None and e.dagster_event.event_type == DagsterEventType.STEP_SUCCESS
    )


def report_materializations(instance: dg.DagsterInstance, materializations: list[dg.AssetMaterialization]) -> None:
    """Record materializations made without a run (a promotion, a commit Dagster missed) as ONE batch:
    the project's event log writes a batch in one transaction per database, where recording them one by
    one costs a transaction each (~20 ms on SQLite: a year of hourly partitions took minutes). Another
    storage, or batches switched off (``DAGSTER_EVENT_BATCH_SIZE``), stores them as Dagster does anyway."""
    import uuid

    from dagster._core.events import DagsterEvent, DagsterEventBatchMetadata, DagsterEventType, StepMaterializationData
    from dagster._core.instance.utils import RUNLESS_JOB_NAME, RUNLESS_RUN_ID

    batch = f"runless-{uuid.uuid4().hex}"
    for i, materialization in enumerate(materializations):
        event = DagsterEvent(
            event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
            event_specific_data=StepMaterializationData(materialization),
            job_name=RUNLESS_JOB_NAME,
        )
        instance.report_dagster_event(
            event,
            run_id=RUNLESS_RUN_ID,
            batch_metadata=DagsterEventBatchMetadata(batch, i == len(materializations) - 1),
        )
