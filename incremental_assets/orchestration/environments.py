"""Environments in Dagster and on Spark: the project's changes built apart from production.

The plan against production (:func:`incremental_assets.plan.changes.plan_changes`) decides which models an
environment builds: the changed ones (breaking, non-breaking, forward-only) and the downstream models it
calls indirect-breaking. Every other model is read from production in place. The environment's project is
the project with its settings naming the environment and those models, so every table location follows
(:meth:`Settings.table_location`); its Dagster assets are keyed ``["env", NAME, *key]`` and read production
assets' keys for what they read in place. Nothing of production is written: no table, no Delta version,
no materialization of a production asset key.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field, replace
from datetime import datetime, tzinfo
from typing import Any, Callable, Mapping, Sequence

import dagster as dg

from incremental_assets import delta
from incremental_assets.delta.environment import read_manifest, write_manifest
from incremental_assets.errors import SelectionError
from incremental_assets.model import clock
from incremental_assets.model.environment import KEY_PREFIX, check_name
from incremental_assets.model.intervals import (
    TimeWindow,
    batches,
    ceil,
    format_instant,
    last_complete_end,
    merge,
    subtract,
    to_utc,
)
from incremental_assets.model.kinds import IncrementalByTimeRange
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import tags
from incremental_assets.orchestration.instance import materialized_windows
from incremental_assets.orchestration.partition_keys import time_partitions
from incremental_assets.orchestration.resource import SparkResource
from incremental_assets.orchestration.runner import Runner, RunRecord, RunReport, progress_line
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.analyses import run_size
from incremental_assets.plan.changes import (
    BREAKING,
    FORWARD_ONLY,
    INDIRECT_BREAKING,
    NON_BREAKING,
    ModelChange,
    TableState,
    merged_ranges,
    plan_changes,
)
from incremental_assets.plan.definition import project_definitions

BUILT_CATEGORIES = (BREAKING, NON_BREAKING, FORWARD_ONLY, INDIRECT_BREAKING)


@dataclass(frozen=True)
class EnvironmentPlan:
    """The plan against production, and what it means for one environment."""

    name: str
    changes: tuple[ModelChange, ...]
    tables: Mapping[str, TableState]  # each model's production table
    versions: Mapping[str, int | None]  # each model's production Delta version (None: no table)
    models: tuple[str, ...]  # the models the environment builds, upstreams first

    def change(self, model: str) -> ModelChange | None:
        return next((c for c in self.changes if c.name == model), None)


def plan_environment(
    project: Project,
    name: str,
    *,
    forward_only: bool = False,
    tables: Mapping[str, TableState] | None = None,
    changes: Sequence[ModelChange] | None = None,
) -> EnvironmentPlan:
    """Plan the project against production for environment ``name`` (validated); ``tables`` and
    ``changes`` when the caller has read and planned them already."""
    check_name(name)
    tables = delta.production_tables(project) if tables is None else tables
    if changes is None:
        changes = plan_changes(project, project_definitions(project), tables, forward_only=forward_only)
    built = {c.name for c in changes if c.category in BUILT_CATEGORIES and c.change != "removed"}
    models = tuple(m.name for m in project.ordered() if m.name in built and m.has_table)
    versions = {
        m: delta.version(delta.table_uri(project.settings.warehouse, m)) if tables[m].exists else None for m in tables
    }
    return EnvironmentPlan(name, tuple(changes), tables, versions, models)


def environment_project(project: Project, name: str, models: Sequence[str]) -> Project:
    """The project as the environment sees it: ``models`` have the environment's tables, the rest production's."""
    settings = replace(
        project.settings, environment=check_name(name), environment_models=frozenset(m.lower() for m in models)
    )
    return replace(project, settings=settings)


def environment_translator(translator: ModelTranslator, name: str, models: Sequence[str]) -> ModelTranslator:
    """``translator`` (of any class) giving the environment's models the keys ``["env", NAME, *key]``;
    other models and sources keep their production keys (what an environment reads in place)."""
    chosen = frozenset(models)
    base = type(translator)

    class InEnvironment(base):  # type: ignore[valid-type, misc]  # reason: the user's translator class, known at run time
        def get_asset_key(self, model: SqlModel) -> dg.AssetKey:
            key = base.get_asset_key(self, model)
            return key.with_prefix([KEY_PREFIX, name]) if model.name in chosen else key

        def get_automation_condition(self, model: SqlModel) -> dg.AutomationCondition | None:
            return None  # an environment is built on request

    out = copy.copy(translator)
    out.__class__ = InEnvironment
    return out


def environment_assets(
    project: Project, plan: EnvironmentPlan, translator: ModelTranslator | None = None
) -> tuple[Project, ModelTranslator, list[Any]]:
    """The environment's project, translator and assets (one per model it builds)."""
    from incremental_assets.orchestration.assets import build_model_asset
    from incremental_assets.orchestration.table_metadata import project_columns

    env = environment_project(project, plan.name, plan.models)
    env_translator = environment_translator(translator or ModelTranslator(), plan.name, plan.models)
    columns = project_columns(env)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)  # backfill_policy and code references, as production's assets
        return (
            env,
            env_translator,
            [build_model_asset(env, env.models[m], env_translator, columns.get(m)) for m in plan.models],
        )


def environment_key(name: str, key: dg.AssetKey) -> bool:
    """Whether an asset key is one of environment ``name``'s."""
    return list(key.path[:2]) == [KEY_PREFIX, name]


# --- building an environment -------------------------------------------------------------------


def _signature(env: Project, model: SqlModel, plan: EnvironmentPlan) -> dict[str, str]:
    """What the model's environment table was built from: each upstream model's environment definition
    (``env:<fingerprint>``) or production (``prod``)."""
    out = {}
    for upstream in env.upstream_models(model):
        if upstream.has_table:
            out[upstream.name] = f"env:{upstream.fingerprint}" if upstream.name in plan.models else "prod"
    return out


def _moved_reads(env: Project, model: SqlModel, plan: EnvironmentPlan, reads: Mapping[str, Any]) -> list[str]:
    """The upstream models ``model`` reads from production in place whose production table is no longer
    at the Delta version the environment last built from (``reads`` of its manifest): an interval was
    recomputed or added since, so the environment's table must be built again."""
    return [
        u.name
        for u in env.upstream_models(model)
        if u.has_table and u.name not in plan.models and u.name in reads and reads[u.name] != plan.versions.get(u.name)
    ]


def _moved_itself(entry: Mapping[str, Any], plan: EnvironmentPlan, name: str) -> bool:
    """Whether production's own table of a model the environment holds moved since the environment built it
    (late data recomputed an interval there, or a run added one): the environment builds it again, so a
    promotion never replaces what production computed since."""
    return bool(entry) and entry.get("production_version") != plan.versions.get(name)


def _targets(model: SqlModel, state: TableState, end: datetime | None, now: datetime, tz: tzinfo) -> list[TimeWindow]:
    """The intervals the environment builds for a partitioned model: those its production table holds within
    the model's range (an interval before a changed ``start`` is not built), or, without a production table
    holding intervals (none, or an unpartitioned one: the kind changed), its missing intervals from its start
    up to the last complete one (as ``run --auto`` builds a new model); cut at ``end``."""
    assert model.start is not None
    last = model.end or datetime.max.replace(tzinfo=model.start.tzinfo)
    if state.exists and state.intervals:
        held = [TimeWindow(to_utc(s), to_utc(e)) for s, e in merged_ranges(sorted(state.intervals), model.unit)]
        windows = [
            TimeWindow(max(w.start, model.start), min(w.end, last))
            for w in held
            if w.end > model.start and w.start < last
        ]
    else:
        # As `run --auto`: whole intervals only, up to the last complete one (or --end, rounded down).
        until = (
            min(last_complete_end(now, model.unit, tz), model.unit.floor(end))
            if end
            else last_complete_end(now, model.unit, tz)
        )
        until = min(until, last)
        windows = [TimeWindow(model.start, until)] if until > model.start else []
    if end is not None:
        windows = [
            TimeWindow(w.start, min(w.end, ceil(end, model.unit))) for w in windows if w.start < ceil(end, model.unit)
        ]
    return windows


@dataclass
class EnvironmentBuild:
    plan: EnvironmentPlan
    report: RunReport = field(default_factory=RunReport)
    built: list[str] = field(default_factory=list)  # models (re)built or extended by this command
    current: list[str] = field(default_factory=list)  # models already built with their current definition
    idle: list[str] = field(default_factory=list)  # models with no table and no complete interval to build yet


def build_environment(
    project: Project,
    name: str,
    instance: dg.DagsterInstance,
    *,
    selection: Sequence[SqlModel] | None = None,
    end: datetime | None = None,
    now: datetime | None = None,
    progress: Callable[[str], None] | None = None,
    translator: ModelTranslator | None = None,
) -> EnvironmentBuild:
    """Build environment ``name``: the models the plan says, over the intervals production holds for each
    (a model without a production table: its missing intervals), reading every other model from production.
    A model already built in the environment with its current definition, from the same upstream
    definitions, is only extended by intervals it lacks. The manifest is written after the build."""
    plan = plan_environment(project, name)
    now = now or clock.now()
    warehouse = project.settings.warehouse
    manifest = read_manifest(warehouse, name) or {}
    held = manifest.get("models") or {}
    chosen = set(plan.models) if selection is None else {m.name for m in selection} & set(plan.models)
    located = _located_models(project, plan, name, chosen, held)
    full_plan = replace(plan, models=tuple(located))
    env, env_translator, runner = _environment_runner(project, full_plan, instance, translator)
    result = EnvironmentBuild(plan)
    rebuilt: set[str] = set()
    failed: set[str] = set()
    for model_name in located:
        if model_name not in chosen:
            continue
        model = env.models[model_name]
        if failed & set(model.depends_on):
            result.report.records.append(
                RunRecord(model_name, None, False, "", 0.0, error="skipped: an upstream model failed")
            )
            failed.add(model_name)
            continue
        built_with = delta.built_with(env.settings.table_location(model_name))
        fresh = built_with != model.fingerprint or _upstream_changed(env, model, full_plan, manifest, rebuilt)
        if isinstance(model.kind, IncrementalByTimeRange):
            targets = _targets(model, plan.tables.get(model_name, TableState()), end, now, project.settings.zone)
            partitions = time_partitions(env_translator.get_partitions_def(model), model.name)
            recorded = materialized_windows(instance, env_translator.get_asset_key(model), partitions)
            runs = _partitioned_runs(env, model, targets, recorded, fresh=fresh, built=built_with is not None)
        else:
            runs = [(None, built_with is not None and model.is_merge_style)] if fresh else []
        if not runs:
            (result.current if built_with is not None else result.idle).append(model_name)
            continue
        records = _run_windows(runner, name, model, runs, built_with, progress)
        result.report.records.extend(records)
        if not records[-1].success:
            failed.add(model_name)
            continue
        result.built.append(model_name)
        if fresh:
            rebuilt.add(model_name)
    _write_manifest(env, full_plan, instance, env_translator, held, failed, chosen)
    return result


def _environment_runner(
    project: Project, plan: EnvironmentPlan, instance: dg.DagsterInstance, translator: ModelTranslator | None
) -> tuple[Project, ModelTranslator, Runner]:
    """The environment's project and translator, and a runner of its assets whose runs carry its tag."""
    env, env_translator, assets = environment_assets(project, plan, translator)
    defs = dg.Definitions(
        assets=assets, resources={"spark": SparkResource.from_settings(env.settings)}, executor=dg.in_process_executor
    )
    runner = Runner(env, instance, defs, env_translator)
    runner.extra_tags = {tags.ENVIRONMENT_TAG: plan.name}
    return env, env_translator, runner


def _upstream_changed(
    env: Project, model: SqlModel, plan: EnvironmentPlan, manifest: Mapping[str, Any], rebuilt: set[str]
) -> bool:
    """Whether the environment's table of ``model`` was built from other upstream tables than it would read
    now (other definitions, a model rebuilt by this command, production tables that moved) or production's
    own table of it moved."""
    entry = (manifest.get("models") or {}).get(model.name) or {}
    return (
        entry.get("upstream") != _signature(env, model, plan)
        or bool(rebuilt & set(model.depends_on))
        or bool(_moved_reads(env, model, plan, manifest.get("reads") or {}))
        or _moved_itself(entry, plan, model.name)
    )


def _located_models(
    project: Project, plan: EnvironmentPlan, name: str, chosen: set[str], held: Mapping[str, Any]
) -> list[str]:
    """The models read from the environment: what this command builds, and what the environment already
    holds with its current definition. A chosen model reading a changed model not located there is refused."""
    located = [
        m for m in plan.models if m in chosen or (held.get(m) or {}).get("fingerprint") == project.models[m].fingerprint
    ]
    for model_name in sorted(chosen):
        lacking = [u for u in project.models[model_name].depends_on if u in plan.models and u not in located]
        if lacking:
            raise SelectionError(
                f"{model_name} reads {', '.join(lacking)}, changed and not built in environment {name} yet "
                f"(fix: select it too, e.g. run --auto --env {name} +{model_name})"
            )
    return located


def _partitioned_runs(
    env: Project,
    model: SqlModel,
    targets: list[TimeWindow],
    recorded: list[TimeWindow],
    *,
    fresh: bool,
    built: bool,
) -> list[tuple[TimeWindow | None, bool]]:
    """The (window, rebuild) runs that bring a partitioned model's environment table to ``targets``."""
    if targets and fresh and built:
        # Built with another definition or from other upstream ones: rebuilt from its start, one commit.
        assert model.start is not None
        return [(TimeWindow(model.start, max(w.end for w in [*targets, *recorded])), True)]
    todo = [part for w in targets for part in subtract(w, recorded if built else [])]
    return [(w, False) for window in merge(todo) for w in batches(window, model.unit, run_size(env, model))]


def _run_windows(
    runner: Runner,
    name: str,
    model: SqlModel,
    runs: list[tuple[TimeWindow | None, bool]],
    built_with: str | None,
    progress: Callable[[str], None] | None,
) -> list[RunRecord]:
    """Run the model's (window, rebuild) runs in order, up to the first that fails; their records."""
    records = []
    for window, rebuild in runs:
        record = runner.run_window(model, window, rebuild=rebuild, built_with=built_with if not rebuild else None)
        records.append(record)
        if progress:
            progress(progress_line(f"[env {name}]", model.name, window, rebuild, record))
        if not record.success:
            break
        built_with = model.fingerprint
    return records


def _write_manifest(
    env: Project,
    plan: EnvironmentPlan,
    instance: dg.DagsterInstance,
    translator: ModelTranslator,
    held: Mapping[str, Any],
    failed: set[str],
    chosen: set[str],
) -> None:
    """The manifest after a build: the models the environment holds built with their current definition,
    and the production versions of what they read in place (the version a model left out of this command
    last read stays recorded, so a promotion still sees it moved on). Not rewritten when nothing changed."""
    warehouse = env.settings.warehouse
    models: dict[str, Any] = {}
    for name in plan.models:
        model = env.models[name]
        if name in failed or delta.built_with(env.settings.table_location(name)) != model.fingerprint:
            continue
        partitions = translator.get_partitions_def(model)
        intervals = []
        if isinstance(partitions, dg.TimeWindowPartitionsDefinition):
            windows = materialized_windows(instance, translator.get_asset_key(model), partitions)
            intervals = [[format_instant(w.start), format_instant(w.end)] for w in windows]
        change = plan.change(name)
        models[name] = {
            "fingerprint": model.fingerprint,
            "category": change.category if change else BREAKING,
            "production_version": plan.versions.get(name),
            "intervals": intervals,
            "upstream": _signature(env, model, plan),
        }
    previous = read_manifest(warehouse, plan.name) or {}
    earlier = previous.get("reads") or {}
    reads: dict[str, Any] = {}
    for name in models:
        if name not in chosen and name in held:  # left out of this command: what it was built against stays
            models[name]["production_version"] = held[name].get("production_version")
        for upstream in env.upstream_models(env.models[name]):
            if upstream.has_table and upstream.name not in plan.models:
                stays = name not in chosen and upstream.name in earlier
                reads[upstream.name] = (
                    earlier[upstream.name] if stays else reads.get(upstream.name, plan.versions.get(upstream.name))
                )
    if previous.get("models") == models and previous.get("reads") == reads:
        return
    updated = clock.now().replace(microsecond=0).isoformat().replace("+00:00", "Z")
    write_manifest(warehouse, plan.name, {"name": plan.name, "updated": updated, "models": models, "reads": reads})


def environment_state(project: Project, plan: EnvironmentPlan) -> dict[str, bool]:
    """Per model the environment builds: whether it already holds it built with the current definition,
    from the same upstream definitions and production versions."""
    manifest = read_manifest(project.settings.warehouse, plan.name) or {}
    held = manifest.get("models") or {}
    env = environment_project(project, plan.name, plan.models)
    return {
        name: held.get(name, {}).get("fingerprint") == env.models[name].fingerprint
        and held[name].get("upstream") == _signature(env, env.models[name], plan)
        and not _moved_reads(env, env.models[name], plan, manifest.get("reads") or {})
        and not _moved_itself(held[name], plan, name)
        and delta.built_with(env.settings.table_location(name)) == env.models[name].fingerprint
        for name in plan.models
    }
