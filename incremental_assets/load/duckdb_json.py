"""DuckDB's JSON functions as Spark expressions giving DuckDB's values.

DuckDB's ``j -> path`` (``JSON_EXTRACT``) is JSON: a text value keeps its quotes (``"x"``), a JSON null is
``null``. sqlglot writes it as Spark's ``GET_JSON_OBJECT``, which unquotes text and gives NULL for a JSON null
(that is DuckDB's ``->>``); here it is the JSON of Spark's VARIANT at that path. ``CAST(text AS JSON)`` is the
text itself (sqlglot writes ``TO_JSON``, which Spark refuses for a text); of a struct, list or map it is their
JSON, with NULL fields kept as DuckDB's ``TO_JSON`` keeps them (Spark's leaves them out). ``JSON_OBJECT`` and
``JSON_ARRAY`` build that JSON (a list's values each of its own type), ``JSON_ARRAY_LENGTH(j, path)`` counts
the list at ``path``, ``JSON_VALID`` says whether a text parses.

>>> import sqlglot
>>> q = sqlglot.parse_one("SELECT j -> 'b', CAST(s AS JSON) ->> 'a', JSON_OBJECT('x', x) FROM t", read="duckdb")
>>> for node in list(q.find_all(exp.JSONExtract, exp.Cast, exp.JSONObject)):
...     _ = node.replace(json_function(node) or node)
>>> q.sql("spark")
"SELECT TO_JSON(VARIANT_GET(PARSE_JSON(j), '$.b', 'variant')), GET_JSON_OBJECT(s, '$.a'), \
TO_JSON(NAMED_STRUCT('x', x), MAP('ignoreNullFields', 'false')) FROM t"
"""

from __future__ import annotations

from sqlglot import exp

from incremental_assets.load.duckdb_types import is_list, shown_type

_T = exp.DataType.Type
_NESTED = {_T.STRUCT, _T.ARRAY, _T.MAP}


def json_function(node: exp.Expr) -> exp.Expr | None:
    """The Spark expression of a DuckDB JSON function or cast (None: not one, or kept as written)."""
    if isinstance(node, exp.JSONExtract):
        path = node.expression
        text = path.sql(dialect="spark") if path is not None else ""
        if not text.startswith("'"):
            return None  # a path Spark writes otherwise: kept as sqlglot writes it
        parsed = _call("PARSE_JSON", node.this.copy())
        return _call(
            "TO_JSON", _call("VARIANT_GET", parsed, exp.Literal.string(text[1:-1]), exp.Literal.string("variant"))
        )
    if isinstance(node, exp.Cast) and node.to.this == _T.JSON:
        kind = shown_type(node.this)
        nested = (
            isinstance(node.this, (exp.Struct, exp.Map))
            or is_list(node.this)
            or kind is not None
            and kind.this in _NESTED
        )
        return _as_json(node.this.copy()) if nested else node.this.copy()
    if isinstance(node, exp.JSONObject):
        pairs = node.expressions
        if not all(isinstance(p, exp.JSONKeyValue) and isinstance(p.this, exp.Literal) for p in pairs):
            return None
        return _as_json(_call("NAMED_STRUCT", *[part.copy() for p in pairs for part in (p.this, p.expression)]))
    if isinstance(node, exp.JSONArray):  # each value's own JSON: a Spark array would take one type for all
        parts = [_value_json(e.copy()) for e in node.expressions]
        return exp.Concat(expressions=[exp.Literal.string("["), _call("CONCAT_WS", exp.Literal.string(","), *parts),
                                       exp.Literal.string("]")])  # fmt: skip
    if isinstance(node, exp.Anonymous):
        return _json_call(node.name.upper(), node.expressions)
    return None


def _json_call(name: str, args: list[exp.Expr]) -> exp.Expr | None:
    if name == "TO_JSON" and len(args) == 1:
        return _as_json(args[0].copy())
    if name == "JSON_ARRAY_LENGTH" and len(args) == 2:
        return _call("JSON_ARRAY_LENGTH", _call("GET_JSON_OBJECT", args[0].copy(), args[1].copy()))
    if name == "JSON_VALID" and len(args) == 1:
        parsed = exp.Not(this=exp.Is(this=_call("TRY_PARSE_JSON", args[0].copy()), expression=exp.Null()))
        return exp.If(this=exp.Is(this=args[0].copy(), expression=exp.Null()), true=exp.Null(), false=parsed)
    return None


def _as_json(value: exp.Expr) -> exp.Expr:
    """Spark's ``TO_JSON`` of a struct, list or map, keeping NULL fields (``{"x":null}``) as DuckDB does."""
    keep = _call("MAP", exp.Literal.string("ignoreNullFields"), exp.Literal.string("false"))
    return _call("TO_JSON", value, keep)


def _value_json(value: exp.Expr) -> exp.Expr:
    """The JSON of one value of any type: Spark's of ``{"v": value}`` less its ``{"v":`` and ``}``."""
    wrapped = _as_json(_call("NAMED_STRUCT", exp.Literal.string("v"), value))
    length = exp.Sub(this=_call("LENGTH", wrapped.copy()), expression=exp.Literal.number(6))
    return exp.Substring(this=wrapped, start=exp.Literal.number(6), length=length)


def _call(name: str, *args: exp.Expr) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))
