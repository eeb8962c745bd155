"""The ``sqlmesh`` names a SQLMesh project's Python files import, served while the project loads.

A SQLMesh project's Python files (``config.py``, ``models/*.py``, ``macros/*.py``) import
``from sqlmesh import model, macro, ExecutionContext`` or ``from sqlmesh.core.config import Config, ...``.
A meta path finder serves them, in one of two ways, and nothing outside the ``with`` block:

- :func:`sqlmesh_names` (``config.py`` and Python models): the modules and names of
  :func:`_served_modules`, only when the real package cannot be imported (an installed SQLMesh always
  wins, and :func:`real_model_specs` reads its ``@model`` declarations into what :func:`model` records). Any other
  ``sqlmesh`` name fails the import, and :mod:`.sqlmesh_import_errors` reports it with the file, the line and the
  name: a stand-in never computes a value SQLMesh would compute differently.
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
- SQLMesh's config enums (``AutoCategorizationMode``, ``EnvironmentSuffixTarget``, ``UserRole``, ...) are
  real enums with SQLMesh's members and values; ``sqlmesh.utils.date`` is :mod:`.sqlmesh_dates`.
- The config classes (``Config``, ``ModelDefaultsConfig``, ``GatewayConfig``, ``DuckDBConnectionConfig``,
  notification targets, ``User``, ...) are :class:`Recorded` classes: they keep the keyword arguments
  they were built with as attributes (and copy with ``copy``/``model_copy(update=...)``), so a
  ``config.py`` evaluates to values we can read.

>>> with sqlmesh_names(force=True):
...     from sqlmesh.core.config import Config, ModelDefaultsConfig
...     c = Config(model_defaults=ModelDefaultsConfig(dialect="duckdb"), variables={"x": 1})
>>> plain(c)
{'model_defaults': {'dialect': 'duckdb'}, 'variables': {'x': 1}}
>>> plain(c.copy(update={"variables": {"x": 2}}))["variables"]
{'x': 2}
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
import functools
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


# SQLMesh's kind names that are not ours (KindName), each after the name it follows in SQLMesh's ModelKindName.
_SQLMESH_ONLY_KINDS = {
    "INCREMENTAL_BY_UNIQUE_KEY": ("INCREMENTAL_BY_PARTITION", "INCREMENTAL_UNMANAGED"),
    "SEED": ("EXTERNAL", "CUSTOM", "MANAGED"),
}
_OUR_ONLY_KINDS = {"INCREMENTAL_BY_CURSOR"}


class _NameEnum(str, enum.Enum):
    def __str__(self) -> str:
        return self.value


@functools.cache
def model_kind_name() -> type[enum.Enum]:
    """SQLMesh's ``ModelKindName`` (also this module's ``ModelKindName``): our kind names but our own, with
    SQLMesh's others in place; a member compares equal to its name.

    >>> [k.value for k in model_kind_name()]  # doctest: +NORMALIZE_WHITESPACE
    ['INCREMENTAL_BY_TIME_RANGE', 'INCREMENTAL_BY_UNIQUE_KEY', 'INCREMENTAL_BY_PARTITION', 'INCREMENTAL_UNMANAGED',
     'SCD_TYPE_2', 'SCD_TYPE_2_BY_TIME', 'SCD_TYPE_2_BY_COLUMN', 'FULL', 'VIEW', 'EMBEDDED', 'SEED', 'EXTERNAL',
     'CUSTOM', 'MANAGED']
    >>> kinds = model_kind_name()
    >>> kinds.FULL == "FULL", str(kinds.SEED), kinds("VIEW")
    (True, 'SEED', <ModelKindName.VIEW: 'VIEW'>)
    """
    from incremental_assets.model.kinds import KindName  # not at the top: this module runs alone too

    names = [
        name
        for kind in KindName
        if kind.value not in _OUR_ONLY_KINDS
        for name in (kind.value, *_SQLMESH_ONLY_KINDS.get(kind.value, ()))
    ]
    kinds = _NameEnum(  # type: ignore[call-overload]  # reason: mypy reads Enum's functional API on a subclass as str()
        "ModelKindName", [(name, name) for name in names], module=__name__, qualname="ModelKindName"
    )
    kinds.__doc__ = "SQLMesh's kind names; a member compares equal to its name."
    return kinds


def __getattr__(name: str) -> Any:
    if name == "ModelKindName":
        return model_kind_name()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Recorded:
    """A SQLMesh config class a project file builds: its keyword arguments become attributes, and it
    copies itself as SQLMesh's pydantic models do (``copy(update=...)``, ``model_copy(update=...)``)."""

    def __init__(self, *args: Any, **kwargs: Any):
        self._args = args
        self._fields = kwargs
        for key, value in kwargs.items():
            setattr(self, key, value)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return None  # a field the file did not set

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        return type(self)(*self._args, **{**self._fields, **(update or {})})

    copy = model_copy

    def model_dump(self, **_options: Any) -> dict[str, Any]:
        return plain(self)

    dict = model_dump

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._fields.items())})"


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
        function.__macro_name__ = name  # type: ignore[attr-defined]  # reason: SQLMesh marks its macros so
        return function


class SQL(str):
    """A macro argument annotated ``SQL`` arrives as the SQL text of the expression."""


class ExecutionContext(Recorded):
    """What a Python model's ``execute`` receives as ``context`` (provided by the Python-model runner)."""


# --- config.py and Python models without SQLMesh installed: an explicit set of names ----------------
# Only these names are served; any other ``sqlmesh`` name fails the import (see :mod:`.sqlmesh_import_errors`),
# so a project never computes with a stand-in where SQLMesh would give a value.


class AutoCategorizationMode(enum.Enum):
    FULL = "full"
    SEMI = "semi"
    OFF = "off"


class EnvironmentSuffixTarget(str, enum.Enum):
    SCHEMA = "schema"
    TABLE = "table"
    CATALOG = "catalog"


class VirtualEnvironmentMode(str, enum.Enum):
    FULL = "full"
    DEV_ONLY = "dev_only"


class TableNamingConvention(str, enum.Enum):
    SCHEMA_AND_TABLE = "schema_and_table"
    TABLE_ONLY = "table_only"
    HASH_MD5 = "hash_md5"


class UserRole(str, enum.Enum):
    REQUIRED_APPROVER = "required_approver"


class CategorizerConfig(Recorded):
    """How SQLMesh categorizes changes per model type (plans are not ours: recorded, not used)."""

    @classmethod
    def _all(cls, mode: AutoCategorizationMode) -> "CategorizerConfig":
        return cls(external=mode, python=mode, sql=mode, seed=mode)

    @classmethod
    def all_full(cls) -> "CategorizerConfig":
        return cls._all(AutoCategorizationMode.FULL)

    @classmethod
    def all_semi(cls) -> "CategorizerConfig":
        return cls._all(AutoCategorizationMode.SEMI)

    @classmethod
    def all_off(cls) -> "CategorizerConfig":
        return cls._all(AutoCategorizationMode.OFF)


def _recorded(*names: str) -> dict[str, type]:
    return {name: type(name, (Recorded,), {"__module__": __name__}) for name in names}


_CONNECTIONS = _recorded(
    *(
        f"{engine}ConnectionConfig"
        for engine in (
            "Athena",
            "BigQuery",
            "ClickHouse",
            "Databricks",
            "DuckDB",
            "Fabric",
            "GCPPostgres",
            "MSSQL",
            "MotherDuck",
            "MySQL",
            "Postgres",
            "Redshift",
            "RisingWave",
            "Snowflake",
            "Spark",
            "StarRocks",
            "Trino",
            "AzureSQL",
        )
    )
)
_CONFIGS = {
    **_recorded(
        "Config",
        "ModelDefaultsConfig",
        "GatewayConfig",
        "PlanConfig",
        "LinterConfig",
        "FormatConfig",
        "UIConfig",
        "RunConfig",
        "MigrationConfig",
        "JanitorConfig",
        "NameInferenceConfig",
        "BuiltInSchedulerConfig",
        "DbtConfig",
    ),
    "CategorizerConfig": CategorizerConfig,
    "AutoCategorizationMode": AutoCategorizationMode,
    "EnvironmentSuffixTarget": EnvironmentSuffixTarget,
    "TableNamingConvention": TableNamingConvention,
}
_NOTIFICATIONS = _recorded(
    "BasicSMTPNotificationTarget",
    "ConsoleNotificationTarget",
    "SlackApiNotificationTarget",
    "SlackWebhookNotificationTarget",
)


def _served_modules() -> dict[str, dict[str, Any]]:
    """Module path -> the names :func:`sqlmesh_names` serves from it."""
    from incremental_assets.load import sqlmesh_dates  # not at the top: this module runs alone too

    common = {
        "EnvironmentSuffixTarget": EnvironmentSuffixTarget,
        "VirtualEnvironmentMode": VirtualEnvironmentMode,
        "TableNamingConvention": TableNamingConvention,
    }
    kinds = {
        "ModelKindName": model_kind_name(),
        **_recorded(
            "IncrementalByTimeRangeKind", "TimeColumn", "FullKind", "ViewKind", "IncrementalByUniqueKeyKind", "SeedKind"
        ),
    }
    return {
        ROOT: {"model": model, "macro": macro, "SQL": SQL, "ExecutionContext": ExecutionContext},
        ROOT + ".core": {},
        ROOT + ".core.config": {**_CONFIGS, **_CONNECTIONS},
        ROOT + ".core.config.common": common,
        ROOT + ".core.config.categorizer": {
            "AutoCategorizationMode": AutoCategorizationMode,
            "CategorizerConfig": CategorizerConfig,
        },
        ROOT + ".core.config.connection": dict(_CONNECTIONS),
        ROOT + ".core.config.gateway": {"GatewayConfig": _CONFIGS["GatewayConfig"]},
        ROOT + ".core.config.linter": {"LinterConfig": _CONFIGS["LinterConfig"]},
        ROOT + ".core.config.model": {"ModelDefaultsConfig": _CONFIGS["ModelDefaultsConfig"]},
        ROOT + ".core.config.plan": {"PlanConfig": _CONFIGS["PlanConfig"]},
        ROOT + ".core.config.root": {"Config": _CONFIGS["Config"]},
        ROOT + ".core.config.scheduler": {"BuiltInSchedulerConfig": _CONFIGS["BuiltInSchedulerConfig"]},
        ROOT + ".core.notification_target": dict(_NOTIFICATIONS),
        ROOT + ".core.user": {"User": _recorded("User")["User"], "UserRole": UserRole},
        ROOT + ".core.context": {"ExecutionContext": ExecutionContext},
        ROOT + ".core.macros": {
            "macro": macro,
            "SQL": SQL,
            "MacroEvaluator": _recorded("MacroEvaluator")["MacroEvaluator"],
        },
        ROOT + ".core.model": {"model": model, **kinds},
        ROOT + ".core.model.kind": kinds,
        ROOT + ".utils": {},
        ROOT + ".utils.date": sqlmesh_dates.EXPORTS,
    }


class _ExportFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the modules of a table {module path: {name: value}}; any other ``sqlmesh.*`` module is not found."""

    def __init__(self, exports: dict[str, dict[str, Any]]) -> None:
        self.exports = exports

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in self.exports:
            package = any(other.startswith(fullname + ".") for other in self.exports)
            return importlib.machinery.ModuleSpec(fullname, self, is_package=package)
        if is_sqlmesh_name(fullname):
            raise ModuleNotFoundError(f"No module named '{fullname}'", name=fullname)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__dict__.update(self.exports[module.__name__])
        if module.__spec__ is not None and module.__spec__.submodule_search_locations is not None:
            module.__path__ = []


def real_sqlmesh_installed() -> bool:
    """Whether the real SQLMesh package is importable here (it then serves its own names)."""
    loaded = sys.modules.get(ROOT)
    if loaded is not None:
        return not isinstance(getattr(loaded.__spec__, "loader", None), _ExportFinder)
    return importlib.util.find_spec(ROOT) is not None


def is_sqlmesh_name(name: str) -> bool:
    return name == ROOT or name.startswith(ROOT + ".")


@contextmanager
def _served_by(finder: importlib.abc.MetaPathFinder) -> Iterator[None]:
    """``finder`` serves the ``sqlmesh`` modules inside; the ones imported before are put back after."""
    with _LOCK:
        hidden = {name: sys.modules.pop(name) for name in [n for n in sys.modules if is_sqlmesh_name(n)]}
        sys.meta_path.insert(0, finder)
        try:
            yield
        finally:
            sys.meta_path.remove(finder)
            for name in [n for n in sys.modules if is_sqlmesh_name(n)]:
                del sys.modules[name]
            sys.modules.update(hidden)


@contextmanager
def sqlmesh_names(*, force: bool = False) -> Iterator[None]:
    """Serve ``sqlmesh`` names while loading project files, unless SQLMesh is installed (or ``force``)."""
    if real_sqlmesh_installed() and not force:
        yield
        return
    with _served_by(_ExportFinder(_served_modules())):
        yield


# --- macros/*.py: our MacroEvaluator, whether or not SQLMesh is installed ---------------------------


def macro_exports() -> dict[str, dict[str, Any]]:
    """Module path -> the names it serves to macro files. Packages (a path that is a prefix of another)
    get an empty ``__path__``."""
    from incremental_assets.load.macros.evaluator import MacroEvaluator  # not at the top: this module runs alone too

    return {
        ROOT: {
            "macro": macro,
            "SQL": SQL,
            "MacroEvaluator": MacroEvaluator,
            "model": model,
            "ExecutionContext": ExecutionContext,
        },
        ROOT + ".core": {},
        ROOT + ".core.macros": {"macro": macro, "SQL": SQL, "MacroEvaluator": MacroEvaluator},
        ROOT + ".core.model": {"model": model},
        ROOT + ".core.context": {"ExecutionContext": ExecutionContext},
    }


class _MacroFinder(_ExportFinder):
    def __init__(self) -> None:
        super().__init__(macro_exports())

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if is_sqlmesh_name(fullname) and fullname not in self.exports:
            raise ImportError(
                f"{fullname} is not available: a SQLMesh project here may import only "
                + ", ".join(f"{m} ({', '.join(sorted(v))})" for m, v in self.exports.items() if v),
                name=fullname,
            )
        return super().find_spec(fullname, path, target)


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
        kwargs = {k: _as_declared(v) for k, v in (getattr(entry, "kwargs", None) or {}).items()}
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


def _as_declared(value: Any) -> Any:
    """A value SQLMesh's classes validated, as the user wrote it: a kind or ``TimeColumn`` object as a dict of
    the fields it was given (a kind with its ``name``), a column expression as its name, a list as a list."""
    from sqlglot import exp

    fields_set = getattr(value, "model_fields_set", None)
    if isinstance(fields_set, (set, frozenset)):
        fields = {f: _as_declared(getattr(value, f)) for f in sorted(fields_set)}
        name = getattr(value, "name", None)
        return {"name": name, **fields} if isinstance(name, enum.Enum) else fields
    if isinstance(value, (exp.Column, exp.Identifier)):
        return value.name
    if isinstance(value, (exp.Tuple, exp.Array)):
        return [_as_declared(v) for v in value.expressions]
    if isinstance(value, exp.Literal):
        return value.to_py()
    if isinstance(value, list):
        return [_as_declared(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_declared(v) for k, v in value.items()}
    return value
