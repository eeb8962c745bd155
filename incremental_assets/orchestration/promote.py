"""``promote``: production takes an environment's tables without recomputing them, and Dagster's records
follow (materializations of the promoted intervals, with the definition they were built with).

Everything is checked before anything is committed, and checked again under the writer locks of every
table involved (the promoted ones and those the environment read in place), held together: a run of
production that commits meanwhile either lands before (promote is then refused: production moved on)
or waits for the locks and commits on the promoted table.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import dagster as dg

from incremental_assets import delta
from incremental_assets.delta.environment import env_root, read_manifest
from incremental_assets.delta.promote import PromotedTable, check_version, promote_table, writer_locks
from incremental_assets.errors import PromotionRefusedError
from incremental_assets.model.intervals import TimeWindow, batches, merge, to_utc
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.apply import (
    confirm_unaffected,
    keep_built_intervals,
    stale_partitions,
    unaffected_downstream,
)
from incremental_assets.orchestration.instance import report_materializations
from incremental_assets.orchestration.partition_keys import window_of_key
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.changes import FORWARD_ONLY, INDIRECT_NON_BREAKING
from incremental_assets.plan.definition import definition_of


@dataclass(frozen=True)
class Promotion:
    """What promoting an environment will take, checked: the models (upstream first) and what they read."""

    name: str
    models: tuple[SqlModel, ...]
    manifest: dict[str, Any]
    kept: tuple[str, ...] = ()  # downstream models the change leaves as they are (indirect-non-breaking)

    def entry(self, model: SqlModel) -> dict[str, Any]:
        return self.manifest["models"][model.name]

    def forward_only(self, model: SqlModel) -> bool:
        """Whether the model's change applies forward only: production keeps its table (its built
        intervals) and takes only the new definition, as SQLMesh keeps a forward-only model's intervals."""
        return self.entry(model).get("category") == FORWARD_ONLY

    def windows(self, model: SqlModel) -> list[TimeWindow]:
        return merge([TimeWindow(to_utc(s), to_utc(e)) for s, e in self.entry(model).get("intervals") or []])


def _redo(name: str) -> str:
    return f"build the environment again with `incremental-assets run --auto --env {name}`, then promote it"


def prepare(
    project: Project,
    instance: dg.DagsterInstance,
    name: str,
    selection: Sequence[str] = (),
    translator: ModelTranslator | None = None,
) -> Promotion:
    """The promotion of environment ``name`` (of the models in ``selection``, default all it built),
    refused with what to do when it cannot be taken as it stands."""
    translator = translator or ModelTranslator()
    manifest = read_manifest(project.settings.warehouse, name)
    if manifest is None:
        raise PromotionRefusedError(
            f"no environment named {name} under {project.settings.warehouse} (fix: build it with "
            f"`incremental-assets run --auto --env {name}`)"
        )
    built = {m.lower(): m for m in manifest["models"]}
    for wanted in selection:
        if wanted.lower() not in built:
            raise PromotionRefusedError(
                f"environment {name} did not build {wanted}; it built: {', '.join(sorted(built)) or 'nothing'}"
            )
    chosen = {s.lower() for s in selection} or set(built)
    missing = sorted(m for m in chosen if m not in project.models)
    if missing:
        raise PromotionRefusedError(
            f"environment {name} built {', '.join(missing)}, which the project no longer has; {_redo(name)}"
        )
    manifest = {**manifest, "models": {k.lower(): v for k, v in manifest["models"].items()}}
    models = tuple(m for m in project.ordered() if m.name in chosen and m.has_table)  # a plain view has nothing to take
    promotion = Promotion(name, models, manifest)
    for model in models:
        _check_model(project, instance, promotion, model, translator, chosen)
    check_production(project, promotion)
    return replace(promotion, kept=check_current(project, promotion, chosen if selection else None))


def check_current(project: Project, promotion: Promotion, selection: set[str] | None) -> tuple[str, ...]:
    """Refuse when the environment is not the project as it is now: a model the plan against production
    builds in the environment (of ``selection``, default all) is missing there or was built from other
    definitions or production versions. Returns the downstream models the plan leaves as they are."""
    from incremental_assets.orchestration.environments import environment_state, plan_environment

    plan = plan_environment(project, promotion.name)
    state = environment_state(project, plan)
    for model in plan.models:
        if (selection is None or model in selection) and not state[model]:
            held = model in promotion.manifest["models"]
            why = (
                "was built from other definitions or production versions than now"
                if held
                else "is changed in the project but not built there"
            )
            raise PromotionRefusedError(f"{model}: environment {promotion.name} {why}; {_redo(promotion.name)}")
    return tuple(c.name for c in plan.changes if c.category == INDIRECT_NON_BREAKING)


def _check_model(
    project: Project,
    instance: dg.DagsterInstance,
    promotion: Promotion,
    model: SqlModel,
    translator: ModelTranslator,
    chosen: set[str],
) -> None:
    name = promotion.name
    entry = promotion.entry(model)
    if entry.get("fingerprint") != model.fingerprint:
        raise PromotionRefusedError(
            f"{model.name}: environment {name} built it from another definition than the project's now; {_redo(name)}"
        )
    env_uri = delta.table_uri(env_root(project.settings.warehouse, name), model.name)
    if delta.built_with(env_uri) != model.fingerprint:
        raise PromotionRefusedError(
            f"{model.name}: environment {name}'s table ({env_uri}) is not the build its manifest names; {_redo(name)}"
        )
    for upstream in model.depends_on:
        if upstream in promotion.manifest["models"] and upstream not in chosen:
            raise PromotionRefusedError(
                f"{model.name} was built in environment {name} from its own {upstream}: promote {upstream} with it"
            )
    partitions = translator.get_partitions_def(model)
    if isinstance(partitions, dg.TimeWindowPartitionsDefinition) and not promotion.forward_only(model):
        taken = {
            tags.partition_key(partitions, p.start) for w in promotion.windows(model) for p in batches(w, model.unit, 1)
        }
        lacking = sorted(set(instance.get_materialized_partitions(translator.get_asset_key(model))) - taken)
        if lacking:
            raise PromotionRefusedError(
                f"{model.name}: production holds {len(lacking)} interval(s) environment {name} lacks "
                f"(first {lacking[0]}); "
                f"they would be lost: {_redo(name)}"
            )


def check_production(project: Project, promotion: Promotion) -> None:
    """Refuse when production moved on since the environment was built: a promoted table, or one the
    environment read in place, is no longer at the Delta version the environment recorded."""
    warehouse, name = project.settings.warehouse, promotion.name
    for model in promotion.models:
        expected = promotion.entry(model).get("production_version")
        check_version(
            delta.table_uri(warehouse, model.name),
            expected,
            f"{model.name} changed in production since environment {name} was built",
            _redo(name),
        )
    for upstream, expected in (promotion.manifest.get("reads") or {}).items():
        check_version(
            delta.table_uri(warehouse, upstream),
            expected,
            f"{upstream}, which environment {name} read in place, changed in production since it was built",
            _redo(name),
        )


def promote(
    project: Project,
    instance: dg.DagsterInstance,
    promotion: Promotion,
    translator: ModelTranslator | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[PromotedTable]:
    """Commit each model's environment table as production's (one commit per table, upstream first)
    under the writer locks of every table involved, then record the materializations in Dagster."""
    translator = translator or ModelTranslator()
    warehouse, name = project.settings.warehouse, promotion.name
    promoted_names = {m.name for m in promotion.models}
    reads = [
        m.name
        for m in project.ordered()
        if m.name in (promotion.manifest.get("reads") or {}) and m.name not in promoted_names
    ]
    involved = [m.name for m in project.ordered() if m.name in promoted_names or m.name in reads]
    run_id = f"promote-{name}-{uuid.uuid4().hex[:8]}"
    done = []
    with writer_locks([delta.table_uri(warehouse, m) for m in involved], owner=f"promotion of environment {name}"):
        check_production(project, promotion)  # again, now that no writer can commit
        # Decided while production still holds the previous definitions, as a rebuild decides it before its commit.
        kept = {
            m.name: {
                n: stale_partitions(instance, project, project.models[n], translator)
                for n in unaffected_downstream(project, m)
                if n not in promoted_names
            }
            for m in promotion.models
            if not promotion.forward_only(m)
        }
        for model in promotion.models:
            if promotion.forward_only(model):
                line = keep_production(project, instance, model, translator)
                if progress:
                    progress(line)
                continue
            result = _take(project, instance, promotion, model, translator, run_id)
            done.append(result)
            if progress:
                progress(
                    f"{model.name}: production version {result.version} is environment {name}'s table: "
                    f"{result.rows:,} rows in {result.files} file(s), {result.linked} linked, nothing "
                    "recomputed"
                )
            for line in confirm_unaffected(instance, project, model, translator, kept[model.name]):
                if progress:
                    progress(line)
    return done


def _take(
    project: Project,
    instance: dg.DagsterInstance,
    promotion: Promotion,
    model: SqlModel,
    translator: ModelTranslator,
    run_id: str,
) -> PromotedTable:
    """Production takes the environment's table of ``model`` (one commit), and Dagster records it."""
    warehouse, name = project.settings.warehouse, promotion.name
    windows = promotion.windows(model)
    span = TimeWindow(windows[0].start, windows[-1].end) if windows else None
    meta = {
        "model": model.name,
        "fingerprint": model.fingerprint,
        "run_id": run_id,
        "promoted_from": name,
        "window_start": span.start.isoformat() if span else "",
        "window_end": span.end.isoformat() if span else "",
    }
    uri = delta.table_uri(warehouse, model.name)
    result = promote_table(delta.table_uri(env_root(warehouse, name), model.name), uri, model.name, metadata=meta)
    record(instance, model, translator, windows, result, uri, name, run_id)
    return result


def keep_production(
    project: Project, instance: dg.DagsterInstance, model: SqlModel, translator: ModelTranslator
) -> str:
    """A forward-only change promoted: production keeps its table and its intervals (their rows were
    computed with the previous definition, new intervals use the new one) and takes the new definition by
    a commit without files, as ``run --auto`` records a forward-only change. A model changed only through a
    forward-only upstream keeps its table as it is. The caller holds the table's writer lock."""
    uri = delta.table_uri(project.settings.warehouse, model.name)
    definition = definition_of(project, model.name)
    if delta.built_with(uri) == model.fingerprint or definition is None:
        return (
            f"{model.name}: changed only through a forward-only upstream: production keeps its table, "
            "nothing recomputed"
        )
    version = delta.record_definition_locked(uri, definition)
    count = keep_built_intervals(
        instance,
        project,
        model,
        translator,
        "forward-only change promoted: built intervals are kept, new intervals use the new definition",
    )
    where = f"Delta version {version}" if version is not None else "its table"
    return (
        f"{model.name}: forward-only change: production keeps its table ({count} built interval(s) as they are) "
        f"and takes the new definition ({where}); new intervals use it, nothing recomputed"
    )


def record(
    instance: dg.DagsterInstance,
    model: SqlModel,
    translator: ModelTranslator,
    windows: list[TimeWindow],
    result: PromotedTable,
    uri: str,
    env: str,
    run_id: str,
) -> None:
    """Materializations of the promoted intervals (or of the whole table), as a run of the model with its
    definition would have recorded them."""
    key = translator.get_asset_key(model)
    meta: dict[str, Any] = {
        "promoted_from": f"environment {env}",
        "delta_version": result.version,
        "committed_by_run": run_id,  # the commit's run id, which the integrity check matches
        "fingerprint": model.fingerprint,
        "table_uri": dg.MetadataValue.path(uri),
    }
    event_tags = {"dagster/code_version": translator.get_code_version(model)}
    partitions = translator.get_partitions_def(model)
    if not isinstance(partitions, dg.TimeWindowPartitionsDefinition):
        report_materializations(
            instance, [dg.AssetMaterialization(asset_key=key, metadata={**meta, "rows": result.rows}, tags=event_tags)]
        )
        return
    counts = delta.interval_row_counts(uri) or {}
    events = []
    for window in windows:
        for part in batches(window, model.unit, 1):
            pk = tags.partition_key(partitions, part.start)
            if window_of_key(partitions, pk) is None:
                continue
            own = {
                **meta,
                "window_start": part.start.isoformat(),
                "window_end": part.end.isoformat(),
                "dagster/partition_row_count": counts.get(model.unit.partition_key(part.start), 0),
            }
            events.append(dg.AssetMaterialization(asset_key=key, partition=pk, metadata=own, tags=event_tags))
    report_materializations(instance, events)  # one batch: a year of hourly partitions in seconds
