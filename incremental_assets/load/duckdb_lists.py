"""DuckDB's list aggregates and ordered aggregates as Spark expressions giving DuckDB's values.

* ``LIST(x)`` / ``ARRAY_AGG(x)`` keep NULL elements (Spark's ``COLLECT_LIST`` drops them), and with
  ``ORDER BY`` hold the elements in that order (sqlglot writes Spark's ``COLLECT_LIST`` without it);
  ``DISTINCT`` keeps one of each value, NULL included.
* ``FIRST(x ORDER BY y)`` / ``LAST(x ORDER BY y)`` are the value of the first (last) row in that order, NULL
  or not; Spark has no ordered ``FIRST``.

* ``UNNEST(l)`` inside an expression (``UNNEST(l)::DATE``, ``UNNEST(l) + 1``), which Spark refuses, is a
  ``LATERAL VIEW EXPLODE(l)`` of the SELECT, the expression reading its value (one such ``UNNEST`` per SELECT:
  DuckDB pairs several by position, where lateral views would pair every value with every other).

Each aggregate becomes ``COLLECT_LIST`` (``COLLECT_SET`` for ``DISTINCT``) of a struct of the sort keys and the value,
sorted with a comparator following each key's direction and NULL placement (DuckDB's default: ascending,
NULLs last), then the values taken out; a list of no rows is NULL, as in DuckDB. A ``FILTER (WHERE ...)``
or ``OVER (...)`` on the aggregate applies to the collecting function.
"""

from __future__ import annotations

from sqlglot import exp

_VALUE = "__v"


def ordered_aggregates(query: exp.Expr) -> None:
    """Rewrite, in place, the DuckDB aggregates above in ``query``."""
    nodes = [n for n in query.find_all(exp.ArrayAgg, exp.First, exp.Last) if _rewritten(n)]
    for node in reversed(nodes):  # innermost first: a rewrite copies its arguments
        _rewrite(node)


def nested_unnests(query: exp.Expr) -> None:
    """Each SELECT of ``query`` whose one ``UNNEST`` sits inside an expression given a lateral view exploding
    the list, the expression reading the view's value instead; in place."""
    for select in list(query.find_all(exp.Select)):
        found = [e for p in select.expressions for e in p.find_all(exp.Explode) if e.parent_select is select]
        if len(found) != 1 or found[0] in [p.unalias() for p in select.expressions]:
            continue  # none, several (paired by position), or a projection of its own, which Spark takes
        name = f"__iam_unnest{len(select.args.get('laterals') or [])}"
        alias = exp.TableAlias(this=exp.to_identifier(f"{name}_t"), columns=[exp.to_identifier(name)])
        view = exp.Lateral(this=found[0].copy(), view=True, alias=alias)
        found[0].replace(exp.column(name))
        select.append("laterals", view)


def _rewritten(node: exp.Expr) -> bool:
    if isinstance(node, exp.ArrayAgg):  # not one this module made already
        made = node.this
        return not (isinstance(made, exp.Anonymous) and made.name.upper() == "NAMED_STRUCT" and _made_here(made))
    return isinstance(node.this, exp.Order)


def _made_here(struct: exp.Anonymous) -> bool:
    first = struct.expressions[0] if struct.expressions else None
    return isinstance(first, exp.Literal) and first.name in ("__k0", _VALUE)


def _parts(node: exp.Expr) -> tuple[exp.Expr, list[exp.Ordered], bool]:
    """The aggregated value, its sort keys and whether it is DISTINCT."""
    value, keys = node.this, []
    if isinstance(value, exp.Order):
        keys = list(value.expressions)
        value = value.this
    distinct = isinstance(value, exp.Distinct)
    if distinct:
        value = value.expressions[0]
    return value, keys, distinct


def _rewrite(node: exp.Expr) -> None:
    value, keys, distinct = _parts(node)
    fields: list[exp.Expr] = []
    for i, key in enumerate(keys):
        fields += [exp.Literal.string(f"__k{i}"), key.this.copy()]
    fields += [exp.Literal.string(_VALUE), value.copy()]
    element = exp.Anonymous(this="NAMED_STRUCT", expressions=fields)
    collected: exp.Expr = exp.ArrayUniqueAgg(this=element) if distinct else exp.ArrayAgg(this=element)
    top = node
    while isinstance(top.parent, (exp.Filter, exp.Window)) and top.arg_key == "this":
        wrapper = top.parent.copy()
        wrapper.set("this", collected)
        collected, top = wrapper, top.parent
    gathered = collected
    if keys:
        collected = exp.Anonymous(this="ARRAY_SORT", expressions=[collected, _comparator(keys)])
    values: exp.Expr = exp.Anonymous(this="TRANSFORM", expressions=[collected, _lambda(["__e"], _field("__e", _VALUE))])
    if isinstance(node, (exp.First, exp.Last)):
        index = exp.Literal.number(1 if isinstance(node, exp.First) else -1)
        values = exp.Anonymous(this="TRY_ELEMENT_AT", expressions=[values, index])
    else:  # no row: NULL, not an empty list
        empty = exp.EQ(this=exp.ArraySize(this=gathered.copy()), expression=exp.Literal.number(0))
        values = exp.If(this=empty, true=exp.Null(), false=values)
    top.replace(values)


def _field(name: str, field: str) -> exp.Expr:
    return exp.Dot(this=exp.column(name), expression=exp.to_identifier(field))


def _lambda(names: list[str], body: exp.Expr) -> exp.Expr:
    return exp.Lambda(this=body, expressions=[exp.to_identifier(n) for n in names])


def _comparator(keys: list[exp.Ordered]) -> exp.Expr:
    """A Spark ``ARRAY_SORT`` comparator ``(l, r) -> int`` ordering by ``keys`` as DuckDB's ``ORDER BY``."""
    result: exp.Expr = exp.Literal.number(0)
    for i in reversed(range(len(keys))):
        key = keys[i]
        left, right = _field("__l", f"__k{i}"), _field("__r", f"__k{i}")
        before = exp.Literal.number(-1)
        after = exp.Literal.number(1)
        nulls_first = bool(key.args.get("nulls_first"))
        descending = bool(key.args.get("desc"))
        result = (
            exp.Case()
            .when(exp.NullSafeEQ(this=left, expression=right), result)
            .when(exp.Is(this=left.copy(), expression=exp.Null()), before if nulls_first else after)
            .when(exp.Is(this=right.copy(), expression=exp.Null()), after if nulls_first else before)
            .when(exp.LT(this=left.copy(), expression=right.copy()), after if descending else before)
            .else_(before if descending else after)
        )
    return _lambda(["__l", "__r"], result)
