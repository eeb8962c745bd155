"""Pure planning: (model, window) -> the exact SQL to run, the inputs to read, and how to write.

Nothing here touches Spark or Delta; :mod:`incremental_assets.execution` carries a plan out.

>>> import tempfile, pathlib
>>> from incremental_assets.project import load_project
>>> d = pathlib.Path(tempfile.mkdtemp()); (d / "models").mkdir()
>>> _ = (d / "models" / "a.sql").write_text(
...     "MODEL (name s.a, kind INCREMENTAL_BY_TIME_RANGE(time_column ds), start '2024-01-01');"
...     "SELECT ds FROM s.b WHERE ds BETWEEN @start_ds AND @end_ds")
>>> _ = (d / "models" / "b.sql").write_text("MODEL (name s.b, kind FULL); SELECT CAST('2024-01-01' AS DATE) AS ds")
>>> p = load_project(d)
>>> plan = plan_run(p, p.model("s.a"), TimeWindow.parse("2024-01-01", "2024-01-02"))
>>> plan.write, [i.view for i in plan.inputs]
('replace_window', ['s__b'])
"""

from __future__ import annotations

from dataclasses import dataclass, replace
import logging
from datetime import datetime, timezone
from typing import Literal, Mapping

from sqlglot import exp

from incremental_assets.analysis import Analysis, SourceBound, pushdown
from incremental_assets.errors import ModelFileError, UnsafeIncrementalError, WindowError
from incremental_assets.keyed_kinds import IncrementalByCursor, ScdType2, UniqueKey
from incremental_assets.macros import clamp_to_window, cursor_literal, render_macros, window_literal
from incremental_assets.model import SEED_VIEW, Embedded, Full, IncrementalByTimeRange, Seed, SqlModel, View, table_name
from incremental_assets.project import Project
from incremental_assets.time_window import NOMINAL_LENGTH, TimeWindow, batches, check_aligned, to_utc

log = logging.getLogger("incremental_assets")
# replace_window: replace the window's intervals; rebuild: the window is [start, end) of an incremental
# model and its plans are committed together, replacing the whole table; replace_table: unpartitioned;
# upsert / scd2: replace the key buckets a run changes; append: add files (cursor models).
WriteStrategy = Literal["replace_window", "rebuild", "replace_table", "view", "upsert", "scd2", "append"]
InputKind = Literal["source", "table", "view", "seed"]
EPOCH = to_utc("1970-01-01")


@dataclass(frozen=True)
class TargetState:
    """What a merge-style model's committed table says before a run (read by the executor).

    ``last_value`` is MAX(cursor) of the committed rows as text (``value_type`` its Spark type);
    ``fingerprint`` and ``window_end`` come from the latest commit's metadata. Nothing is kept elsewhere.
    """

    exists: bool = False
    last_value: str | None = None
    value_type: str | None = None
    fingerprint: str | None = None
    window_end: datetime | None = None

    def is_backfill(self, model: SqlModel) -> bool:
        """Whether the run starts over (and its commit replaces the whole table): the table is missing,
        or was written by another definition and the model is not forward_only (SCD type 2 is, by default)."""
        changed = self.fingerprint is not None and self.fingerprint != model.fingerprint
        return not self.exists or (changed and not model.forward_only)


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
    query: exp.Expression
    inputs: tuple[InputRead, ...]
    write: WriteStrategy
    fingerprint: str
    safety_class: str | None = None
    downgraded: bool = False
    execution_time: datetime | None = None
    target: "TargetState | None" = None  # merge-style kinds: the committed state this plan starts from

    @property
    def sql(self) -> str:
        return self.query.sql(dialect="spark", pretty=True)

    def explain_inputs(self) -> list[str]:
        lines = []
        for read in self.inputs:
            rows = f"rows in {read.window}" if read.window else "in full"
            lines.append(f"-- {read.view}: {read.kind} {read.name}, {rows}")
        return lines

    def render(self) -> str:
        """The SQL with a header saying which table each view stands for and what is read."""
        header = [f"-- model {self.model}" + (f", window {self.window}" if self.window else "") + f", write: {self.write}"]
        if self.safety_class:
            header.append(f"-- safety class: {self.safety_class}" + (" (refused: downgraded to a full refresh)" if self.downgraded else ""))
        return "\n".join(header + self.explain_inputs() + [self.sql])


def view_name(name: str) -> str:
    """The temporary view a table is registered as for a run.

    >>> view_name("raw.orders")
    'raw__orders'
    """
    return name.replace(".", "__")


def _substitute_tables(query: exp.Expression, names: Mapping[str, str]) -> exp.Expression:
    ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}

    def replace(node: exp.Expression) -> exp.Expression:
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
    end = max(execution_time, start + NOMINAL_LENGTH["hour"])
    return TimeWindow(start, end)


def refusal_message(model: SqlModel, analysis: Analysis) -> str:
    """A refusal as the user reads it: each reason with its file and line, and the ways out."""
    lines = [f"model {model.name} is not safe to run incrementally:"]
    for reason in analysis.reasons:
        where = f"{model.path}:{reason.line}" if reason.line else str(model.path)
        lines.append(f"  {where}: [{reason.rule}] {reason.message}")
    lines.append(
        "fix the SQL, allow the construct in the kind (e.g. allow_window_functions true), "
        "or run with --allow-downgrade to rebuild the model in full this time"
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
) -> RunPlan:
    """Plan one run of ``model``. Incremental models need an aligned window inside [start, end).

    Merge-style kinds read ``target`` (default: no table yet): a unique-key model's macro window runs
    from the previous run's end to the execution time; a cursor model's ``@last_value`` is its MAX(cursor).

    The model's analysis decides how much of each time-series input is read (its derived lookback);
    a refused model raises UnsafeIncrementalError unless ``allow_downgrade``, which rebuilds it from
    its start instead (a full refresh up to the window's end).
    """
    execution_time = execution_time or datetime.now(timezone.utc)
    kind = model.kind
    if isinstance(kind, Embedded):
        raise WindowError(f"model {model.name} is EMBEDDED: it has no table and runs only inside the models that read it")
    bounds: Mapping[str, SourceBound | None] | None = None
    analysis = project.analysis(model.name)
    downgraded = False
    if isinstance(kind, IncrementalByTimeRange):
        if window is None:
            raise WindowError(f"model {model.name} is incremental: give a window (--start/--end) or use --auto")
        unit = model.interval_unit or "day"
        check_aligned(window, unit, model=model.name)
        if model.start and window.start < model.start:
            raise WindowError(f"model {model.name}: window {window} starts before the model's start {model.start.date()}")
        if model.end and window.end > model.end:
            raise WindowError(f"model {model.name}: window {window} ends after the model's end {model.end.date()}")
        assert analysis is not None
        if analysis.refused:
            if not allow_downgrade:
                raise UnsafeIncrementalError(refusal_message(model, analysis))
            log.warning("%s", refusal_message(model, analysis).splitlines()[0] + " running a full refresh instead (--allow-downgrade)")
            window = TimeWindow(model.start or window.start, window.end)
            downgraded = True
        else:
            bounds = analysis.bounds
    elif isinstance(kind, UniqueKey):
        window = unique_key_window(model, target or TargetState(), execution_time)
    else:
        window = None

    extra = cursor_macros(model, target or TargetState())
    rendered = render_macros(
        model.query, macro_window(model, window, execution_time), execution_time=execution_time, this_model=model.name, extra=extra
    )
    if window is not None and bounds:
        rendered = pushdown(
            rendered,
            bounds=bounds,
            time_columns={name: project.time_column_of(name) for name in bounds},
            run_start=window.start,
            run_end=window.end,
            literal=lambda name, instant: window_literal(instant, time_format=_time_format(project, name)),
        )
    inputs = [_plan_input(project, model, name, window, execution_time, bounds) for name in model.depends_on]
    if isinstance(kind, Seed):
        inputs = [InputRead(model.name, SEED_VIEW, "seed", None)]
    rendered = _substitute_tables(rendered, {read.name: read.view for read in inputs})
    if isinstance(kind, IncrementalByTimeRange):
        assert window is not None
        query: exp.Expression = clamp_to_window(rendered, kind.time_column, window, time_format=kind.time_format)
        write: WriteStrategy = "replace_window"
    elif isinstance(kind, View) and not kind.materialized:
        query, write = rendered, "view"
    elif isinstance(kind, UniqueKey):
        query, write = rendered, "upsert"
    elif isinstance(kind, ScdType2):
        query, write = rendered, "scd2"
    elif isinstance(kind, IncrementalByCursor):
        query, write = rendered, "replace_table" if (target or TargetState()).is_backfill(model) else "append"
    else:
        assert isinstance(kind, (Full, View, Seed))
        query, write = rendered, "replace_table"
    safety = analysis.safety_class if analysis is not None else None
    if analysis is not None and analysis.safety_class == "BoundedSafe":
        safety = f"BoundedSafe({analysis.batch_limit})"
    return RunPlan(model.name, window, query, tuple(inputs), write, model.fingerprint, safety, downgraded, execution_time, target)


def full_refresh_target(model: SqlModel) -> TargetState:
    """The state a full refresh of a merge-style model plans from: no table, so the run starts over and
    its commit replaces the whole table. SCD type 2 history cannot be recomputed from a snapshot source,
    so its full refresh is refused unless the kind sets ``disable_restatement false``."""
    kind = model.kind
    if isinstance(kind, ScdType2) and kind.disable_restatement:
        raise ModelFileError(
            model.path,
            model.line_of("kind"),
            f"model {model.name} is SCD_TYPE_2: a full refresh would throw away its history, which cannot be rebuilt "
            "from the current source rows; it is refused and the table is unchanged",
            hint="run it without --full-refresh (changes apply to new history only), or set `disable_restatement false` "
            "in the kind to rebuild the table from the current source rows (every key then starts with one version)",
        )
    return TargetState()


def unique_key_window(model: SqlModel, target: TargetState, execution_time: datetime) -> TimeWindow:
    """What a unique-key run covers: from where the last committed run ended (or the model's start)
    to the execution time, so ``@start_ds``/``@end_ds`` filters read each source row once. A run that
    starts over (full refresh, changed definition) reads from the model's start."""
    start = (None if target.is_backfill(model) else target.window_end) or model.start or EPOCH
    end = max(execution_time, start + NOMINAL_LENGTH["hour"])
    return TimeWindow(start, end)


def cursor_macros(model: SqlModel, target: TargetState) -> dict[str, exp.Expression]:
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
    return None


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
    if name in project.sources:
        return InputRead(name, view_name(name), "source", read_window)
    upstream = project.models[name] if name in project.models else consumer
    if isinstance(upstream.kind, View) and not upstream.kind.materialized:
        nested = plan_run(project, upstream, None, execution_time=execution_time)
        return InputRead(name, view_name(name), "view", None, nested)
    return InputRead(name, view_name(name), "table", read_window)


def run_size(project: Project, model: SqlModel, batch_size: int | None = None) -> int | None:
    """Most intervals one run may cover: the smaller of the batch size and the analysis' limit."""
    kind = model.kind
    if not isinstance(kind, IncrementalByTimeRange):
        return None
    analysis = project.analysis(model.name)
    limits = [n for n in (batch_size if batch_size is not None else kind.batch_size, analysis.batch_limit if analysis else None) if n]
    return min(limits) if limits else None


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
    analysis = project.analysis(model.name)
    if analysis is not None and analysis.refused and allow_downgrade:
        return [plan_run(project, model, window, execution_time=execution_time, allow_downgrade=True)]
    return [
        plan_run(project, model, part, execution_time=execution_time, allow_downgrade=allow_downgrade)
        for part in batches(window, model.interval_unit or "day", run_size(project, model, batch_size))
    ]


def needs_rebuild(model: SqlModel, built_with: str | None) -> bool:
    """Whether a model's table must be rebuilt from its start: it was built with another definition
    (fingerprint) and the model is not forward_only. Unpartitioned models are rebuilt by every run anyway.

    >>> import tempfile, pathlib
    >>> from incremental_assets.model import parse_model_file
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "m.sql"
    >>> _ = p.write_text("MODEL (name a.b, kind INCREMENTAL_BY_TIME_RANGE(time_column d), start '2024-01-01'); SELECT d FROM c")
    >>> m = parse_model_file(p)
    >>> needs_rebuild(m, None), needs_rebuild(m, m.fingerprint), needs_rebuild(m, "0" * 64)
    (False, False, True)
    """
    return model.is_incremental and built_with is not None and built_with != model.fingerprint and not model.forward_only


def change_effect(model: SqlModel) -> str:
    """What the next run of a merge-style model does with its table once the model's definition changed
    since the table was built (as ``TargetState.is_backfill`` decides it), said for ``status``."""
    if model.forward_only:
        return "keeps its rows (forward_only): the new definition applies to what it writes from now on"
    if isinstance(model.kind, IncrementalByCursor):
        return "starts over from the initial value, replacing the table in one commit"
    return "rebuilds it from scratch, replacing the table in one commit"


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
    assert model.is_incremental and model.start is not None
    plans = plan_window(project, model, TimeWindow(model.start, end), execution_time=execution_time, allow_downgrade=allow_downgrade)
    if model.name in model.depends_on:
        return plans
    return [replace(p, write="rebuild") for p in plans]
