"""The query as the passes see it: its scopes, its table references, and where a value comes from.

Every CTE reference is first inlined as a derived table, so each table reference has exactly one
path to the output; a CTE read twice (a self-join) becomes two references, each with its own filters.

Resolving an expression rewrites it over the columns of the tables it reads, following projections
through derived tables, CTEs and unions. ``time_keys`` then says whether the value is a table's time
column, possibly truncated to a grain:

>>> import sqlglot
>>> from datetime import timedelta
>>> q = sqlglot.parse_one("WITH e AS (SELECT CAST(ts AS DATE) AS d FROM raw.events) SELECT d FROM e", read="spark")
>>> lin = Lineage(q, model_name="m", time_column="d", time_columns={"raw.events": "ts"}, interval=timedelta(days=1))
>>> [(k.ref.name, k.grain) for k in lin.output_time_keys()]
[('raw.events', 'day')]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.scope import Scope, ScopeType, build_scope, find_all_in_scope

from incremental_assets.analysis.timeexpr import (
    Grain,
    ModelInterval,
    coarser,
    divides,
    grain_function,
    interval_unit,
    macro_name,
)

_MAX_DEPTH = 64
_MAX_ALTERNATIVES = 16


def line_of(node: exp.Expr | None) -> int | None:
    """The first line the parser recorded for a node or anything under it, else for its closest
    ancestor that has one (keywords such as CURRENT_TIMESTAMP carry no position themselves)."""
    while node is not None:
        lines = [n.meta["line"] for n in node.walk() if "line" in n.meta]
        if lines:
            return min(lines)
        node = node.parent
    return None


def snippet(node: exp.Expr, dialect: str, limit: int = 80) -> str:
    """Short SQL text of a node for messages, with macros written the way the user wrote them."""

    def as_written(n: exp.Expr) -> exp.Expr:
        return exp.var("@" + n.name) if isinstance(n, exp.Parameter) else n

    text = node.transform(as_written).sql(dialect)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(eq=False)
class Ref:
    """One table reference in the query (a self-join has two)."""

    table: exp.Table
    key: str  # unique per reference; the table qualifier of resolved columns
    name: str  # the caller's spelling of the table name
    time_column: str | None
    known: bool
    is_self: bool
    scope: Scope
    # A declared event-time column: the row's time, of which time_column is the truncation to
    # partition_grain. The analysis then measures this reference in event time.
    event_column: str | None = None
    partition_unit: str | None = None
    partition_grain: Grain = "exact"


@dataclass(frozen=True)
class Origin:
    """An expression rewritten over table columns, and the scopes its rows flowed through."""

    expr: exp.Expr
    path: tuple[Scope, ...]


@dataclass(frozen=True)
class TimeKey:
    """A value that is ``ref``'s time column truncated to ``grain``."""

    ref: Ref
    grain: Grain
    path: tuple[Scope, ...]


def partition_grain(unit: str) -> Grain:
    """The grain a partition column of ``unit`` truncates event time to (intervals' weeks start on Sunday).

    >>> partition_grain("day"), partition_grain("week")
    ('day', 'week:sunday')
    """
    unit = unit.lower()
    return "week:sunday" if unit == "week" else unit


def inline_ctes(query: exp.Expr) -> tuple[exp.Expr, bool]:
    """A copy of the query with every CTE reference replaced by a derived table holding its body.

    Returns the copy and whether it has a recursive CTE (which is left alone). A query without any
    CTE is returned as it is, not copied: the analysis only reads it (every rewrite works on copies),
    and copying each model's tree was a third of the analysis time of a large project.

    >>> import sqlglot
    >>> q, _ = inline_ctes(sqlglot.parse_one("WITH a AS (SELECT 1 AS x) SELECT * FROM a, a AS b", read="spark"))
    >>> q.sql()
    'SELECT * FROM (SELECT 1 AS x) AS a CROSS JOIN (SELECT 1 AS x) AS b'
    """
    if query.find(exp.With) is None:
        return query, False
    query = query.copy()
    if any(with_.args.get("recursive") for with_ in query.find_all(exp.With)):
        return query, True
    root = build_scope(query)
    # Post-order: a CTE's body is expanded before any scope that reads it, and every reference is
    # bound where it was written, so a copied body never picks up a different CTE of the same name.
    for scope in root.traverse() if root else ():
        ctes = {name.lower(): source for name, source in scope.cte_sources.items()}
        for table in scope.tables:
            cte = ctes.get(table.name.lower()) if not table.db and table.name else None
            if cte is None:
                continue
            alias = table.args.get("alias")
            if alias is None or not alias.columns:
                definition = cte.expression.parent
                columns = definition.alias_column_names if isinstance(definition, exp.CTE) else []
                alias = exp.TableAlias(
                    this=exp.to_identifier(table.alias_or_name), columns=[exp.to_identifier(c) for c in columns] or None
                )
            table.replace(exp.Subquery(this=cte.expression.copy(), alias=alias.copy()))
    for with_ in list(query.find_all(exp.With)):
        with_.pop()
    return query, False


def _table_name(table: exp.Table, model_name: str) -> str | None:
    if isinstance(table.this, exp.Parameter) and table.this.name.lower() == "this_model":
        return model_name
    if not isinstance(table.this, exp.Identifier):
        return None  # table functions, VALUES
    return ".".join(part.name for part in table.parts)


class Lineage:
    """Scopes, references and lineage of one model query. Built once, shared by the passes."""

    def __init__(
        self,
        query: exp.Expr,
        *,
        model_name: str,
        time_column: str,
        time_columns: Mapping[str, str | None],
        interval: timedelta,
        dialect: str = "spark",
        event_time_columns: Mapping[str, tuple[str, str]] | None = None,
    ):
        """``event_time_columns`` maps a table name to its event-time column and the unit (``day``,
        ``hour``, ...) its time column truncates that column to."""
        self.model_name = model_name
        self.time_column = time_column
        self.interval = interval
        self.dialect = dialect
        self.query, self.recursive = inline_ctes(query)
        root = build_scope(self.query)
        if root is None:
            raise ValueError(f"not a query: {query.sql(dialect)[:80]}")
        self.root = root
        self.scopes: list[Scope] = list(root.traverse())
        self.refs: list[Ref] = []
        self._ref_by_key: dict[str, Ref] = {}
        self._ref_by_table: dict[int, Ref] = {}
        self._refs_under: dict[int, list[Ref]] = {}
        self.memo: dict[str, dict] = {}  # per-pass caches keyed by scope id
        self._collect_refs(time_columns, event_time_columns or {})
        self.unit: ModelInterval = interval_unit(interval)
        if self.unit == "week":
            # A weekly model's intervals start on the weekday its own time column is truncated to.
            weeks = {key.grain for key in self.output_time_keys() if key.grain.startswith("week:")}
            if len(weeks) == 1:
                self.unit = weeks.pop()

    # --- references ------------------------------------------------------------------------

    def _collect_refs(
        self, time_columns: Mapping[str, str | None], event_time_columns: Mapping[str, tuple[str, str]]
    ) -> None:
        by_lower = {name.lower(): name for name in time_columns}
        events = {name.lower(): value for name, value in event_time_columns.items()}
        for scope in self.scopes:
            source_ids = {id(s) for s in scope.sources.values() if isinstance(s, exp.Table)}
            for table in scope.tables:
                written = _table_name(table, self.model_name)
                if written is None or id(table) not in source_ids:
                    continue
                is_self = written.lower() == self.model_name.lower()
                name = by_lower.get(written.lower(), self.model_name if is_self else written)
                known = name in time_columns or is_self
                column = time_columns.get(name) if name in time_columns else self.time_column if is_self else None
                ref = Ref(table, f"__ref{len(self.refs)}", name, column, known, is_self, scope)
                event = events.get(name.lower()) if column else None
                if event is not None:
                    ref.event_column, ref.partition_unit = event[0].lower(), event[1].lower()
                    ref.partition_grain = partition_grain(ref.partition_unit)
                self.refs.append(ref)
                self._ref_by_key[ref.key] = ref
                self._ref_by_table[id(table)] = ref

    def time_column_names(self, ref: Ref) -> set[str]:
        """The columns of ``ref`` that say when a row happened (its time column, its event-time column)."""
        return {c.lower() for c in (ref.time_column, ref.event_column) if c}

    def ref_of_column(self, column: exp.Column) -> Ref | None:
        return self._ref_by_key.get(column.table)

    def refs_under(self, scope: Scope) -> list[Ref]:
        """Every reference whose rows flow into ``scope`` (its sources, subqueries, unions, recursively)."""
        if id(scope) not in self._refs_under:
            inside = {id(s) for s in scope.traverse()}
            self._refs_under[id(scope)] = [ref for ref in self.refs if id(ref.scope) in inside]
        return self._refs_under[id(scope)]

    def reads_time_series(self, scope: Scope) -> bool:
        return any(ref.time_column for ref in self.refs_under(scope))

    # --- resolving values to table columns --------------------------------------------------

    def resolve(self, expr: exp.Expr, scope: Scope, *, aliases: bool = False, depth: int = 0) -> list[Origin] | None:
        """``expr`` (evaluated in ``scope``) rewritten over table columns; one origin per union branch.

        None when some column cannot be traced (unknown schema, aggregate, window, ambiguity).
        """
        if depth > _MAX_DEPTH or expr.find(exp.AggFunc, exp.Window, exp.Query) is not None:
            return None
        if isinstance(expr, exp.Column):
            return self._resolve_column(expr, scope, aliases, depth)
        columns = [c for c in expr.find_all(exp.Column) if not isinstance(c.this, exp.Star)]
        choices = []
        for column in columns:
            origins = self._resolve_column(column, scope, aliases, depth)
            if origins is None:
                return None
            choices.append(origins)
        results = []
        for combo in itertools.islice(itertools.product(*choices), _MAX_ALTERNATIVES + 1):
            copy = expr.copy()
            copied = [c for c in copy.find_all(exp.Column) if not isinstance(c.this, exp.Star)]
            path: tuple[Scope, ...] = ()
            for old, origin in zip(copied, combo):
                old.replace(origin.expr.copy())
                path = path + tuple(s for s in origin.path if s not in path)
            results.append(Origin(copy, path))
        return results if len(results) <= _MAX_ALTERNATIVES else None

    def _resolve_column(self, column: exp.Column, scope: Scope, aliases: bool, depth: int) -> list[Origin] | None:
        if isinstance(column.this, exp.Star):
            return None
        if aliases and not column.table and isinstance(scope.expression, exp.Select):
            # GROUP BY / ORDER BY may name a projection by its alias (Spark's group-by-alias).
            for projection in scope.expression.expressions:
                if isinstance(projection, exp.Alias) and projection.alias.lower() == column.name.lower():
                    inner = projection.this
                    if not (isinstance(inner, exp.Column) and inner.name.lower() == column.name.lower()):
                        return self.resolve(inner, scope, depth=depth + 1)
        source = self._source_of(column, scope)
        if source is None:
            return None
        if isinstance(source, exp.Table):
            ref = self._ref_by_table.get(id(source))
            if ref is None:
                return None
            return [Origin(exp.column(column.name, table=ref.key), ())]
        return self.output_column(source, column.name, depth=depth + 1)

    def _source_of(self, column: exp.Column, scope: Scope) -> exp.Table | Scope | None:
        current: Scope | None = scope
        while current is not None:
            source = self._local_source(column, current)
            if source is not None:
                return source
            # Correlated subqueries may read columns of the enclosing query.
            current = current.parent if current.scope_type == ScopeType.SUBQUERY else None
        return None

    def _local_source(self, column: exp.Column, scope: Scope) -> exp.Table | Scope | None:
        try:
            selected = {name: source for name, (_, source) in scope.selected_sources.items()}
        except OptimizeError:
            selected = dict(scope.sources)
        if column.table:
            wanted = column.table.lower()
            # The right side of a SEMI/ANTI join is not selected but its columns are used in ON.
            for candidates in (selected, scope.sources):
                found = next((s for name, s in candidates.items() if name.lower() == wanted), None)
                if found is not None:
                    return found
            return None
        if len(selected) == 1:
            return next(iter(selected.values()))
        name = column.name.lower()
        claims = [s for s in selected.values() if name in self._known_outputs(s)]
        return claims[0] if len(claims) == 1 else None

    def _known_outputs(self, source: exp.Table | Scope) -> set[str]:
        if isinstance(source, exp.Table):
            ref = self._ref_by_table.get(id(source))
            return self.time_column_names(ref) if ref is not None else set()
        if source.outer_columns:
            return {c.lower() for c in source.outer_columns}
        query = source.expression
        while isinstance(query, exp.SetOperation):
            query = query.this
        return {p.alias_or_name.lower() for p in getattr(query, "expressions", [])}

    def output_column(self, scope: Scope, name: str, *, depth: int = 0) -> list[Origin] | None:
        """The origins of output column ``name`` of ``scope``; the path includes ``scope``."""
        if depth > _MAX_DEPTH:
            return None
        query = scope.expression
        if isinstance(query, exp.SetOperation):
            index = self._output_index(scope, name)
            return None if index is None else self._output_at(scope, index, depth)
        if not isinstance(query, exp.Select):
            return None
        index = self._output_index(scope, name)
        if index is not None:
            origins = self._output_at(scope, index, depth)
        else:
            origins = None
            for projection in query.expressions:
                star = (
                    projection
                    if isinstance(projection, exp.Star)
                    else projection.this
                    if isinstance(projection, exp.Column)
                    else None
                )
                if isinstance(star, exp.Star):
                    table = projection.table if isinstance(projection, exp.Column) else None
                    origins = self._resolve_column(exp.column(name, table=table), scope, False, depth + 1)
                    if origins is not None:
                        break
        return origins

    def _output_index(self, scope: Scope, name: str) -> int | None:
        names = [c.lower() for c in scope.outer_columns]
        if not names:
            query = scope.expression
            while isinstance(query, exp.SetOperation):
                query = query.this
            names = [p.alias_or_name.lower() for p in getattr(query, "expressions", [])]
        return names.index(name.lower()) if name.lower() in names else None

    def _output_at(self, scope: Scope, index: int, depth: int) -> list[Origin] | None:
        query = scope.expression
        if isinstance(query, exp.SetOperation):
            results: list[Origin] = []
            for branch in scope.set_operation_scopes:
                origins = self._output_at(branch, index, depth + 1)
                if origins is None:
                    return None
                results.extend(Origin(o.expr, (scope, *o.path)) for o in origins)
            return results
        projections = getattr(query, "expressions", [])
        if index >= len(projections) or isinstance(projections[index], exp.Star):
            return None
        projection = projections[index]
        origins = self.resolve(projection.unalias(), scope, depth=depth + 1)
        if origins is None:
            return None
        return [Origin(o.expr, (scope, *o.path)) for o in origins]

    # --- time keys ---------------------------------------------------------------------------

    def time_key_of(self, expr: exp.Expr) -> tuple[Ref, Grain] | None:
        """If a resolved expression is a table's time column (possibly truncated), that table and grain."""
        grain: Grain = "exact"
        node = expr
        while not isinstance(node, exp.Column):
            step = grain_function(node)
            if step is None:
                return None
            combined = coarser(grain, step[0])
            if combined is None:
                return None
            grain, node = combined, step[1]
        ref = self.ref_of_column(node)
        if ref is None or not ref.time_column:
            return None
        name = node.name.lower()
        if ref.event_column is None:
            return (ref, grain) if name == ref.time_column.lower() else None
        if name == ref.event_column:
            return ref, grain
        if name != ref.time_column.lower():
            return None
        # The partition column is the event time truncated to the partition unit.
        combined = coarser(grain, ref.partition_grain)
        return (ref, combined) if combined is not None else None

    def time_keys(self, expr: exp.Expr, scope: Scope, *, aliases: bool = False) -> list[TimeKey] | None:
        """The time keys ``expr`` stands for (one per union branch), or None if it is not one."""
        origins = self.resolve(expr, scope, aliases=aliases)
        if not origins:
            return None
        keys = []
        for origin in origins:
            found = self.time_key_of(origin.expr)
            if found is None:
                return None
            keys.append(TimeKey(found[0], found[1], origin.path))
        return keys

    def output_time(self) -> list[Origin] | None:
        """Origins of the model's output time column (the column the framework clamps on)."""
        if "output_time" not in self.memo:
            self.memo["output_time"] = {"origins": self.output_column(self.root, self.time_column)}
        return self.memo["output_time"]["origins"]

    def output_time_keys(self) -> list[TimeKey]:
        keys = []
        for origin in self.output_time() or []:
            found = self.time_key_of(origin.expr)
            if found is not None:
                keys.append(TimeKey(found[0], found[1], origin.path))
        return keys

    def time_column_from_macro(self) -> exp.Parameter | None:
        """The window macro the output time column is computed from (``@start_ds AS ds``), if any."""
        for origin in self.output_time() or []:
            for param in origin.expr.find_all(exp.Parameter):
                if (macro_name(param) or ("",))[0] in ("start", "end"):
                    return param
        return None

    def selects_time_column(self) -> bool:
        query = self.root.expression
        while isinstance(query, exp.SetOperation):
            query = query.this
        projections = getattr(query, "expressions", [])
        names = {p.alias_or_name.lower() for p in projections}
        has_star = any(isinstance(p, exp.Star) or isinstance(p.this, exp.Star) for p in projections)
        return has_star or self.time_column.lower() in names

    def aligned(self, expr: exp.Expr, scope: Scope) -> bool:
        """Whether equal values of ``expr`` always fall in one interval of the model.

        True for a time column truncated to a grain that divides the interval (not for a coarser
        one, even as the model's output time column), for the model's own output time column
        otherwise (the interval is defined on it), and for a column named like the model's time
        column in a time-series table.
        """
        origins = self.resolve(expr, scope, aliases=True)
        if not origins:
            return False
        outputs = [o.expr for o in self.output_time() or []]
        for origin in origins:
            found = self.time_key_of(origin.expr)
            if found is not None:
                if divides(found[1], self.unit):
                    continue
                return False  # a coarser truncation (a month in a daily model) spans several intervals
            if any(origin.expr == out for out in outputs):
                continue
            column = origin.expr
            ref = self.ref_of_column(column) if isinstance(column, exp.Column) else None
            if ref is not None and ref.time_column and column.name.lower() == self.time_column.lower():
                continue
            return False
        return True

    def select_scopes(self) -> Iterator[Scope]:
        return (s for s in self.scopes if isinstance(s.expression, exp.Select))

    def aggregates(self, scope: Scope) -> list[exp.AggFunc]:
        """Aggregate calls of a scope that are not window functions."""

        def in_window(node: exp.Expr | None) -> bool:
            while node is not scope.expression and node is not None:
                if isinstance(node, exp.Window):
                    return True
                node = node.parent
            return False

        return [a for a in find_all_in_scope(scope.expression, exp.AggFunc) if not in_window(a)]

    def group_keys(self, select: exp.Expr) -> list[exp.Expr]:
        """The plain GROUP BY keys (ordinals and GROUP BY ALL expanded; ROLLUP/CUBE sets left out)."""
        group = select.args.get("group")
        if group is None:
            return []
        projections = [p.unalias() for p in select.expressions]
        if group.args.get("all"):
            return [p for p in projections if p.find(exp.AggFunc) is None]
        keys = []
        for key in group.expressions:
            if isinstance(key, (exp.Rollup, exp.Cube, exp.GroupingSets)):
                continue
            if isinstance(key, exp.Literal) and key.is_int and 0 < int(key.this) <= len(projections):
                key = projections[int(key.this) - 1]
            keys.append(key)
        return keys
