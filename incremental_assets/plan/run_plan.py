"""Pure planning: (model, window) -> the exact SQL to run, the inputs to read, and how to write.

Nothing here touches Spark or Delta: :class:`incremental_assets.spark.executor.Executor` carries a plan out
(its write strategies in :mod:`incremental_assets.spark.writes`, its one commit in :mod:`incremental_assets.delta`).

>>> import tempfile, pathlib
>>> from incremental_assets.load.project import load_project
>>> d = pathlib.Path(tempfile.mkdtemp()); (d / "models").mkdir()
>>> _ = (d / "models" / "a.sql").write_text(
...     "MODEL (name s.a, kind INCREMENTAL_BY_TIME_RANGE(time_column ds), start '2024-01-01');"
...     "SELECT ds FROM s.b WHERE ds BETWEEN @start_ds AND @end_ds")
>>> _ = (d / "models" / "b.sql").write_text("MODEL (name s.b, kind FULL); SELECT CAST('2024-01-01' AS DATE) AS ds")
>>> p = load_project(d)
>>> plan = plan_run(p, p.model("s.a"), TimeWindow.parse("2024-01-01", "2024-01-02"))
>>> str(plan.write), [i.view for i in plan.inputs]
('replace_window', ['s__b'])
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum
from typing import Any, Literal, Mapping

from sqlglot import exp

from incremental_assets.analysis import Analysis, SourceBound, pushdown
from incremental_assets.errors import ModelFileError, UnsafeIncrementalError, WindowError
from incremental_assets.load.macros.render import (
    clamp_to_window,
    cursor_literal,
    render_macros,
    render_statements,
    window_literal,
)
from incremental_assets.load.query import table_name
from incremental_assets.model import clock
from incremental_assets.model.intervals import (
    IntervalUnit,
    TimeWindow,
    batches,
    check_aligned,
    to_utc,
)
from incremental_assets.model.kinds import (
    Embedded,
    Full,
    IncrementalByCursor,
    IncrementalByTimeRange,
    ScdType2,
    Seed,
    UniqueKey,
    View,
)
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SEED_VIEW, SqlModel
from incremental_assets.plan.analyses import analysis_of, run_size
from incremental_assets.plan.definition import definition_of
from incremental_assets.plan.frames import navigation_frames
from incremental_assets.plan.rebuild import ASK_DOWNGRADE, TargetState

log = logging.getLogger(__name__)


class WriteKind(str, Enum):
    """How a run's rows reach its table; the executor has one write strategy per kind of write."""

    REPLACE_WINDOW = "replace_window"  # replace exactly the window's intervals
    REBUILD = "rebuild"  # [start, end) of an incremental model, its plans committed together: the whole table
    REPLACE_TABLE = "replace_table"  # an unpartitioned table, replaced whole
    VIEW = "view"  # nothing written: the query is read through
    UPSERT = "upsert"  # replace the key buckets the run changes (unique key)
    SCD2 = "scd2"  # close and insert versions in the key buckets the run changes
    APPEND = "append"  # add files (cursor models)

    def __str__(self) -> str:
        return self.value

    @property
    def partitioned(self) -> bool:
        """Whether the table is partitioned by interval (``ia_interval``)."""
        return self in (WriteKind.REPLACE_WINDOW, WriteKind.REBUILD)

    @property
    def keyed(self) -> bool:
        """Whether the table is partitioned by key bucket and a run rewrites only changed buckets."""
        return self in (WriteKind.UPSERT, WriteKind.SCD2)


InputKind = Literal["source", "table", "view", "seed"]
EPOCH = to_utc("1970-01-01")


@dataclass(frozen=True, eq=False)
class InputRead:
    """One table a plan reads, the temporary view it is registered as, and which rows to read."""

    name: str
    view: str
    kind: InputKind
    window: TimeWindow | None  # None: read in full
    plan: "RunPlan | None" = None  # for VIEW models: the view's own plan, registered first


@dataclass(frozen=True, eq=False)
class RunPlan:
    """One unit of work: run ``query`` over ``window`` and write it with ``write``."""

    model: str
    window: TimeWindow | None
    query: exp.Expr
    inputs: tuple[InputRead, ...]
    write: WriteKind
    fingerprint: str
    safety_class: str | None = None
    downgraded: bool = False
    execution_time: datetime | None = None
    target: "TargetState | None" = None  # merge-style kinds: the committed state this plan starts from
    pre_statements: tuple[exp.Expr, ...] = ()  # run before the query, in the same session
    post_statements: tuple[exp.Expr, ...] = ()  # run after the write (`@this_model` is the written table)
    definition: Mapping[str, Any] | None = None  # kept with the table by its commit (see plan.definition)

    @property
    def sql(self) -> str:
        return self.query.sql(dialect="spark", pretty=True)

    @property
    def pre_sql(self) -> list[str]:
        return [s.sql(dialect="spark") for s in self.pre_statements]

    @property
    def post_sql(self) -> list[str]:
        return [s.sql(dialect="spark") for s in self.post_statements]

    def explain_inputs(self) -> list[str]:
        lines = []
        for read in self.inputs:
            rows = f"rows in {read.window}" if read.window else "in full"
            lines.append(f"-- {read.view}: {read.kind} {read.name}, {rows}")
        return lines

    def render(self) -> str:
        """The SQL with a header saying which table each view stands for and what is read."""
        header = [
            f"-- model {self.model}" + (f", window {self.window}" if self.window else "") + f", write: {self.write}"
        ]
        if self.safety_class:
            header.append(
                f"-- safety class: {self.safety_class}"
                + (" (refused: downgraded to a full refresh)" if self.downgraded else "")
            )
        pre = [f"{sql};" for sql in self.pre_sql]
        post = [f"-- after the write:\n{sql};" for sql in self.post_sql]
        return "\n".join(header + self.explain_inputs() + pre + [self.sql] + post)


def view_name(name: str) -> str:
    """The temporary view a table is registered as for a run.

    >>> view_name("raw.orders")
    'raw__orders'
    """
    return name.replace(".", "__")


def _substitute_tables(query: exp.Expr, names: Mapping[str, str]) -> exp.Expr:
    ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}

    def replace(node: exp.Expr) -> exp.Expr:
        if not isinstance(node, exp.Table) or not node.name:
            return node
        name = table_name(node)
        if (not node.db and name in ctes) or name not in names:
            return node
        alias = node.alias or node.name
        new = exp.Table(this=exp.to_identifier(names[name]))
        new.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
        return new

    return query.transform(replace)


def macro_window(model: SqlModel, window: TimeWindow | None, execution_time: datetime) -> TimeWindow:
    """The window macros see: the run window, or for unpartitioned models [start, execution time)."""
    if window is not None:
        return window
    start = model.start or EPOCH
    end = max(execution_time, start + IntervalUnit.HOUR.nominal)
    return TimeWindow(start, end)


def refusal_message(model: SqlModel, analysis: Analysis) -> str:
    """A refusal as the user reads it: each reason with its file and line, and the ways out."""
    lines = [f"model {model.name} is not safe to run incrementally:"]
    for reason in analysis.reasons:
        path = reason.path or model.path
        where = f"{path}:{reason.line}" if reason.line else str(path)
        lines.append(f"  {where}: [{reason.rule}] {reason.message}")
    lines.append(
        "fix the SQL, allow the construct in the MODEL header (e.g. physical_properties "
        "(allow_window_functions = true)), "
        f"or run with {ASK_DOWNGRADE} to rebuild the model in full this time"
    )
    return "\n".join(lines)


def plan_run(
    project: Project,
    model: SqlModel,
    window: TimeWindow | None,
    *,
    execution_time: datetime | None = None,
    allow_downgrade: bool = False,
    target: TargetState | None = None,
    end: datetime | None = None,
) -> RunPlan:
    """Plan one run of ``model``. Incremental models need an aligned window inside [start, end).

    Merge-style kinds read ``target`` (default: no table yet): a unique-key model's macro window runs
    from the previous run's end to the execution time (or an earlier ``end``); a cursor's ``@last_value``
    is its MAX(cursor).

    The model's analysis decides how much of each time-series input is read (its derived lookback);
    a refused model raises UnsafeIncrementalError unless ``allow_downgrade``, which rebuilds it from
    its start instead (a full refresh up to the window's end).
    """
    execution_time = execution_time or clock.now()
    kind = model.kind
    state = target or TargetState()  # merge-style kinds: no table yet unless the caller read one
    if isinstance(kind, Embedded):
        raise WindowError(
            f"model {model.name} is EMBEDDED: it has no table and runs only inside the models that read it"
        )
    analysis = analysis_of(project, model.name)
    bounds: Mapping[str, SourceBound | None] | None = None
    downgraded = False
    if isinstance(kind, IncrementalByTimeRange):
        window, bounds, downgraded = _incremental_window(model, window, analysis, allow_downgrade)
    elif isinstance(kind, UniqueKey):
        window = unique_key_window(model, state, execution_time, end)
    else:
        window = None
    query, inputs = _query_and_inputs(project, model, window, bounds, execution_time, state)
    write = write_kind(model, state)
    safety = analysis.label if analysis is not None else None
    pre, post = render_statements(
        model,
        macro_window(model, window, execution_time),
        execution_time=execution_time,
        extra=cursor_macros(model, state),
        views=_statement_views(project, model, inputs),
    )
    definition = definition_of(project, model.name)
    return RunPlan(
        model.name, window, query, tuple(inputs), write, model.fingerprint, safety, downgraded, execution_time,
        target, pre, post, definition,
    )  # fmt: skip


def _statement_views(project: Project, model: SqlModel, inputs: list[InputRead]) -> dict[str, str]:
    """The names a model's statements read through the run's views: its inputs and itself, but not a table
    or view of Spark's catalog (``before_all`` or a pre-statement makes it), which statements name as it is,
    so that they drop, create or read that object, not the run's view of it."""
    views = {r.name: r.view for r in inputs if not (r.kind == "source" and project.sources[r.name].in_catalog)}
    return views | {model.name: view_name(model.name)}


def _query_and_inputs(
    project: Project,
    model: SqlModel,
    window: TimeWindow | None,
    bounds: Mapping[str, SourceBound | None] | None,
    execution_time: datetime,
    state: TargetState,
) -> tuple[exp.Expr, list[InputRead]]:
    """The run's query, reading its inputs' views (each cut to what the run needs) and, for a model
    partitioned by time, keeping only rows of the window; the inputs it reads."""
    kind = model.kind
    rendered = _rendered_query(model, window, execution_time, state)
    rendered = _bounded_reads(project, navigation_frames(rendered), window, bounds)
    inputs = [_plan_input(project, model, name, window, execution_time, bounds) for name in model.depends_on]
    if isinstance(kind, Seed):
        inputs = [InputRead(model.name, SEED_VIEW, "seed", None)]
    rendered = _substitute_tables(rendered, {read.name: read.view for read in inputs})
    if model.columns and not isinstance(kind, Seed):
        rendered = _declared_types(rendered, model.columns)
    if not isinstance(kind, IncrementalByTimeRange):
        return rendered, inputs
    assert window is not None
    clamped = clamp_to_window(
        rendered, kind.time_column, window, time_format=kind.time_format, tz=project.settings.zone
    )
    return clamped, inputs


def _declared_types(query: exp.Expr, columns: Mapping[str, str]) -> exp.Select:
    """The query's output as the MODEL header's ``columns (...)`` declare it, as SQLMesh writes a table whose
    columns are declared: those columns, in that order, each cast to its type.

    >>> from incremental_assets.load.query import parse_query
    >>> _declared_types(parse_query("SELECT 1 AS a, 2 AS b"), {"a": "DOUBLE"}).sql("spark")
    'SELECT CAST(`__typed`.`a` AS DOUBLE) AS `a` FROM (SELECT 1 AS a, 2 AS b) AS __typed'
    """
    typed = [
        exp.cast(exp.column(name, table="__typed", quoted=True), exp.DataType.build(kind, dialect="spark")).as_(
            name, quoted=True
        )
        for name, kind in columns.items()
    ]
    return exp.select(*typed).from_(
        exp.Subquery(this=query.copy(), alias=exp.TableAlias(this=exp.to_identifier("__typed")))
    )


def _rendered_query(
    model: SqlModel, window: TimeWindow | None, execution_time: datetime, state: TargetState
) -> exp.Expr:
    """The model's query with the run's macro values; a macro condition on the run window that cannot be
    evaluated for this one names the model file."""
    try:
        rendered = render_macros(
            model.query,
            macro_window(model, window, execution_time),
            execution_time=execution_time,
            this_model=model.name,
            extra=cursor_macros(model, state),
        )
    except ModelFileError as exc:
        raise ModelFileError(model.path, model.query_line, exc.message, hint=exc.hint) from None
    assert rendered is not None  # render_macros never leaves a query out
    return rendered


def _bounded_reads(
    project: Project,
    rendered: exp.Expr,
    window: TimeWindow | None,
    bounds: Mapping[str, SourceBound | None] | None,
) -> exp.Expr:
    """The query with each time-series input read only for the window widened by its bound."""
    if window is None or not bounds:
        return rendered
    return pushdown(
        rendered,
        bounds=bounds,
        time_columns={name: project.time_column_of(name) for name in bounds},
        run_start=window.start,
        run_end=window.end,
        literal=lambda name, instant: window_literal(
            instant, time_format=_time_format(project, name), tz=project.settings.zone
        ),
        event_time_columns={name: found for name in bounds if (found := project.event_time_of(name))},
    )


def write_kind(model: SqlModel, target: TargetState) -> WriteKind:
    """How a run of ``model`` writes its rows (a rebuild of an incremental model is planned by :func:`plan_rebuild`)."""
    kind = model.kind
    if isinstance(kind, IncrementalByTimeRange):
        return WriteKind.REPLACE_WINDOW
    if isinstance(kind, View) and not kind.materialized:
        return WriteKind.VIEW
    if isinstance(kind, UniqueKey):
        return WriteKind.UPSERT
    if isinstance(kind, ScdType2):
        return WriteKind.SCD2
    if isinstance(kind, IncrementalByCursor):
        return WriteKind.REPLACE_TABLE if target.is_backfill(model) else WriteKind.APPEND
    assert isinstance(kind, (Full, View, Seed))
    return WriteKind.REPLACE_TABLE


def _incremental_window(
    model: SqlModel, window: TimeWindow | None, analysis: Analysis | None, allow_downgrade: bool
) -> tuple[TimeWindow, Mapping[str, SourceBound | None] | None, bool]:
    """An incremental run's window (checked against the model's intervals), the per-input read bounds,
    and whether a refused model is downgraded to a rebuild from its start."""
    if window is None:
        raise WindowError(f"model {model.name} is incremental: give a window (on the CLI --start/--end, or --auto)")
    check_aligned(window, model.unit, model=model.name)
    if model.start and window.start < model.start:
        raise WindowError(f"model {model.name}: window {window} starts before the model's start {model.start.date()}")
    if model.end and window.end > model.end:
        raise WindowError(f"model {model.name}: window {window} ends after the model's end {model.end.date()}")
    assert analysis is not None
    if not analysis.refused:
        return window, analysis.bounds, False
    if not allow_downgrade:
        raise UnsafeIncrementalError(refusal_message(model, analysis))
    first = refusal_message(model, analysis).splitlines()[0]
    log.warning("%s", first + " running a full refresh instead (a downgrade was allowed)")
    return TimeWindow(model.start or window.start, window.end), None, True


def unique_key_window(
    model: SqlModel, target: TargetState, execution_time: datetime, end: datetime | None = None
) -> TimeWindow:
    """What a unique-key run covers: from where the last committed run ended (or the model's start)
    to the execution time, or to ``end`` (a command's ``--end``) when that is before it, so
    ``@start_ds``/``@end_ds`` filters read each source row once, and a replay of past data reads it in the
    steps the commands gave. A run that starts over (full refresh, changed definition) reads from the
    model's start."""
    start = (None if target.is_backfill(model) else target.window_end) or model.start or EPOCH
    stop = min(execution_time, to_utc(end)) if end is not None else execution_time
    return TimeWindow(start, max(stop, start + IntervalUnit.HOUR.nominal))


def cursor_macros(model: SqlModel, target: TargetState) -> dict[str, exp.Expr]:
    """``@last_value`` / ``@initial_value`` / ``@is_backfill`` for a cursor model (empty for other kinds).

    On a backfill (no table, or a changed definition) ``@last_value`` falls back to the initial value.
    """
    kind = model.kind
    if not isinstance(kind, IncrementalByCursor):
        return {}
    initial = cursor_literal(kind.initial_value)
    backfill = target.is_backfill(model)
    last = initial if backfill or target.last_value is None else cursor_literal(target.last_value, target.value_type)
    return {"last_value": last, "initial_value": initial, "is_backfill": exp.Boolean(this=backfill)}


def _time_format(project: Project, name: str) -> str | None:
    upstream = project.models.get(name)
    if upstream is not None and isinstance(upstream.kind, IncrementalByTimeRange):
        return upstream.kind.time_format
    source = project.sources.get(name)
    return source.time_format if source is not None else None


def _plan_input(
    project: Project,
    consumer: SqlModel,
    name: str,
    window: TimeWindow | None,
    execution_time: datetime,
    bounds: Mapping[str, SourceBound | None] | None,
) -> InputRead:
    read_window: TimeWindow | None = None
    bound = bounds.get(name) if bounds else None
    if window is not None and bound is not None and project.time_column_of(name):
        read_window = window.widen(bound.before, bound.after)
        event = project.event_time_of(name)
        if event is not None:  # a bound in event time reads whole partitions of the time column
            unit = IntervalUnit.of(event[1])
            read_window = TimeWindow(unit.floor(read_window.start), unit.ceil(read_window.end))
    if name in project.sources:
        return InputRead(name, view_name(name), "source", read_window)
    upstream = project.models[name] if name in project.models else consumer
    if isinstance(upstream.kind, View) and not upstream.kind.materialized:
        nested = plan_run(project, upstream, None, execution_time=execution_time)
        return InputRead(name, view_name(name), "view", None, nested)
    return InputRead(name, view_name(name), "table", read_window)


def plan_window(
    project: Project,
    model: SqlModel,
    window: TimeWindow,
    *,
    batch_size: int | None = None,
    execution_time: datetime | None = None,
    allow_downgrade: bool = False,
) -> list[RunPlan]:
    """Plans covering ``window`` in consecutive runs, in order (batch size and execution class apply)."""
    if not isinstance(model.kind, IncrementalByTimeRange):
        return [plan_run(project, model, None, execution_time=execution_time)]
    analysis = analysis_of(project, model.name)
    if analysis is not None and analysis.refused and allow_downgrade:
        return [plan_run(project, model, window, execution_time=execution_time, allow_downgrade=True)]
    return [
        plan_run(project, model, part, execution_time=execution_time, allow_downgrade=allow_downgrade)
        for part in batches(window, model.unit, run_size(project, model, batch_size))
    ]


def plan_rebuild(
    project: Project,
    model: SqlModel,
    end: datetime,
    *,
    execution_time: datetime | None = None,
    allow_downgrade: bool = False,
) -> list[RunPlan]:
    """Plans rebuilding an incremental model over [start, end), committed together as ONE transaction
    that replaces the whole table (readers see the old table until then).

    A model that reads its own previous intervals cannot stage them all before one commit: its plans
    keep ``replace_window`` and are committed one after the other, in order.
    """
    if not model.is_incremental or model.start is None:
        raise WindowError(f"model {model.name} is not incremental: every run rebuilds it, plan it with plan_run")
    plans = plan_window(
        project, model, TimeWindow(model.start, end), execution_time=execution_time, allow_downgrade=allow_downgrade
    )
    if model.name in model.depends_on:
        return plans
    return [replace(p, write=WriteKind.REBUILD) for p in plans]
