"""Past runs of models, read from the Dagster instance: window, rows, duration, status, who launched.

``run_history(instance, project, "shop.order_lines", limit=5)`` lists one model's latest runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import dagster as dg

from incremental_assets.model.intervals import format_instant
from incremental_assets.model.project import Project
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.translator import ModelTranslator


@dataclass(frozen=True)
class HistoryEntry:
    run_id: str
    models: tuple[str, ...]
    status: str
    started: datetime | None
    seconds: float | None
    window: str
    rows: int | None
    launched_by: str
    error: str | None = None

    def line(self) -> str:
        when = format_instant(self.started) if self.started else "not started"
        took = f"{self.seconds:.1f}s" if self.seconds is not None else "-"
        rows = f"{self.rows:,} rows" if self.rows is not None else "- rows"
        text = (
            f"{when}  {self.status:<9} {', '.join(self.models)}  {self.window}  {rows}  {took}  run "
            f"{self.run_id[:8]} ({self.launched_by})"
        )
        return text + (f"\n    {self.error}" if self.error else "")


def _window(run: dg.DagsterRun) -> str:
    keys = tags.range_of(run.tags)
    if keys:
        return f"{keys[0]}...{keys[1]}"
    return run.tags.get(tags.PARTITION_TAG, "full")


def run_history(
    instance: dg.DagsterInstance,
    project: Project,
    model: str | None = None,
    *,
    limit: int = 20,
    since: datetime | None = None,
    until: datetime | None = None,
    translator: ModelTranslator | None = None,
) -> list[HistoryEntry]:
    """The latest ``limit`` runs touching the project's models (or one model), newest first,
    optionally only runs created in ``[since, until)``."""
    filters = dg.RunsFilter(created_after=since, created_before=until) if since or until else None
    translator = translator or ModelTranslator()
    names = {translator.get_asset_key(m): m.name for m in project.ordered()}
    wanted = {translator.get_asset_key(project.model(model))} if model else set(names)
    out: list[HistoryEntry] = []
    cursor = None
    while len(out) < limit:
        records = instance.get_run_records(filters=filters, limit=100, cursor=cursor)
        if not records:
            break
        cursor = records[-1].dagster_run.run_id
        for record in records:
            run = record.dagster_run
            selected = set(run.asset_selection or ()) & wanted
            if not selected:
                continue
            rows, error = None, None
            for event in instance.all_logs(run.run_id):
                de = event.dagster_event
                if de is None:
                    continue
                if de.event_type_value == "ASSET_MATERIALIZATION":
                    meta = de.materialization.metadata
                    written = meta.get("run_rows_written") or meta.get("rows_written")  # older runs recorded it so
                    if written is not None and rows is None and isinstance(written.value, int):
                        rows = written.value
                elif de.is_step_failure and de.step_failure_data.error is not None:
                    err = de.step_failure_data.error
                    error = (err.cause.message if err.cause else err.message).strip().splitlines()[0]
            started = datetime.fromtimestamp(record.start_time, timezone.utc) if record.start_time else None
            seconds = record.end_time - record.start_time if record.start_time and record.end_time else None
            out.append(
                HistoryEntry(
                    run.run_id,
                    tuple(sorted(names[k] for k in selected)),
                    run.status.value,
                    started,
                    seconds,
                    _window(run),
                    rows,
                    run.tags.get(tags.LAUNCHED_BY_TAG, "ui"),
                    error,
                )
            )
            if len(out) >= limit:
                break
    return out
