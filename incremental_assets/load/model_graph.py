"""Whole-project passes over the loaded models: embedded models inlined into their readers, default starts,
and the order in which models are built."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Mapping

from sqlglot import exp

from incremental_assets.errors import ModelFileError, ProjectError
from incremental_assets.load.query import table_name, table_references
from incremental_assets.model import clock
from incremental_assets.model.kinds import Embedded
from incremental_assets.model.sql_model import SqlModel


def default_starts(models: Mapping[str, SqlModel], now: datetime | None = None) -> dict[str, SqlModel]:
    """Give every incremental model without a start SQLMesh's default: the earliest start of its upstream
    models (recursively), and at the latest the start of the last complete interval before ``now``
    (load time). Such a derived start does not enter the fingerprint."""
    now = now or clock.now()
    cache: dict[str, datetime | None] = {}

    def start_of(name: str, stack: tuple[str, ...]) -> datetime | None:
        if name in cache or name not in models or name in stack:
            return cache.get(name)
        model = models[name]
        starts = [s for s in (start_of(d, stack + (name,)) for d in model.depends_on if d != name) if s is not None]
        if model.start is not None and not model.derived_start:
            found: datetime | None = model.start
        elif model.is_incremental:
            previous = model.unit.floor(model.unit.floor(now) - timedelta(microseconds=1))
            found = min([previous, *starts])
        else:
            found = min(starts, default=None)
        cache[name] = found
        return found

    out = dict(models)
    for name, model in models.items():
        if model.is_incremental and model.start is None:
            start = model.unit.floor(start_of(name, ()))  # type: ignore[arg-type]  # reason: an incremental model's start is never None
            end = model.end if model.end is None or model.end > start else None
            out[name] = replace(model, start=start, end=end, derived_start=True)
    return out


def inline_embedded(models: Mapping[str, SqlModel]) -> dict[str, SqlModel]:
    """Every model reading an EMBEDDED model gets the embedded query inlined as a derived table.

    The consumer's dependencies become the embedded model's inputs, its fingerprint covers the embedded
    query, and the safety analysis sees through it (a lookback through an embedded model is derived
    on the real source).
    """
    embedded = {n for n, m in models.items() if isinstance(m.kind, Embedded)}
    out = dict(models)

    def expand(model: SqlModel, stack: tuple[str, ...]) -> SqlModel:
        if not embedded & set(model.depends_on):
            return model
        query = model.query.copy()
        ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
        inlined: set[str] = set()
        for table in list(query.find_all(exp.Table)):
            name = table_name(table) if table.name else ""
            if name not in embedded or (not table.db and name in ctes):
                continue
            if name in stack:
                raise ProjectError(
                    [
                        ModelFileError(
                            model.path,
                            table.this.meta.get("line"),
                            "embedded models form a cycle: " + " -> ".join(stack + (name,)),
                        )
                    ]
                )
            inner = expand(models[name], stack + (name,))
            inlined |= {name, *inner.embeds}
            body = inner.query.copy()
            for node in body.walk():  # its constructs are reported against its own file
                node.meta.setdefault("path", str(inner.path))
            alias = exp.TableAlias(this=exp.to_identifier(table.alias or table.name))
            table.replace(exp.Subquery(this=body, alias=alias))
        return replace(
            model,
            query=query,
            references=table_references(query),
            embeds=tuple(sorted(inlined)),
            written_query=model.written_query or model.query,
        )

    for name, model in models.items():
        out[name] = expand(model, (name,))
    return out


def as_written(model: SqlModel) -> SqlModel:
    """The model as its file has it: the EMBEDDED models it reads not inlined."""
    if model.written_query is None:
        return model
    query = model.written_query
    return replace(model, query=query, references=table_references(query), embeds=(), written_query=None)


def topological_order(models: Mapping[str, SqlModel]) -> list[str]:
    deps = {n: [d for d in m.depends_on if d in models and d != n] for n, m in models.items()}
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = path[path.index(name) :] + [name]
            model = models[name]
            raise ProjectError(
                [
                    ModelFileError(
                        model.path,
                        next(
                            (r.line for r in model.references if r.name == cycle[-2] or r.name in cycle),
                            model.query_line,
                        ),
                        "dependency cycle: " + " -> ".join(cycle),
                        hint="break the cycle: a model cannot depend on its own downstream models",
                    )
                ]
            )
        state[name] = 1
        for dep in sorted(deps[name]):
            visit(dep, path + [name])
        state[name] = 2
        order.append(name)

    for name in sorted(models):
        visit(name, [])
    return order
