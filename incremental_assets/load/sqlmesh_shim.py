"""The ``sqlmesh`` names a SQLMesh project's Python files import, served while the project loads.

A SQLMesh project's Python files (``config.py``, ``models/*.py``, ``macros/*.py``) import
``from sqlmesh import model, macro, ExecutionContext`` or ``from sqlmesh.core.config import Config, ...``.
A meta path finder serves them, in one of two ways, and nothing outside the ``with`` block:

- :func:`sqlmesh_names` (``config.py`` and Python models): every ``sqlmesh`` and ``sqlmesh.*`` module is
  served from here, but only when the real package cannot be imported: an installed SQLMesh always wins.
- :func:`macro_names` (``macros/*.py``): the names of :data:`MACRO_EXPORTS` are served whether or not
  SQLMesh is installed (an installed one is set aside meanwhile and put back after, so its classes never
  mix with our :class:`MacroEvaluator`); any other ``sqlmesh.*`` module is refused with an ImportError
  naming it. To serve a new name, add it under every module path users import it from.

This module imports nothing of ours at its top, so it also runs alone (next to an installed SQLMesh).

What the served names do:

- ``model(name, kind=..., columns=..., ...)`` records the decorated function and its keyword
  arguments in :data:`MODEL_REGISTRY`; ``macro(name=None)`` registers a macro function with the
  :func:`macro_names` block it is loaded in; both return the function unchanged.
- ``ModelKindName`` is the enum of SQLMesh's kind names (its members are plain strings).
- Every other name (``Config``, ``ModelDefaultsConfig``, ``GatewayConfig``, ``DuckDBConnectionConfig``,
  ``ExecutionContext``, ``MacroEvaluator``, ...) is a :class:`Recorded` class: it keeps the keyword
  arguments it was built with as attributes, so a ``config.py`` evaluates to values we can read.

>>> with sqlmesh_names(force=True):
...     from sqlmesh.core.config import Config, ModelDefaultsConfig
...     c = Config(model_defaults=ModelDefaultsConfig(dialect="duckdb"), variables={"x": 1})
>>> plain(c)
{'model_defaults': {'dialect': 'duckdb'}, 'variables': {'x': 1}}
>>> with macro_names() as registered:
...     from sqlmesh import macro
...     @macro()
...     def add_one(evaluator, x: int):
...         return x + 1
>>> [(name, f.__name__) for name, f in registered.items()]
[('add_one', 'add_one')]
"""

from __future__ import annotations

import enum
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
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


MODEL_REGISTRY: list[ModelSpec] = []
_LOCK = threading.RLock()
_macro_registry: dict[str, Callable[..., Any]] | None = None  # the macros of the macro_names block loading


def model(name: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """SQLMesh's ``@model(...)`` decorator: record the declaration, return the function unchanged."""
    spec = ModelSpec(str(name), dict(kwargs))

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        spec.func, spec.module = func, getattr(func, "__module__", None)
        MODEL_REGISTRY.append(spec)
        return func

    return decorate


class macro:  # noqa: N801 - SQLMesh's name
    """``@macro()`` / ``@macro("name")`` / ``@macro``: register a Python function as ``@NAME(...)``
    (case-insensitive) with the :func:`macro_names` block loading it; the function is returned unchanged."""

    def __new__(cls, name: Any = None, **options: Any) -> Any:
        if callable(name):  # used bare: @macro
            return cls()(name)
        return super().__new__(cls)

    def __init__(self, name: str | None = None, **_options: Any):
        self.name = name

    def __call__(self, function: Callable[..., Any]) -> Callable[..., Any]:
        name = (self.name or function.__name__).lower()
        if _macro_registry is not None:
            _macro_registry[name] = function
        function.__macro_name__ = name  # type: ignore[attr-defined]
        return function


class SQL(str):
    """A macro argument annotated ``SQL`` arrives as the SQL text of the expression."""


class ExecutionContext(Recorded):
    """What a Python model's ``execute`` receives as ``context`` (provided by the Python-model runner)."""


_NAMED = {"model": model, "macro": macro, "ModelKindName": ModelKindName, "SQL": SQL, "ExecutionContext": ExecutionContext}


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


def _is_sqlmesh(name: str) -> bool:
    return name == ROOT or name.startswith(ROOT + ".")


@contextmanager
def _served_by(finder: importlib.abc.MetaPathFinder) -> Iterator[None]:
    """``finder`` serves the ``sqlmesh`` modules inside; the ones imported before are put back after."""
    with _LOCK:
        hidden = {name: sys.modules.pop(name) for name in [n for n in sys.modules if _is_sqlmesh(n)]}
        sys.meta_path.insert(0, finder)
        try:
            yield
        finally:
            sys.meta_path.remove(finder)
            for name in [n for n in sys.modules if _is_sqlmesh(n)]:
                del sys.modules[name]
            sys.modules.update(hidden)


@contextmanager
def sqlmesh_names(*, force: bool = False) -> Iterator[None]:
    """Serve ``sqlmesh`` names while loading project files, unless SQLMesh is installed (or ``force``)."""
    if real_sqlmesh_installed() and not force:
        yield
        return
    with _served_by(_ShimFinder()):
        yield


# --- macros/*.py: our MacroEvaluator, whether or not SQLMesh is installed ---------------------------


def macro_exports() -> dict[str, dict[str, Any]]:
    """Module path -> the names it serves to macro files. Packages (a path that is a prefix of another)
    get an empty ``__path__``."""
    from incremental_assets.load.macro_eval import MacroEvaluator  # not at the top: this module runs alone too

    return {
        ROOT: {"macro": macro, "SQL": SQL, "MacroEvaluator": MacroEvaluator, "model": model, "ExecutionContext": ExecutionContext},
        ROOT + ".core": {},
        ROOT + ".core.macros": {"macro": macro, "SQL": SQL, "MacroEvaluator": MacroEvaluator},
        ROOT + ".core.model": {"model": model},
        ROOT + ".core.context": {"ExecutionContext": ExecutionContext},
    }


class _MacroFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self) -> None:
        self.exports = macro_exports()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in self.exports:
            package = any(other.startswith(fullname + ".") for other in self.exports)
            return importlib.machinery.ModuleSpec(fullname, self, is_package=package)
        if _is_sqlmesh(fullname):
            raise ImportError(
                f"{fullname} is not available: a SQLMesh project here may import only "
                + ", ".join(f"{m} ({', '.join(sorted(v))})" for m, v in self.exports.items() if v),
                name=fullname,
            )
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__dict__.update(self.exports[module.__name__])
        if module.__spec__ is not None and module.__spec__.submodule_search_locations is not None:
            module.__path__ = []


@contextmanager
def macro_names() -> Iterator[dict[str, Callable[..., Any]]]:
    """While inside, ``import sqlmesh`` gives :func:`macro_exports`; yields the macros registered meanwhile."""
    global _macro_registry
    with _served_by(_MacroFinder()):
        previous, _macro_registry = _macro_registry, {}
        registered = _macro_registry
        try:
            yield registered
        finally:
            _macro_registry = previous


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
