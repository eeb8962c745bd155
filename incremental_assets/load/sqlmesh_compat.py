"""The ``sqlmesh`` names a SQLMesh project's Python files import, served while the project loads.

A project's ``macros/*.py`` (and Python models) say ``from sqlmesh import macro`` or
``from sqlmesh.core.macros import MacroEvaluator``. Inside :func:`sqlmesh_names` those imports resolve to
the objects of :data:`EXPORTS`, whether or not SQLMesh is installed: with it installed its own modules are
set aside for the duration (and put back after), so its classes never mix with ours. Any other
``sqlmesh.*`` module is refused with an ImportError that names it.

To serve a new name, add it to :data:`EXPORTS` under every module path users import it from.

>>> with sqlmesh_names() as registered:
...     from sqlmesh import macro
...     @macro()
...     def add_one(evaluator, x: int):
...         return x + 1
>>> [(name, f.__name__) for name, f in registered.items()]
[('add_one', 'add_one')]
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
import types
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from incremental_assets.load.macro_eval import MacroEvaluator

_LOCK = threading.RLock()
_registry: dict[str, Callable[..., Any]] | None = None


class SQL(str):
    """A macro argument annotated ``SQL`` arrives as the SQL text of the expression."""


class macro:  # noqa: N801 - SQLMesh's name
    """``@macro()`` / ``@macro("name")``: register a Python function as ``@NAME(...)`` (case-insensitive)."""

    def __init__(self, name: str | None = None, **_options: Any):
        self.name = name

    def __call__(self, function: Callable[..., Any]) -> Callable[..., Any]:
        name = (self.name or function.__name__).lower()
        if _registry is not None:
            _registry[name] = function
        function.__macro_name__ = name  # type: ignore[attr-defined]
        return function


class model:  # noqa: N801 - SQLMesh's name
    """``@model(name, ...)`` of a Python model: its options and function, kept for the Python-model loader."""

    def __init__(self, name: str | None = None, **options: Any):
        self.name, self.options = name, options

    def __call__(self, function: Callable[..., Any]) -> Callable[..., Any]:
        function.__model__ = self  # type: ignore[attr-defined]
        return function


class ExecutionContext:
    """What a Python model's ``execute`` receives as ``context`` (provided by the Python-model runner)."""


# module path -> names it serves. Packages (a path that is a prefix of another) get an empty __path__.
EXPORTS: dict[str, dict[str, Any]] = {
    "sqlmesh": {"macro": macro, "SQL": SQL, "MacroEvaluator": MacroEvaluator, "model": model, "ExecutionContext": ExecutionContext},
    "sqlmesh.core": {},
    "sqlmesh.core.macros": {"macro": macro, "SQL": SQL, "MacroEvaluator": MacroEvaluator},
    "sqlmesh.core.model": {"model": model},
    "sqlmesh.core.context": {"ExecutionContext": ExecutionContext},
}


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in EXPORTS:
            package = any(other.startswith(fullname + ".") for other in EXPORTS)
            return importlib.machinery.ModuleSpec(fullname, self, is_package=package)
        if fullname.split(".")[0] == "sqlmesh":
            raise ImportError(
                f"{fullname} is not available: a SQLMesh project here may import only "
                + ", ".join(f"{m} ({', '.join(sorted(v))})" for m, v in EXPORTS.items() if v),
                name=fullname,
            )
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__dict__.update(EXPORTS[module.__name__])
        if module.__spec__ is not None and module.__spec__.submodule_search_locations is not None:
            module.__path__ = []


def _is_sqlmesh(name: str) -> bool:
    return name == "sqlmesh" or name.startswith("sqlmesh.")


@contextmanager
def sqlmesh_names() -> Iterator[dict[str, Callable[..., Any]]]:
    """While inside, ``import sqlmesh`` gives :data:`EXPORTS`; yields the macros registered meanwhile."""
    global _registry
    with _LOCK:
        hidden = {name: sys.modules.pop(name) for name in [n for n in sys.modules if _is_sqlmesh(n)]}
        finder = _Finder()
        sys.meta_path.insert(0, finder)
        previous, _registry = _registry, {}
        registered = _registry
        try:
            yield registered
        finally:
            _registry = previous
            sys.meta_path.remove(finder)
            for name in [n for n in sys.modules if _is_sqlmesh(n)]:
                del sys.modules[name]
            sys.modules.update(hidden)
