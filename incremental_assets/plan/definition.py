"""The definition a model's table is built with, as a JSON value kept with the table.

It holds what a later load needs to say what a change costs (see :mod:`.changes`): the normalized
query, the kind and its settings, the output columns (type, outer projection, the upstream columns each
reads), the upstream columns filters, joins and grouping read, the query without its outer projections
(``shape``), and the metadata that decides no row (description, owner, tags, audits). It is bounded by
the model's own size: one entry per output column, no history.

>>> import tempfile, pathlib
>>> from incremental_assets.load.model_file import parse_model_file
>>> p = pathlib.Path(tempfile.mkdtemp()) / "m.sql"
>>> _ = p.write_text("MODEL (name a.b, kind FULL, owner ann); SELECT k, SUM(v) AS n FROM raw.c WHERE v > 0 GROUP BY k")
>>> d = model_definition(parse_model_file(p), {"raw.c": {"k": "string", "v": "int"}})
>>> d["columns"]["n"], d["filters"], d["metadata"]["owner"]
({'type': 'bigint', 'sql': 'SUM(c.v)', 'reads': [['raw.c', 'v']]}, [['raw.c', 'k'], ['raw.c', 'v']], 'ann')
"""

from __future__ import annotations

import json
import sys
import weakref
from typing import Any, Mapping

from sqlglot import exp
from sqlglot.errors import SqlglotError

from incremental_assets import analysis as analysis_package
from incremental_assets.analysis.columns import Columns, describe_columns
from incremental_assets.load import macros as macros_package
from incremental_assets.load.cache import ResultCache, cache_folder, code_digest, package_digest, result_key
from incremental_assets.load.macros.render import sample_macros
from incremental_assets.load.macros.window_conditions import first_variant
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel

DEFINITION_FORMAT = 1
UNKNOWN_TYPE = "unknown"


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _sql(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_sql(v) for v in value]
    return value.sql("spark") if isinstance(value, exp.Expression) else value


def _metadata(model: SqlModel) -> dict[str, Any]:
    audits = [{"name": a.name, "args": {k: _sql(v) for k, v in sorted(a.args.items())}} for a in model.audits]
    return _json(
        {
            "description": model.description,
            "owner": model.owner,
            "tags": sorted(model.tags),
            "column_descriptions": dict(model.column_descriptions),
            "audits": audits + [{"inline": a.name} for a in model.inline_audits],
            "cron": model.cron,
            "grains": list(model.grains),
            "start": model.relative_start
            or (model.start.isoformat() if model.start and not model.derived_start else None),
        }
    )


def model_definition(
    model: SqlModel, known: Mapping[str, Mapping[str, str]], columns: Columns | None = None
) -> dict[str, Any]:
    """The definition of ``model`` over the upstream columns ``known`` (``{table: {column: type}}``)."""
    cols = (
        columns
        if columns is not None
        else describe_columns(first_variant(model.query), known, macros=sample_macros(model))
    )
    names = list(model.columns) or list(cols.types)
    data = _json(model.data_payload())
    return {
        "format": DEFINITION_FORMAT,
        "model": model.name,
        "fingerprint": model.fingerprint,
        "query": data.pop("query"),
        "kind": data.pop("kind"),
        "settings": data,
        "columns": {
            name: {
                "type": model.columns.get(name) or cols.types.get(name) or UNKNOWN_TYPE,
                "sql": cols.expressions.get(name),
                "reads": [list(pair) for pair in cols.lineage.get(name, ())],
            }
            for name in names
        },
        "filters": None if cols.filters is None else [list(pair) for pair in cols.filters],
        "shape": cols.shape,
        "metadata": _metadata(model),
    }


_BY_PROJECT: "weakref.WeakKeyDictionary[Project, dict[str, dict[str, Any] | None]]" = weakref.WeakKeyDictionary()


_CACHES: "weakref.WeakKeyDictionary[Project, ResultCache]" = weakref.WeakKeyDictionary()


def _known(project: Project) -> dict[str, Mapping[str, str]]:
    return {s.name: dict(s.columns) for s in project.sources.values() if s.columns}


def definition_of(project: Project, name: str) -> dict[str, Any] | None:
    """One model's definition: only it and its upstream models are analysed (each once per loaded
    project), their column types feeding its inference."""
    done = _BY_PROJECT.setdefault(project, {})
    if name in done or name not in project.models:
        return done.get(name)
    needed, stack = set(), [name]
    while stack:
        current = stack.pop()
        if current in needed or current not in project.models:
            continue
        needed.add(current)
        stack.extend(project.models[current].depends_on)
    known = _known(project)
    cache = _CACHES.get(project)
    if cache is None:
        cache = _CACHES[project] = ResultCache(cache_folder(project.directory), "definition-columns")
    for model in project.ordered():
        if model.name in needed and model.name not in done:
            try:
                upstream = {**known, **_types(done)}
                done[model.name] = model_definition(model, upstream, _columns(model, upstream, cache))
            except (SqlglotError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
                # A definition that cannot be described is not kept: a later plan then finds none and
                # treats a change of the model as breaking, which is never wrong; the run goes on.
                done[model.name] = None
    cache.save()
    return done.get(name)


def columns_key(model: SqlModel, known: Mapping[str, Mapping[str, str]], *code: str) -> str:
    """The cache key of an analysis of the model's columns by ``code`` (digests of the analysing modules): the
    model's definition (its fingerprint: the query after macros, kind, columns), what its sample macro values
    are made of, and the columns of every table its query reads."""
    read = sorted({".".join(p.name for p in t.parts).lower() for t in model.query.find_all(exp.Table)})
    return result_key(
        *code,
        model.fingerprint,
        model.name,
        [model.start, model.unit.name, model.is_incremental],
        [(t, sorted(known[t].items())) for t in read if t in known],
    )


def _columns(model: SqlModel, known: Mapping[str, Mapping[str, str]], cache: ResultCache) -> Columns:
    """The model's analysed columns, kept in the project's cache under what they are computed from: the
    analysing code, the model's definition (its fingerprint), its sample macro values and the columns of every
    table its query reads."""
    key = columns_key(
        model, known, package_digest(analysis_package, macros_package), code_digest(sys.modules[__name__])
    )
    found = cache.get(key)
    if found is None:
        cols = describe_columns(first_variant(model.query), known, macros=sample_macros(model))
        lineage = {c: [list(pair) for pair in pairs] for c, pairs in cols.lineage.items()}
        filters = None if cols.filters is None else [list(pair) for pair in cols.filters]
        found = cache.put(key, [cols.types, lineage, filters, cols.expressions, cols.shape])
    types, lineage, filters, expressions, shape = found
    return Columns(
        types,
        {c: tuple((t, n) for t, n in pairs) for c, pairs in lineage.items()},
        None if filters is None else tuple((t, n) for t, n in filters),
        expressions,
        shape,
    )


def _types(done: Mapping[str, Mapping[str, Any] | None]) -> dict[str, dict[str, str]]:
    return {n: {c: v["type"] for c, v in d["columns"].items()} for n, d in done.items() if d is not None}


def project_definitions(project: Project) -> dict[str, dict[str, Any]]:
    """Every model's definition, upstreams first: each model's column types feed its downstream models'
    inference (sources declare theirs). Made once per loaded project."""
    for model in project.ordered():
        definition_of(project, model.name)
    done = _BY_PROJECT.get(project, {})
    return {m.name: d for m in project.ordered() if (d := done.get(m.name)) is not None}
