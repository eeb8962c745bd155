"""The ``@model`` declarations the real SQLMesh recorded, as the user wrote them."""

from __future__ import annotations

import enum
from typing import Any

from incremental_assets.load.sqlmesh_shim import ModelSpec


def real_model_specs(module_name: str) -> list[ModelSpec]:
    """``@model`` declarations the real SQLMesh recorded for one module (when it is installed), as the
    stand-in :func:`model` records them: the decorator's keyword arguments as written (kind objects back to
    their fields, ``is_sql`` among them, an audit without arguments as its name). They leave SQLMesh's
    registry, so a project loaded again after an edit registers its models afresh."""
    try:
        from sqlmesh.core.model.decorator import model as real_model
    except ImportError:
        return []
    registry = real_model.registry()
    out = []
    for key, entry in list(registry.items()):
        func = getattr(entry, "func", None)
        if func is None or getattr(func, "__module__", None) != module_name:
            continue
        kwargs = {k: as_declared(v) for k, v in (getattr(entry, "kwargs", None) or {}).items()}
        kwargs["audits"] = [
            name if isinstance(name, str) and not args else (name, args) for name, args in kwargs.get("audits") or ()
        ]
        for key_ in ("audits", "signals"):
            if not kwargs.get(key_):
                kwargs.pop(key_, None)
        if getattr(entry, "is_sql", False):
            kwargs["is_sql"] = True
        out.append(ModelSpec(str(entry.name), kwargs, func, module_name))
        del registry[key]
    return out


def as_declared(value: Any) -> Any:
    """A value SQLMesh's classes validated, as the user wrote it: a kind or ``TimeColumn`` object as a dict of
    the fields it was given (a kind with its ``name``), a column expression as its name, a list as a list."""
    from sqlglot import exp

    fields_set = getattr(value, "model_fields_set", None)
    if isinstance(fields_set, (set, frozenset)):
        fields = {f: as_declared(getattr(value, f)) for f in sorted(fields_set)}
        name = getattr(value, "name", None)
        return {"name": name, **fields} if isinstance(name, enum.Enum) else fields
    if isinstance(value, (exp.Column, exp.Identifier)):
        return value.name
    if isinstance(value, (exp.Tuple, exp.Array)):
        return [as_declared(v) for v in value.expressions]
    if isinstance(value, exp.Literal):
        return value.to_py()
    if isinstance(value, list):
        return [as_declared(v) for v in value]
    if isinstance(value, dict):
        return {k: as_declared(v) for k, v in value.items()}
    return value
