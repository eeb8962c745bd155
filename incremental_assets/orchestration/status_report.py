"""What ``status`` reports of each model, collected as frozen values the CLI prints as text or JSON:
interval status, integrity against the table, staleness, and commits Dagster has not recorded."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Iterator, Sequence

import dagster as dg

from incremental_assets.errors import DamagedTableError
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration.integrity import Integrity
from incremental_assets.orchestration.staleness import Stale
from incremental_assets.orchestration.status import ModelStatus
from incremental_assets.orchestration.translator import ModelTranslator


@dataclass(frozen=True)
class StatusRow:
    """One model's status: its intervals, whether its table holds what Dagster recorded, what is stale,
    and warnings about commits Dagster missed (collected for partitioned models only)."""

    model: SqlModel
    status: ModelStatus
    integrity: Integrity
    stale: Stale
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The model's entry in ``status --json``, keys in this order."""
        s, stale = self.status, self.stale
        return {
            "model": s.model,
            "partitioned": s.partitioned,
            "covered": windows_json(s.covered),
            "gaps": windows_json(s.gaps),
            "failed": windows_json(s.failed),
            "lost": windows_json(s.lost),
            "integrity": list(self.integrity.problems),
            "intervals_done": s.intervals_done,
            "intervals_expected": s.intervals_expected,
            "changed": s.changed,
            "on_change": s.on_change,
            "stale": windows_json(stale.windows),
            "upstream_changed": list(stale.causes),
            "rebuild": windows_json([s.rebuild]) if s.rebuild else [],
            "last_materialized": s.last_materialized.isoformat() if s.last_materialized else None,
            "last_run": dict(s.last_details),
        }


@dataclass(frozen=True)
class DamagedTable:
    """A model whose table log could not be read: ``message`` says which and how to repair it."""

    model: str
    message: str


def windows_json(windows: Iterable[TimeWindow]) -> list[dict[str, str]]:
    """Windows as ``status --json`` lists them.

    >>> from incremental_assets.model.intervals import utc
    >>> windows_json([TimeWindow(utc(2024, 1, 1), utc(2024, 1, 2))])
    [{'start': '2024-01-01T00:00:00+00:00', 'end': '2024-01-02T00:00:00+00:00'}]
    """
    return [{"start": w.start.isoformat(), "end": w.end.isoformat()} for w in windows]


def status_rows(
    instance: dg.DagsterInstance,
    project: Project,
    models: Sequence[SqlModel],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    warnings: bool = True,
) -> Iterator[StatusRow | DamagedTable]:
    """Each model's status in order, one at a time (a damaged table is reported and the others follow).

    ``warnings=False`` skips the search for commits Dagster has not recorded (``status --json`` shows none)."""
    from incremental_assets import delta
    from incremental_assets.orchestration.integrity import check_model
    from incremental_assets.orchestration.staleness import stale_intervals
    from incremental_assets.orchestration.status import model_status

    translator = ModelTranslator()
    for model in models:
        try:
            built = delta.built_with(project.settings.table_location(model.name))
            integrity = check_model(instance, project, model, translator)
        except DamagedTableError as exc:
            yield DamagedTable(model.name, str(exc.of_model(model.name)))
            continue
        status = model_status(
            instance,
            model,
            since=since,
            until=until,
            built_with=built,
            lost=integrity.lost,
            tz=project.settings.zone,
        )
        stale = stale_intervals(instance, project, model, translator)
        missed = consistency_warnings(project, instance, model) if warnings and status.partitioned else ()
        yield StatusRow(model, status, integrity, stale, tuple(missed))


def consistency_warnings(project: Project, instance: dg.DagsterInstance, model: SqlModel) -> list[str]:
    """Commits Dagster missed (a process killed between commit and record); recorded intervals the table
    lacks are reported by the integrity check."""
    from incremental_assets.orchestration.reconcile import unrecorded_commits

    missed = unrecorded_commits(instance, project, model, ModelTranslator())
    return [
        f"Delta version {m.version} holds {len(m.partitions)} interval(s) in {m.window} that Dagster has not recorded; "
        "the next `run --auto` records them without recomputing"
        for m in missed
    ]
