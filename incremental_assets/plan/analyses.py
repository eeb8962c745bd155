"""The analyses of a project's models: one Analysis per incremental model, computed on first use and kept
for as long as the project value lives (a memo keyed by the project, which a reloaded project replaces).

The analysis needs what only the project knows (which inputs are time series, the model's interval,
its overrides); everything downstream asks here for a model's safety class, run-size limit and the
lookback of each input.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from sqlglot import exp

import incremental_assets.analysis as analysis_package
import incremental_assets.plan as plan_package
from incremental_assets.analysis import Analysis, Reason, SourceBound, analyze_query
from incremental_assets.analysis.classify import one_interval_per_run, strictest
from incremental_assets.load.cache import ResultCache, cache_folder, package_digest, result_key
from incremental_assets.load.macros.window_conditions import (
    MAX_RUNTIME_CHOICES,
    choice_count,
    has_runtime_macros,
    runtime_variants,
)
from incremental_assets.load.parsed import parse_key
from incremental_assets.load.sqlmesh_models import SqlmeshPythonModel
from incremental_assets.model.kinds import IncrementalByTimeRange
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel

_KEPT: "WeakKeyDictionary[Project, dict[str, Analysis | None]]" = WeakKeyDictionary()


def analyze_model(project: Project, model: SqlModel) -> Analysis | None:
    """Classify an incremental model (None for other kinds, which always run in full)."""
    kind = model.kind
    if not isinstance(kind, IncrementalByTimeRange):
        return None
    time_columns = {name: project.time_column_of(name) for name in model.depends_on}
    time_columns[model.name] = kind.time_column
    event_time_columns = {
        name: found for name in (*model.depends_on, model.name) if (found := project.event_time_of(name))
    }
    query = model.query
    if isinstance(model, SqlmeshPythonModel):
        # Its function is opaque: it reads its upstreams in full, its rows are clamped to the window.
        query = exp.select(*(s.copy() for s in query.selects))
    if choice_count(query) > 2 * MAX_RUNTIME_CHOICES:  # each file has at most 6; EMBEDDED models inlined add theirs
        reason = Reason(
            "window_condition",
            f"more than {2 * MAX_RUNTIME_CHOICES} macro conditions on the run window (with the EMBEDDED "
            "models inlined) are too many combinations to analyse",
            model.query_line,
        )
        return Analysis("Refused", None, (reason,), {})
    # A macro condition on the run window picks one of several queries per run: each is analysed, and
    # since a run decides once for its whole window, a run covers one interval (SQLMesh's batch_size 1).
    analysis = strictest(
        [
            analyze_query(
                variant,
                model_name=model.name,
                time_column=kind.time_column,
                time_columns=time_columns,
                interval=model.unit.nominal,
                overrides=kind.safety_overrides,
                declared_lookback=kind.lookback,
                dialect=model.dialect,
                event_time_columns=event_time_columns,
            )
            for variant in runtime_variants(query)
        ]
    )
    if not has_runtime_macros(query):
        return analysis
    reason = Reason(
        "window_condition",
        "a macro condition on the run window (@IF, @EVAL, a clause operator) is decided per run: one interval per run",
        model.query_line,
    )
    return one_interval_per_run(analysis, reason)


def analyses(project: Project) -> dict[str, Analysis | None]:
    """The safety analysis of every incremental model of ``project`` (computed on first use, then kept; a
    model as its file was parsed also between loads, in the project's cache: see :func:`_kept_analysis`)."""
    cached = _KEPT.get(project)
    if cached is None:
        kept = ResultCache(cache_folder(project.directory), "analyses", pickled=True)
        models = project.models.values()
        cached = _KEPT[project] = {m.name: _kept_analysis(project, m, kept) for m in models if m.is_incremental}
        kept.save()
    return cached


def _kept_analysis(project: Project, model: SqlModel, kept: ResultCache) -> Analysis | None:
    """:func:`analyze_model`, kept under what it reads: the model as parsed (its parse's key, which covers
    its file and everything the parse read) and the time and event-time columns of the tables it reads."""
    made_by = parse_key(model)
    if made_by is None:
        return analyze_model(project, model)
    names = (*model.depends_on, model.name)
    key = result_key(
        package_digest(analysis_package, plan_package),
        made_by,
        [(n, project.time_column_of(n), project.event_time_of(n)) for n in names],
    )
    found = kept.get(key)
    if found is not None:
        return found[0]
    return kept.put(key, [analyze_model(project, model)])[0]


def analysis_of(project: Project, name: str) -> Analysis | None:
    """The Analysis of an incremental model, None for other kinds."""
    return analyses(project).get(name)


def input_bound(project: Project, model_name: str, input_name: str) -> SourceBound | None:
    """How far beyond a run window a model reads one input, or None when there is no derived bound:
    the input has no time dimension, or the model is not analysed or refused."""
    analysis = analysis_of(project, model_name)
    if analysis is None or analysis.refused:
        return None
    return analysis.bounds.get(input_name)


def run_size(project: Project, model: SqlModel, batch_size: int | None = None) -> int | None:
    """Most intervals one run may cover: the smaller of the batch size and the analysis' limit (None:
    any number, one query for the whole window). The Dagster backfill policy is derived from this too."""
    kind = model.kind
    if not isinstance(kind, IncrementalByTimeRange):
        return None
    analysis = analysis_of(project, model.name)
    limits = [
        n
        for n in (batch_size if batch_size is not None else kind.batch_size, analysis.batch_limit if analysis else None)
        if n
    ]
    return min(limits) if limits else None


def windows_independent(project: Project, model: SqlModel) -> bool:
    """Whether a model's windows build on nothing of each other (an INCREMENTAL_BY_TIME_RANGE model not reading
    its own table): one window failing leaves the others to run, as SQLMesh runs the other batches."""
    if not isinstance(model.kind, IncrementalByTimeRange):
        return False
    analysis = analysis_of(project, model.name)
    return analysis is not None and not any(r.rule == "self_reference" for r in analysis.reasons)
