"""A SQLMesh project's ``config.yaml`` / ``config.py``: model defaults, variables, gateways.

What is read:

- ``model_defaults``: ``dialect`` (the dialect every model without its own is written in: its queries
  are transpiled to Spark SQL), ``start``, ``end``, ``cron``, ``owner``, ``kind``, ``enabled``,
  ``interval_unit``, ``tags``, ``audits``: each applies to every model whose header does not set it.
  Other keys (``storage_format``, ``session_properties``, ...) concern SQLMesh's engines and are
  ignored with one log line naming them.
- ``variables`` (and the default gateway's ``variables``, which win): the values of ``@VAR('name')``,
  read by the macro evaluator through :func:`project_variables`.
- ``gateways`` / ``default_gateway`` are not used to connect: where models run is the Spark session of
  ``incremental_assets.yaml``; one log line says so. The selected gateway (``default_gateway``, else the
  first) picks the gateway's ``variables`` and the external models declared for it.
- ``before_all`` / ``after_all``: SQL statements (macros allowed) run on Spark before and after the models
  of a run; the tables and views they create are readable by models.

``config.yaml`` is rendered with Jinja first (``{{ env_var('NAME', 'default') }}``), as SQLMesh does;
``config.py`` is imported with SQLMesh's names served by :mod:`.sqlmesh_shim` when SQLMesh is not
installed, and its ``config`` object is read.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "config.yaml").write_text("model_defaults: {dialect: duckdb, start: 2024-01-01}\\nvariables: {x: 1}")
>>> c = load_sqlmesh_config(d)
>>> c.dialect, dict(c.variables), c.default_properties()["start"]
('duckdb', {'x': 1}, "'2024-01-01'")
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from incremental_assets.errors import ModelFileError
from incremental_assets.load.sqlmesh_import_errors import import_failure
from incremental_assets.load.sqlmesh_shim import plain, sqlmesh_names
from incremental_assets.load.text import read_utf8, yaml_mapping
from incremental_assets.model.settings import user_variable

log = logging.getLogger(__name__)

CONFIG_FILES = ("config.yaml", "config.yml", "config.py")
# model_defaults keys that become MODEL header properties of every model that does not set them.
HEADER_DEFAULTS = ("start", "end", "cron", "owner", "kind", "enabled", "interval_unit", "tags", "audits")
KNOWN_KEYS = {
    "gateways",
    "default_gateway",
    "model_defaults",
    "variables",
    "project",
    "default_connection",
    "default_test_connection",
    "default_scheduler",
    "before_all",
    "after_all",
    "linter",
    "format",
    "ui",
    "plan",
    "migration",
    "run",
    "physical_schema_mapping",
    "environment_suffix_target",
    "model_naming",
    "cicd_bot",
    "users",
    "notification_targets",
    "env_vars",
    "ignore_patterns",
    "time_column_format",
    "infer_python_dependencies",
    "snapshot_ttl",
    "environment_ttl",
    "pinned_environments",
    "default_target_environment",
    "physical_schema_override",
    "log_limit",
    "cache_dir",
    "dbt",
    "janitor",
}


@dataclass(frozen=True)
class SqlmeshConfig:
    """The parts of a SQLMesh project config that decide what models do."""

    path: Path | None = None
    model_defaults: Mapping[str, Any] = field(default_factory=dict)
    variables: Mapping[str, Any] = field(default_factory=dict)
    gateway: str | None = None  # the selected gateway: ``default_gateway``, else the first one
    before_all: tuple[str, ...] = ()  # statements run before the models of a run, in the project dialect
    after_all: tuple[str, ...] = ()
    default_catalog: str | None = None  # the selected gateway's default catalog: `local.s.t` names model s.t

    @property
    def dialect(self) -> str | None:
        value = self.model_defaults.get("dialect")
        return str(value).lower() if value else None

    def default_properties(self) -> dict[str, str]:
        """model_defaults as MODEL header text, per property (e.g. ``{'start': "'2024-01-01'"}``)."""
        return {
            key: _kind_value(value) if key == "kind" else header_text(value)  # `kind: FULL`: a name, not text
            for key in HEADER_DEFAULTS
            if (value := self.model_defaults.get(key)) is not None
        }


def header_text(value: Any) -> str:
    """A config value written as MODEL header text.

    >>> header_text({"name": "INCREMENTAL_BY_TIME_RANGE", "time_column": "ds"})
    'INCREMENTAL_BY_TIME_RANGE (time_column ds)'
    >>> header_text(["a", "b"]), header_text(dt.date(2024, 1, 1)), header_text(True)
    ("['a', 'b']", "'2024-01-01'", 'true')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (dt.date, dt.datetime)):
        return f"'{value.isoformat()}'"
    if isinstance(value, dict) and "name" in value:
        rest = ", ".join(f"{k} {_kind_value(v)}" for k, v in value.items() if k != "name" and v is not None)
        return f"{value['name']} ({rest})" if rest else str(value["name"])
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(header_text(v) for v in value) + "]"
    text = str(value)
    return "'" + text.replace("'", "''") + "'"


def _kind_value(value: Any) -> str:
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        return value
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(_kind_value(v) for v in value) + ")"
    return header_text(value)


def project_variables(project: Any) -> Mapping[str, Any]:
    """The variables a project's models see as ``@VAR('name')`` (config ``variables``), names lower-cased."""
    return getattr(project, "variables", None) or {}


def load_sqlmesh_config(directory: str | Path) -> SqlmeshConfig:
    """Read the project's SQLMesh config, if it has one; errors name the file and the fix."""
    directory = Path(directory)
    present = [directory / name for name in CONFIG_FILES if (directory / name).is_file()]
    if not present:
        return SqlmeshConfig()
    if len(present) > 1:
        raise ModelFileError(
            present[1],
            None,
            f"the project has both {present[0].name} and {present[1].name}",
            hint="keep one config file",
        )
    path = present[0]
    raw = _read_python(path) if path.suffix == ".py" else _read_yaml(path)
    unknown = sorted(set(raw) - KNOWN_KEYS)
    if unknown:  # newer SQLMesh versions add keys: say so, do not refuse the project
        log.warning(
            "%s:%s: config key(s) %s are not known here and not used",
            path,
            _line_of(path, unknown[0]),
            ", ".join(unknown),
        )
    defaults = raw.get("model_defaults") or {}
    if not isinstance(defaults, dict):
        raise ModelFileError(
            path,
            _line_of(path, "model_defaults"),
            "model_defaults must be a mapping",
            hint="e.g. `model_defaults: {dialect: duckdb}`",
        )
    ignored = sorted(set(defaults) - set(HEADER_DEFAULTS) - {"dialect"})
    if ignored:
        log.info("%s: model_defaults %s concern SQLMesh's engines and are not used here", path, ", ".join(ignored))
    if raw.get("gateways"):
        log.info("%s: gateways are not used; models run on the Spark session of incremental_assets.yaml", path)
    return SqlmeshConfig(
        path,
        defaults,
        _variables(raw, path),
        _selected_gateway(raw),
        _statements(raw, "before_all", path),
        _statements(raw, "after_all", path),
        default_catalog(raw),
    )


def default_catalog(raw: Mapping[str, Any]) -> str | None:
    """The catalog SQLMesh puts in front of every model name on the selected gateway, so that a
    three-part name in it (``local.ibis.orders``, as generated SQL often writes) names a model here.

    As SQLMesh's DuckDB connection: the first of ``catalogs``, else the stem of ``database``, else
    ``memory``; other engines: their ``catalog`` (or ``database``) setting.

    >>> default_catalog({"gateways": {"g": {"connection": {"type": "duckdb", "catalogs": {"local": "data/l.duckdb"}}}}})
    'local'
    >>> default_catalog({"gateways": {"g": {"connection": {"type": "duckdb", "database": "db.duckdb"}}}})
    'db'
    >>> default_catalog({"default_connection": {"type": "duckdb"}}), default_catalog({})
    ('memory', None)
    """
    gateways = raw.get("gateways") or {}
    connection: Any = raw.get("default_connection")
    if isinstance(gateways, dict) and gateways:
        name = raw.get("default_gateway") or next(iter(gateways))
        gateway = gateways.get(name) or {}
        connection = gateway.get("connection") if isinstance(gateway, dict) else None
    if not isinstance(connection, dict):
        return None
    engine = str(connection.get("type") or "duckdb").lower()
    catalogs = connection.get("catalogs")
    if isinstance(catalogs, dict) and catalogs:
        return str(next(iter(catalogs))).lower()
    database = connection.get("database") or connection.get("catalog")
    if database:
        stem = Path(str(database)).stem if engine == "duckdb" else str(database)
        return stem.lower() if stem not in ("", ":memory:") else "memory"
    return "memory" if engine == "duckdb" else None


def _selected_gateway(raw: Mapping[str, Any]) -> str | None:
    gateways = raw.get("gateways") or {}
    name = raw.get("default_gateway") or (next(iter(gateways)) if isinstance(gateways, dict) and gateways else None)
    return str(name).lower() if name else None


def _statements(raw: Mapping[str, Any], key: str, path: Path) -> tuple[str, ...]:
    value = raw.get(key) or []
    if not isinstance(value, (list, tuple)) or not all(isinstance(s, str) for s in value):
        raise ModelFileError(
            path,
            _line_of(path, key),
            f"{key} must be a list of SQL statements",
            hint=f'e.g. `{key}: ["CREATE SCHEMA IF NOT EXISTS raw"]`',
        )
    return tuple(value)


def _variables(raw: Mapping[str, Any], path: Path) -> dict[str, Any]:
    variables = dict(raw.get("variables") or {})
    gateways = raw.get("gateways") or {}
    if isinstance(gateways, dict) and gateways:
        name = raw.get("default_gateway") or next(iter(gateways))
        gateway = gateways.get(name) or {}
        if isinstance(gateway, dict):
            variables.update(gateway.get("variables") or {})
    if not all(isinstance(k, str) for k in variables):
        raise ModelFileError(path, _line_of(path, "variables"), "variable names must be text")
    return {k.lower(): v for k, v in variables.items()}


def _line_of(path: Path, key: str) -> int | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(rf"^\s*{re.escape(key)}\s*[:=]", text, flags=re.MULTILINE)
    return text.count("\n", 0, match.start()) + 1 if match else None


def _read_yaml(path: Path) -> dict[str, Any]:
    text = read_utf8(path)
    if "{{" in text or "{%" in text:
        text = _render_jinja(text, path)
    return yaml_mapping(text, path, "the config")


def _render_jinja(text: str, path: Path) -> str:
    import jinja2

    def env_var(name: str, default: Any = None) -> Any:
        return user_variable(name, default)

    try:
        return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(text).render(env_var=env_var)
    except jinja2.TemplateError as exc:
        raise ModelFileError(path, getattr(exc, "lineno", None), f"cannot render the config's Jinja: {exc}") from None


def _read_python(path: Path) -> dict[str, Any]:
    read_utf8(path)  # Python refuses another encoding in a less helpful way
    spec = importlib.util.spec_from_file_location(f"incremental_assets_config_{abs(hash(str(path)))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with sqlmesh_names():
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # the user's code: report whatever it raised, with the file
            raise import_failure(path, exc, "the config") from None
    config = getattr(module, "config", None)
    if config is None:
        raise ModelFileError(path, None, "config.py defines no `config`", hint="assign `config = Config(...)`")
    value = plain(config)
    if not isinstance(value, dict):
        raise ModelFileError(path, None, "`config` in config.py is not a Config(...)")
    return value
