"""The automation's look at the tables: intervals Dagster records that are no longer in their table.

Each tick of the automation sensor checks (with :func:`.integrity.check_model`, as ``status`` and
``run --auto`` do) only some tables, at a cost that does not grow with the project's history:

- the tables whose Delta log changed since the last look (a commit, a checkpoint, a deleted or emptied
  log file: one listing of ``_delta_log`` per table, see :func:`incremental_assets.delta.log_mark`), at
  most :data:`CHANGED_PER_TICK` of them (the others keep their old mark, so the next tick takes them);
- and :data:`ROTATION_PER_TICK` tables in turn, for what leaves the log as it was (a deleted or tampered
  data file): at a 5 s tick every table of a project of up to 24 is looked at within a minute.

What it finds is said in the UI as the asset check ``in_table`` of the model (failed with the cause and
the fix; passed again once the table holds what Dagster records), and the lost intervals are requested
again through the sensor's ordinary path, like intervals touched by new data (``run --auto`` treats
them as missing the same way). A table whose log is damaged gets no run at all until it is repaired:
nothing is committed on top of it.

The look's state (each table's log mark, the turn of the rotation, the checks failing) is kept in the
sensor's cursor under ``watch``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import dagster as dg

from incremental_assets import delta
from incremental_assets.errors import DamagedTableError
from incremental_assets.model.intervals import EVERY_INTERVAL, NO_INTERVAL, Coverage, describe_windows
from incremental_assets.model.kinds import IncrementalByTimeRange
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration.integrity import Integrity, check_model
from incremental_assets.orchestration.translator import ModelTranslator

INTEGRITY_CHECK = "in_table"
CHANGED_PER_TICK = 8
ROTATION_PER_TICK = 2


def integrity_checks(project: Project, translator: ModelTranslator) -> list[dg.AssetChecksDefinition]:
    """The ``in_table`` check of each model with a table: reported by the automation as it looks at the
    tables, and run on demand from the UI ("Execute"). Runs of the model do not run it (see
    :func:`model_selection`). All of them are one definition that runs the checks selected: a project of
    thousands of models loads without building one op per check."""
    models = {translator.get_asset_key(m): m for m in project.ordered() if m.has_table}
    if not models:
        return []
    specs = [
        dg.AssetCheckSpec(INTEGRITY_CHECK, asset=key, blocking=False, description=IN_TABLE_DESCRIPTION)
        for key in models
    ]

    @dg.multi_asset_check(specs=specs, name=INTEGRITY_CHECK, can_subset=True)
    def _in_table(context) -> Iterator[dg.AssetCheckResult]:  # noqa: ANN001 (Dagster reads the annotation, a string here)
        for check in sorted(context.selected_asset_check_keys, key=lambda c: c.asset_key.to_user_string()):
            yield _in_table_result(context.instance, project, models[check.asset_key], translator)

    return [_in_table]


IN_TABLE_DESCRIPTION = (
    "Every interval Dagster records is in the table (fails, with the cause, when a log or data file was lost or "
    "damaged)"
)


def model_selection(key: dg.AssetKey, has_table: bool) -> dg.AssetSelection:
    """A model's asset and its own checks (audits, ``definition_current``), without ``in_table`` (which
    only a model with a table has): a run of the model does not pay for the look at its whole table (the
    automation's next tick does)."""
    return models_selection([(key, has_table)])


def models_selection(models: Sequence[tuple[dg.AssetKey, bool]]) -> dg.AssetSelection:
    """:func:`model_selection` of several models (asset key, has a table) at once."""
    selection = dg.AssetSelection.assets(*(key for key, _ in models))
    in_table = [dg.AssetCheckKey(key, INTEGRITY_CHECK) for key, has_table in models if has_table]
    return selection - dg.AssetSelection.checks(*in_table) if in_table else selection


def _in_table_result(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator
) -> dg.AssetCheckResult:
    key = translator.get_asset_key(model)
    try:
        found = integrity_of(instance, project, model, translator)
    except DamagedTableError as exc:
        return _result(
            key, False, str(exc.of_model(model.name)), "nothing is launched on this table until it is repaired"
        )
    return _result(key, True, IN_TABLE, "") if found.ok else _result(key, False, *_said(found))


def integrity_of(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator
) -> Integrity:
    """The integrity check, as the automation calls it (the one place it does)."""
    return check_model(instance, project, model, translator)


@dataclass
class Look:
    """One tick's findings: lost intervals per model (every interval: the whole table), damaged tables (nothing
    may be launched on them), the check evaluations to report, lines for the tick, the next state."""

    lost: dict[str, Coverage] = field(default_factory=dict)
    damaged: dict[str, str] = field(default_factory=dict)
    events: list[dg.AssetCheckEvaluation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)


def _chosen(project: Project, marks: dict[str, str], seen: dict[str, str], turn: int) -> list[str]:
    """The models to check this tick: changed logs first (bounded), then the rotation's next ones."""
    names = [m.name for m in project.ordered() if m.has_table]
    changed = [n for n in names if n in seen and seen[n] != marks[n]][:CHANGED_PER_TICK]
    rotation = [names[(turn + i) % len(names)] for i in range(min(ROTATION_PER_TICK, len(names)))] if names else []
    return list(dict.fromkeys(changed + rotation))


def look(
    instance: dg.DagsterInstance, project: Project, translator: ModelTranslator, state: dict[str, Any] | None
) -> Look:
    """Check the tables whose log changed and the rotation's next ones (see the module docstring)."""
    state = state or {}
    seen: dict[str, str] = dict(state.get("marks", {}))
    failing = set(state.get("failing", []))
    turn = int(state.get("turn", 0))
    marks = {m.name: delta.log_mark(project.settings.table_location(m.name)) for m in project.ordered() if m.has_table}
    out = Look()
    for name in _chosen(project, marks, seen, turn):
        model = project.models[name]
        key = translator.get_asset_key(model)
        seen[name] = marks[name]
        try:
            found = integrity_of(instance, project, model, translator)
        except DamagedTableError as exc:
            message = str(exc.of_model(name))
            out.damaged[name] = message
            out.events.append(
                _evaluation(key, False, message, "nothing is launched on this table until it is repaired")
            )
            out.notes.append(f"{name}: damaged, nothing launched on it: {message}")
            failing.add(name)
            continue
        if found.ok:
            if name in failing:
                out.events.append(_evaluation(key, True, IN_TABLE, ""))
                failing.discard(name)
            continue
        failing.add(name)
        cause, fix = _said(found)
        if found.lost and isinstance(model.kind, IncrementalByTimeRange):
            out.lost[name] = Coverage.of(found.lost)
        elif found.whole_table and not isinstance(model.kind, IncrementalByTimeRange):
            out.lost[name] = EVERY_INTERVAL
        out.events.append(_evaluation(key, False, cause, fix))
        out.notes.append(f"{name}: {cause}; {fix}")
    for name in [n for n in marks if n not in seen]:
        seen[name] = marks[name]  # first seen: its log is a change from now on; the rotation checks it
    count = len(marks)
    out.state = {"marks": seen, "turn": (turn + ROTATION_PER_TICK) % count if count else 0, "failing": sorted(failing)}
    return out


IN_TABLE = "every interval Dagster records is in the table"


def _said(found: Integrity) -> tuple[str, str]:
    """The cause of a failed check, and its fix (what the automation does about it, or what to run)."""
    where = describe_windows(found.lost) if found.lost else "its rows"
    cause = f"recorded but not in its table: {where} ({'; '.join(found.problems)})"
    if found.lost and not found.whole_table:
        return cause, "the automation computes those intervals again (`incremental-assets run --auto` does the same)"
    return cause, found.advice()


def _result(key: dg.AssetKey, passed: bool, status: str, fix: str) -> dg.AssetCheckResult:
    meta = {"status": status} | ({"fix": fix} if fix else {})
    return dg.AssetCheckResult(
        asset_key=key, check_name=INTEGRITY_CHECK, passed=passed, severity=dg.AssetCheckSeverity.ERROR, metadata=meta
    )


def _evaluation(key: dg.AssetKey, passed: bool, status: str, fix: str) -> dg.AssetCheckEvaluation:
    r = _result(key, passed, status, fix)
    return dg.AssetCheckEvaluation(
        asset_key=key, check_name=INTEGRITY_CHECK, passed=passed, severity=r.severity, metadata=r.metadata
    )


def watch_tables(
    instance: dg.DagsterInstance, project: Project, translator: ModelTranslator, cursor: Any, decision: Any
) -> set[str]:
    """One tick's look, applied to the automation's cursor (lost intervals become pending, as new data's
    are) and decision (check evaluations, lines); the damaged tables, on which nothing may be launched."""
    seen = look(instance, project, translator, cursor.watch)
    cursor.watch = seen.state
    decision.events += seen.events
    decision.notes += seen.notes
    for name, lost in seen.lost.items():
        cursor.pending[name] = cursor.pending.get(name, NO_INTERVAL).union(lost)
    return set(seen.damaged)


def hold_runs(project: Project, translator: ModelTranslator, decision: Any, names: set[str]) -> None:
    """Drop the decision's runs of damaged tables: a new commit on top of a damaged log would hide the damage."""
    keys = {translator.get_asset_key(project.models[n]) for n in names if n in decision.launched}
    decision.requests = [r for r in decision.requests if not keys.intersection(r.asset_selection or ())]
    for name in names & set(decision.launched):
        del decision.launched[name]
