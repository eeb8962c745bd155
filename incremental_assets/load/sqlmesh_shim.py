"""SQLMesh's Python names for project files, when SQLMesh itself is not installed.

A SQLMesh project's Python files (``config.py``, ``models/*.py``, ``macros/*.py``) import
``from sqlmesh import model, macro, ExecutionContext`` or ``from sqlmesh.core.config import Config, ...``.
While such a file is loaded (:func:`sqlmesh_names`), a meta path finder serves every ``sqlmesh`` and
``sqlmesh.*`` module from here, but only when the real package cannot be imported: an installed SQLMesh
always wins, and outside the ``with`` block nothing is served at all.

What the served names do:

- ``model(name, kind=..., columns=..., ...)`` records the decorated function and its keyword
  arguments in :data:`MODEL_REGISTRY`; ``macro(name=None)`` records a macro function in
  :data:`MACRO_REGISTRY`; both return the function unchanged.
- ``ModelKindName`` is the enum of SQLMesh's kind names (its members are plain strings).
- Every other name (``Config``, ``ModelDefaultsConfig``, ``GatewayConfig``, ``DuckDBConnectionConfig``,
  ``ExecutionContext``, ``MacroEvaluator``, ...) is a :class:`Recorded` class: it keeps the keyword
  arguments it was built with as attributes, so a ``config.py`` evaluates to values we can read.

>>> with sqlmesh_names(force=True):
...     from sqlmesh.core.config import Config, ModelDefaultsConfig
...     c = Config(model_defaults=ModelDefaultsConfig(dialect="duckdb"), variables={"x": 1})
>>> plain(c)
{'model_defaults': {'dialect': 'duckdb'}, 'variables': {'x': 1}}
"""

from __future__ import annotations

import enum
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

ROOT = "sqlmesh"


class ModelKindName(str, enum.Enum):
    """SQLMesh's kind names; a member compares equal to its name."""

    INCREMENTAL_BY_TIME_RANGE = "INCREMENTAL_BY_TIME_RANGE"
    INCREMENTAL_BY_UNIQUE_KEY = "INCREMENTAL_BY_UNIQUE_KEY"
    INCREMENTAL_BY_PARTITION = "INCREMENTAL_BY_PARTITION"
    INCREMENTAL_UNMANAGED = "INCREMENTAL_UNMANAGED"
    SCD_TYPE_2 = "SCD_TYPE_2"
    SCD_TYPE_2_BY_TIME = "SCD_TYPE_2_BY_TIME"
    SCD_TYPE_2_BY_COLUMN = "SCD_TYPE_2_BY_COLUMN"
    FULL = "FULL"
    VIEW = "VIEW"
    EMBEDDED = "EMBEDDED"
    SEED = "SEED"
    EXTERNAL = "EXTERNAL"
    CUSTOM = "CUSTOM"
    MANAGED = "MANAGED"

    def __str__(self) -> str:
        return self.value


class Recorded:
    """Any SQLMesh class a project file builds: its arguments become attributes."""

    def __init__(self, *args: Any, **kwargs: Any):
        self._args = args
        self._fields = kwargs
        for key, value in kwargs.items():
            setattr(self, key, value)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return None


@dataclass
class ModelSpec:
    """One ``@model(...)`` declaration: its name, keyword arguments and the decorated function."""

    name: str
    kwargs: dict[str, Any]
    func: Callable[..., Any] | None = None
    module: str | None = None


@dataclass
class MacroSpec:
    """One ``@macro()`` function and the name it is called by (the function's name unless given)."""

    name: str
    func: Callable[..., Any]
    module: str | None = None


MODEL_REGISTRY: list[ModelSpec] = []
MACRO_REGISTRY: list[MacroSpec] = []


def model(name: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """SQLMesh's ``@model(...)`` decorator: record the declaration, return the function unchanged."""
    spec = ModelSpec(str(name), dict(kwargs))

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        spec.func, spec.module = func, getattr(func, "__module__", None)
        MODEL_REGISTRY.append(spec)
        return func

    return decorate


def macro(name: str | None = None, **_: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """SQLMesh's ``@macro()`` decorator: record the function under its (lower-cased) name."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        MACRO_REGISTRY.append(MacroSpec((name or func.__name__).lower(), func, getattr(func, "__module__", None)))
        return func

    if callable(name):  # used bare: @macro
        func, name = name, None
        return decorate(func)  # type: ignore[return-value]
    return decorate


_NAMED = {"model": model, "macro": macro, "ModelKindName": ModelKindName}


class _ShimModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _NAMED:
            return _NAMED[name]
        recorded = type(name, (Recorded,), {"__module__": self.__name__})
        setattr(self, name, recorded)
        return recorded


class _ShimLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _ShimModule(spec.name)
        module.__path__ = []  # a package: every sqlmesh.* submodule is served too
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _ShimFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != ROOT and not fullname.startswith(ROOT + "."):
            return None
        return importlib.machinery.ModuleSpec(fullname, _ShimLoader(), is_package=True)


def real_sqlmesh_installed() -> bool:
    """Whether the real SQLMesh package is importable here (it then serves its own names)."""
    loaded = sys.modules.get(ROOT)
    if loaded is not None:
        return not isinstance(loaded, _ShimModule)
    return importlib.util.find_spec(ROOT) is not None


@contextmanager
def sqlmesh_names(*, force: bool = False) -> Iterator[None]:
    """Serve ``sqlmesh`` names while loading project files, unless SQLMesh is installed (or ``force``)."""
    if real_sqlmesh_installed() and not force:
        yield
        return
    saved = {k: v for k, v in sys.modules.items() if k == ROOT or k.startswith(ROOT + ".")}
    for key in saved:
        del sys.modules[key]
    finder = _ShimFinder()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for key in [k for k in sys.modules if k == ROOT or k.startswith(ROOT + ".")]:
            del sys.modules[key]
        sys.modules.update(saved)


def plain(value: Any) -> Any:
    """A config value as plain dicts, lists and scalars (recorded classes, pydantic models, enums)."""
    if isinstance(value, Recorded):
        return {k: plain(v) for k, v in value._fields.items()}
    if isinstance(value, enum.Enum):
        return value.value
    if hasattr(value, "model_dump") and callable(value.model_dump):
        return plain(value.model_dump(exclude_unset=True))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def real_model_specs(module_name: str) -> list[ModelSpec]:
    """``@model`` declarations the real SQLMesh recorded for one module (when it is installed)."""
    try:
        from sqlmesh.core.model.decorator import model as real_model  # type: ignore[import-not-found]
    except ImportError:
        return []
    registry = getattr(real_model, "registry", None)
    entries = registry().values() if callable(registry) else []
    out = []
    for entry in entries:
        func = getattr(entry, "func", None)
        if func is not None and getattr(func, "__module__", None) == module_name:
            kwargs = dict(getattr(entry, "kwargs", {}) or {})
            kwargs.setdefault("columns", getattr(entry, "columns", None))
            out.append(ModelSpec(str(entry.name), kwargs, func, module_name))
    return out
