"""Macro conditions on the run window: ``@IF(@start_ds >= '2024-02-01', a, b)``, ``@EVAL(@end_epoch -
@start_epoch)``, ``@WHERE(@start_ds > '2024-01-01') ...``.

SQLMesh evaluates these per interval, when the window is known. Expansion at load keeps them as choice
nodes holding every branch, expanded (``__ia_runtime_if(condition, (then...), (else...))``,
``__ia_runtime_eval(expr)``, a clause operator's marker left in its clause); each run resolves them once
the date macros are rendered (:func:`resolve_runtime`). The safety analysis sees every branch: it analyses
each combination of choices (:func:`runtime_variants`) and keeps the strictest result.

>>> import sqlglot
>>> from incremental_assets.load.query import parse_query
>>> q = parse_query("SELECT @IF(@start_ds >= '2024-02-01', new_price, old_price) AS price FROM t")
>>> [v.sql() for v in runtime_variants(q)]
['SELECT new_price AS price FROM t', 'SELECT old_price AS price FROM t']
>>> rendered = q.transform(lambda n: exp.Literal.string("2024-01-15") if isinstance(n, exp.Parameter) else n)
>>> resolve_runtime(rendered).sql()
'SELECT old_price AS price FROM t'
"""

from __future__ import annotations

from itertools import product
from typing import Iterator

from sqlglot import exp
from sqlglot.errors import ExecuteError

from incremental_assets.errors import ModelFileError
from incremental_assets.load.macros.evaluator import grouped
from incremental_assets.load.macros.syntax import CLAUSE_MARK, RUNTIME_EVAL, RUNTIME_IF, apply_clause

# More choices than this make too many combinations to analyse (2 ** n).
MAX_RUNTIME_CHOICES = 6


def _choices(tree: exp.Expr) -> Iterator[exp.Anonymous]:
    """The choice nodes of ``tree``, outer ones first (clause markers and ``@IF``s, not ``@EVAL``s)."""
    for node in tree.find_all(exp.Anonymous, bfs=True):
        if node.this in (RUNTIME_IF, CLAUSE_MARK):
            yield node


def choice_count(tree: exp.Expr) -> int:
    """How many conditions on the run window the tree holds."""
    return sum(1 for _ in _choices(tree))


def has_runtime_macros(tree: exp.Expr) -> bool:
    """Whether the tree holds a macro condition or ``@EVAL`` decided per run."""
    return any(n.this in (RUNTIME_IF, RUNTIME_EVAL, CLAUSE_MARK) for n in tree.find_all(exp.Anonymous))


def _attached(node: exp.Expr, root: exp.Expr) -> bool:
    while node.parent is not None:
        node = node.parent
    return node is root


def _place(marker: exp.Expr, items: list[exp.Expr]) -> exp.Expr | None:
    """Put ``items`` where ``marker`` stands: spliced into a list, or as the one value; returns the
    replacement when ``marker`` is the root."""
    parent, key = marker.parent, marker.arg_key
    if parent is None or key is None:  # sqlglot sets both or neither
        return items[0].pop() if items else None
    if isinstance(parent.args.get(key), list):
        siblings = parent.args[key]
        at = next(i for i, s in enumerate(siblings) if s is marker)
        parent.set(key, siblings[:at] + items + siblings[at + 1 :])
        return None
    if not items:
        if isinstance(parent, exp.Connector):
            parent.replace(parent.expression if key == "this" else parent.this)
        elif isinstance(parent, (exp.Where, exp.Having)):
            parent.pop()
        else:
            marker.replace(exp.null())
        return None
    value = items[0] if len(items) == 1 else exp.Tuple(expressions=items)
    marker.replace(grouped(value, parent, key))
    return None


def _decide(root: exp.Expr, marker: exp.Anonymous, keep: bool) -> exp.Expr | None:
    """Resolve one choice node as ``keep`` says; returns the new root when the root itself was replaced."""
    if marker.this == CLAUSE_MARK:
        apply_clause(marker, keep)
        return root
    then, otherwise = marker.expressions[1], marker.expressions[2]
    chosen = list((then if keep else otherwise).expressions)
    replaced = _place(marker, chosen)
    return replaced if marker is root else root


def _unwrap_evals(tree: exp.Expr, evaluate: bool) -> exp.Expr:
    for node in list(tree.find_all(exp.Anonymous)):
        if node.this == RUNTIME_EVAL:
            inner = node.expressions[0]
            value = _literal(_constant(inner)) if evaluate else inner
            if node is tree:
                return value
            node.replace(grouped(value, node.parent, node.arg_key))
    return tree


def _literal(value: object) -> exp.Expr:
    """A computed value as SQL; a float as a DOUBLE, so every run gives the column one type (a bare
    ``1.0`` is a DECIMAL(2,1) in Spark, ``10.0`` a DECIMAL(3,1))."""
    if isinstance(value, float):
        return exp.cast(exp.convert(value), exp.DataType.build("DOUBLE"))
    return exp.null() if value is None else exp.convert(value)


def _constant(node: exp.Expr) -> object:
    from sqlglot.executor import execute

    try:
        return execute(exp.select(exp.alias_(node.copy(), "v"))).rows[0][0]
    except (ExecuteError, KeyError, TypeError, ValueError, ArithmeticError) as exc:
        raise ModelFileError(
            None,
            None,
            f"cannot evaluate `{node.sql()}` for this run window: {exc}",
            hint="compare date macros with constants of the same kind (@start_ds with 'YYYY-MM-DD' text, "
            "@start_epoch with numbers)",
        ) from None


def resolve_runtime(tree: exp.Expr) -> exp.Expr | None:
    """Resolve every choice node of a tree whose date macros are rendered, in place (None: a statement
    that an ``@IF`` without else left out)."""
    root: exp.Expr | None = tree
    while root is not None:
        marker = next(_choices(root), None)
        if marker is None:
            break
        condition = marker.expressions[0] if marker.expressions else exp.true()
        root = _decide(root, marker, bool(_constant(condition)))
    return None if root is None else _unwrap_evals(root, evaluate=True)


def runtime_variants(tree: exp.Expr) -> list[exp.Expr]:
    """Every query the run window can make of ``tree``: one per combination of its choices (identical
    ones once), ``@EVAL``s as the expression they compute. A tree without choices is its only variant."""
    count = choice_count(tree)
    if count == 0:
        return (
            [_unwrap_evals(tree.copy(), evaluate=False)]
            if any(n.this == RUNTIME_EVAL for n in tree.find_all(exp.Anonymous))
            else [tree]
        )
    variants: dict[str, exp.Expr] = {}
    for decisions in product((True, False), repeat=count):
        variant = tree.copy()
        root: exp.Expr | None = variant
        for marker, keep in zip(list(_choices(variant)), decisions):
            if root is not None and _attached(marker, root):
                root = _decide(root, marker, keep)
        if root is not None:
            root = _unwrap_evals(root, evaluate=False)
            variants.setdefault(root.sql(), root)
    return list(variants.values())


def first_variant(tree: exp.Expr) -> exp.Expr:
    """The query with every condition on the run window taken as true (its columns are every variant's)."""
    variants = runtime_variants(tree)
    return variants[0]
