"""Maintenance of the tables and of Dagster's storage, as Dagster jobs on the project's schedules and from the CLI.

- **Compaction** (:func:`~incremental_assets.delta.compact.compact`): the files of each complete day of an
  hourly model (every hour of it recorded as materialized), and again after late hours rewrote part of it,
  become one file; the small files of other models' partitions are packed into files of about
  ``target_file_mb``. The commit changes no row (``dataChange: false``): nothing is recorded in Dagster.
- **Checkpoints** of the Delta log that a commit did not write (see :mod:`incremental_assets.delta.checkpoints`).
- **Vacuum**: data files replaced more than ``retention_hours`` ago, and staging folders of dead runs.
- **Purge of old runs** (:func:`purge_runs`): runs older than ``run_retention_days`` are deleted with their
  events, except the runs holding the latest materialization or confirmation of a partition of any
  asset: what ``status``, the staleness of intervals and the integrity check read.

A job maintains each table in turn while holding a slot of the table's Dagster pool
(:func:`~.instance.table_pool`, limit 1), the pool the model's own runs hold: maintenance never overlaps a
run writing the same table, and waits for it. (One op claims the slots itself: an op per table would
cost seconds of definition loading for a thousand models.) Jobs are ops, not assets:
they record no materialization. Schedules come from the project's ``maintenance`` setting.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterator

import dagster as dg

from incremental_assets import delta
from incremental_assets.model import clock
from incremental_assets.model.intervals import IntervalUnit
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration.instance import ACTIVE_RUN_STATUSES, materialized_windows, table_pool
from incremental_assets.orchestration.translator import ModelTranslator

COMPACT, VACUUM, PURGE = "compact", "vacuum", "purge_runs"
JOB_NAMES = {COMPACT: "maintenance_compact", VACUUM: "maintenance_vacuum", PURGE: "maintenance_purge_runs"}
STAGING_AGE = timedelta(hours=24)


def complete_days(instance: dg.DagsterInstance, model: SqlModel, translator: ModelTranslator) -> set[str]:
    """The ``ia_day`` keys of the days whose every interval (from the model's start) Dagster records as
    materialized: the days of an hourly table that no scheduled run will add to any more."""
    partitions = translator.get_partitions_def(model)
    if not isinstance(partitions, dg.TimeWindowPartitionsDefinition):
        return set()
    day = IntervalUnit.DAY
    out = set()
    for window in materialized_windows(instance, translator.get_asset_key(model), partitions):
        current = day.floor(window.start)
        if current < window.start and (model.start is None or window.start > model.start):
            current = day.next(current)  # the day begins before what is recorded
        while day.next(current) <= window.end:
            out.add(day.partition_key(current))
            current = day.next(current)
    return out


def compact_model(
    project: Project,
    instance: dg.DagsterInstance,
    model: SqlModel,
    translator: ModelTranslator,
    *,
    dry_run: bool = False,
) -> delta.CompactResult:
    """Compact one model's table: the complete days of a table cut by day, the small files of any other."""
    uri = project.settings.table_location(model.name)
    if not model.has_table or not delta.exists(uri):
        return delta.CompactResult()
    days = complete_days(instance, model, translator) if delta.partitioned_by_day(uri) else None
    target = project.settings.maintenance.target_file_mb * 1024 * 1024
    return delta.compact(uri, days=days, target_bytes=target, dry_run=dry_run, owner=f"compaction of {model.name}")


def checkpoint_model(project: Project, model: SqlModel) -> str | None:
    """Write the table's Delta checkpoint when one is due (a commit writes it too; this catches up a table
    whose last commits failed to); what was done, or None."""
    uri = project.settings.table_location(model.name)
    if not model.has_table or not delta.exists(uri):
        return None
    done = delta.checkpoint_if_due(uri)
    return f"checkpoint at version {done}" if done is not None else None


def vacuum_model(project: Project, model: SqlModel, *, dry_run: bool = False) -> delta.VacuumResult:
    uri = project.settings.table_location(model.name)
    if not model.has_table or not delta.exists(uri):
        return delta.VacuumResult([], [])
    hours = project.settings.maintenance.retention_hours
    return delta.vacuum(uri, retention_hours=hours, staging_age=STAGING_AGE, dry_run=dry_run)


def maintain_model(
    project: Project,
    instance: dg.DagsterInstance,
    model: SqlModel,
    translator: ModelTranslator,
    *,
    compact: bool,
    vacuum: bool,
    dry_run: bool = False,
) -> list[str]:
    """The maintenance asked for one model's table; one line per step that did (or would do) something."""
    lines = []
    if compact:
        result = compact_model(project, instance, model, translator, dry_run=dry_run)
        if result.groups:
            lines.append(result.summary())
        if not dry_run:
            note = checkpoint_model(project, model)
            lines += [note] if note else []
    if vacuum:
        vacuumed = vacuum_model(project, model, dry_run=dry_run)
        if vacuumed.removed_files or vacuumed.orphan_dirs:
            verb = "would remove" if dry_run else "removed"
            lines.append(
                f"{verb} {len(vacuumed.removed_files)} replaced file(s), {len(vacuumed.orphan_dirs)} staging "
                "folder(s) of dead runs"
            )
    return lines


# -- Dagster's run and event storage --------------------------------------------------------------


@dataclass(frozen=True)
class Purged:
    runs: tuple[str, ...] = ()  # runs deleted (or, as a dry run, to delete)
    kept: int = 0  # old runs kept because they hold a partition's latest record


def _kept_runs(instance: dg.DagsterInstance) -> set[str]:
    """The runs holding the latest materialization or confirmation of some partition (or of an
    unpartitioned asset) of any asset: the record ``status``, staleness and integrity read."""
    from incremental_assets.orchestration.integrity import run_ids_of

    ids: set[int] = set()
    for key in instance.get_asset_keys():
        for kind in (dg.DagsterEventType.ASSET_MATERIALIZATION, dg.DagsterEventType.ASSET_OBSERVATION):
            ids.update(instance.get_latest_storage_id_by_partition(key, kind).values())
        latest = instance.fetch_materializations(key, limit=1).records
        ids.update(r.storage_id for r in latest)
    runs = run_ids_of(instance, sorted(ids))
    if runs is not None:
        return {r for r in runs.values() if r}
    kept: set[str] = set()
    for key in instance.get_asset_keys():  # another storage: read the records themselves
        for sid in sorted(ids):
            found = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=key, storage_ids=[sid]), limit=1
            ).records
            kept.update(r.run_id for r in found if r.run_id)
    return kept


def purge_runs(
    instance: dg.DagsterInstance, older_than: timedelta, *, dry_run: bool = False, now: datetime | None = None
) -> Purged:
    """Delete the finished runs created more than ``older_than`` ago, with their events (and, on SQLite,
    their event database files and compute logs), except those holding a partition's latest record."""
    before = (now or clock.now()) - older_than
    old = [r.dagster_run for r in instance.get_run_records(filters=dg.RunsFilter(created_before=before))]
    old = [run for run in old if run.status not in ACTIVE_RUN_STATUSES]
    if not old:
        return Purged()
    kept = _kept_runs(instance)
    doomed = [run for run in old if run.run_id not in kept]
    for run in [] if dry_run else doomed:
        instance.delete_run(run.run_id)
        _remove_run_files(instance, run.run_id)
    return Purged(tuple(r.run_id for r in doomed), len(old) - len(doomed))


def _remove_run_files(instance: dg.DagsterInstance, run_id: str) -> None:
    """What a deleted run leaves on disk: its SQLite event shard and its compute logs."""
    storage = instance.event_log_storage
    shard = getattr(storage, "path_for_shard", None)
    if shard is not None:
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(shard(run_id) + suffix)
            except OSError:
                pass
    try:
        instance.compute_log_manager.delete_logs(prefix=[run_id])
    except Exception:  # a manager that cannot delete (or keeps no logs for the run): nothing to free
        pass


# -- jobs and schedules ---------------------------------------------------------------------------


@contextlib.contextmanager
def table_slot(instance: dg.DagsterInstance, model: SqlModel, run_id: str, poll: float = 1.0) -> Iterator[None]:
    """Hold the slot of the model's table pool (:func:`~.instance.table_pool`) for ``run_id``, waiting
    while a run writing the table holds it: what a model asset's step does, claimed here per table so
    one op maintains every table."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits or instance.global_op_concurrency_default_limit is None:
        yield
        return
    pool, step = table_pool(model.name), f"maintenance:{model.name}"
    status = storage.claim_concurrency_slot(pool, run_id, step)
    while not status.is_claimed:
        time.sleep(poll)
        status = storage.claim_concurrency_slot(pool, run_id, step)  # a freed slot goes to a claim, not to a check
    try:
        yield
    finally:
        storage.free_concurrency_slot_for_step(run_id, step)


def _tables_op(project: Project, translator: ModelTranslator, what: str) -> dg.OpDefinition:
    @dg.op(name=f"{what}_tables", description=f"{what} every table, each while holding its table's pool")
    def _maintain(context) -> None:
        for model in [m for m in project.ordered() if m.has_table]:
            with table_slot(context.instance, model, context.run_id):
                lines = maintain_model(
                    project, context.instance, model, translator, compact=what == COMPACT, vacuum=what == VACUUM
                )
            for line in lines:
                context.log.info(f"{model.name}: {line}")

    return _maintain


def maintenance_jobs(project: Project, translator: ModelTranslator | None = None) -> list[dg.JobDefinition]:
    """The compaction and vacuum jobs (one op: each table in turn, holding its pool) and the job purging old runs."""
    translator = translator or ModelTranslator()
    days = project.settings.maintenance.run_retention_days
    texts = {
        COMPACT: "Compacts the small files of every table (no data changes) and writes due checkpoints",
        VACUUM: "Deletes replaced files past the retention and dead runs' staging folders",
        PURGE: f"Deletes runs older than {days} days and their events, keeping each partition's latest record",
    }
    jobs = []
    for what in (COMPACT, VACUUM):
        op = _tables_op(project, translator, what)
        jobs.append(
            dg.JobDefinition(
                graph_def=dg.GraphDefinition(name=JOB_NAMES[what], node_defs=[op]),
                name=JOB_NAMES[what],
                description=texts[what],
                executor_def=dg.in_process_executor,
            )
        )

    @dg.op(name="purge_old_runs", description=texts[PURGE])
    def _purge(context) -> None:
        result = purge_runs(context.instance, timedelta(days=days))
        context.log.info(
            f"deleted {len(result.runs)} run(s) older than {days} days; kept {result.kept} holding a "
            "partition's latest record"
        )

    @dg.job(name=JOB_NAMES[PURGE], description=texts[PURGE], executor_def=dg.in_process_executor)
    def _purge_job() -> None:
        _purge()

    return [*jobs, _purge_job]


def maintenance_schedules(project: Project, jobs: list[dg.JobDefinition]) -> list[dg.ScheduleDefinition]:
    """A schedule per maintenance job the ``maintenance`` setting gives a cron (running unless stopped in the UI)."""
    settings = project.settings.maintenance
    by_name = {job.name: job for job in jobs}
    out = []
    for what in (COMPACT, VACUUM, PURGE):
        cron = getattr(settings, what)
        if cron:
            out.append(
                dg.ScheduleDefinition(
                    name=f"{JOB_NAMES[what]}_schedule",
                    cron_schedule=cron,
                    job=by_name[JOB_NAMES[what]],
                    execution_timezone="UTC",
                    default_status=dg.DefaultScheduleStatus.RUNNING,
                )
            )
    return out
