"""Python source models: a ``models/*.py`` file that fetches rows from an external system.

The file declares ``MODEL`` (a dict: name, kind INCREMENTAL_BY_CURSOR, cursor, initial_value, optional
columns) and a function ``fetch(last_value, initial_value, is_backfill)`` returning the new rows as a
pyarrow Table, a pandas DataFrame or a list of dicts. The framework calls it with the high-water mark
read back from the committed table (``initial_value`` on the first run or after a definition change)
and appends the rows in one atomic commit, exactly like an SQL cursor model.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "api.py"
>>> _ = p.write_text("MODEL = {'name': 'raw.api', 'kind': 'INCREMENTAL_BY_CURSOR', 'cursor': 'id', "
...                  "'initial_value': 0}\\n"
...                  "def fetch(last_value, initial_value, is_backfill):\\n    return [{'id': 1}]\\n")
>>> m = load_python_model(p)
>>> m.name, m.kind.cursor, m.fetch(0, 0, True)
('raw.api', 'id', [{'id': 1}])
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Any, Callable, Mapping

from incremental_assets.errors import ModelFileError
from incremental_assets.load.macros.evaluator import MacroContext
from incremental_assets.load.query import parse_query
from incremental_assets.load.sqlmesh_import_errors import import_failure
from incremental_assets.load.sqlmesh_models import sqlmesh_python_model
from incremental_assets.load.sqlmesh_shim import MODEL_REGISTRY, real_model_specs, sqlmesh_names
from incremental_assets.load.text import read_utf8
from incremental_assets.model.intervals import INTERVAL_UNITS
from incremental_assets.model.kinds import IncrementalByCursor
from incremental_assets.model.python_model import PythonModel
from incremental_assets.model.sql_model import SqlModel

# The rows ``fetch`` returned are registered under this view; the model's query reads it whole.
FETCHED_VIEW = "ia_fetched_rows"
FETCH_ARGS = ("last_value", "initial_value", "is_backfill")


@dataclass(frozen=True, eq=False)
class PythonSourceModel(PythonModel):
    """A source model: its rows come from ``fetch``, called with the committed cursor, not from other tables."""

    fetch: Callable[..., Any] | None = None

    function_name = "fetch"
    rows_view = FETCHED_VIEW

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of the file and the kind: editing the function resets the cursor like an SQL change."""
        payload = f"{self.source_text}\n{self.kind!r}\n{dict(self.columns)!r}"
        return hashlib.sha256(payload.encode()).hexdigest()


def _line_of_model(text: str) -> int | None:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "MODEL" for t in node.targets):
            return node.lineno
    return None


def _import(path: Path, root: Path | None) -> Any:
    """Import a project Python file, with SQLMesh's names served and the project folder importable.

    The project modules it imports (``helper``, ``macros.*``, ``models.*``) are dropped from
    ``sys.modules`` after, so projects loaded one after another never share them."""
    spec = importlib.util.spec_from_file_location(f"incremental_assets_model_{path.stem}_{abs(hash(str(path)))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    added = root is not None and str(root) not in sys.path
    if added:
        sys.path.insert(0, str(root))
    shadowed = _modules_named_like(root) if root is not None else {}
    before_modules = set(sys.modules)
    try:
        with sqlmesh_names():
            before = len(MODEL_REGISTRY)
            spec.loader.exec_module(module)
            setattr(module, "__sqlmesh_models__", MODEL_REGISTRY[before:] or real_model_specs(module.__name__))
    except Exception as exc:  # the user's code: report whatever it raised, with the file
        real_model_specs(module.__name__)  # what SQLMesh registered before the failure leaves its registry
        raise import_failure(path, exc, "the Python model") from None
    finally:
        if added:
            sys.path.remove(str(root))
        if root is not None:
            for name in set(sys.modules) - before_modules:
                module_ = sys.modules[name]
                places = [getattr(module_, "__file__", None) or "", *(getattr(module_, "__path__", None) or [])]
                if any(str(place).startswith(str(root)) for place in places):  # namespace packages have no file
                    del sys.modules[name]
        sys.modules.update(shadowed)
    return module


def _modules_named_like(root: Path) -> dict[str, Any]:
    """Modules imported from elsewhere under a name the project's own files and folders take (``models``,
    ``helper``, ...), set aside while the project imports its own: another project's ``models`` package
    must not hide this one's ``models.src``."""
    try:
        names = {p.stem if p.suffix == ".py" else p.name for p in root.iterdir() if p.suffix == ".py" or p.is_dir()}
    except OSError:
        return {}
    names -= {"incremental_assets", *sys.stdlib_module_names}
    installed = (sys.prefix, sys.base_prefix)
    out = {}
    for name in [n for n in sys.modules if n.split(".")[0] in names]:
        module_ = sys.modules[name]
        places = [
            str(p) for p in [getattr(module_, "__file__", None) or "", *(getattr(module_, "__path__", None) or [])] if p
        ]
        if places and not any(p.startswith(str(root)) or p.startswith(installed) for p in places):
            out[name] = sys.modules.pop(name)
    return out


def load_python_models(
    path: str | Path,
    *,
    root: Path | None = None,
    defaults: Mapping[str, str] | None = None,
    dialect: str = "spark",
    macros: MacroContext | None = None,
    deferred: list[Callable[..., SqlModel]] | None = None,
) -> list[SqlModel]:
    """The models of one ``models/*.py`` file: a source model (``MODEL`` + ``fetch``), SQLMesh ``@model``
    functions, or none (a helper module other model files import). ``is_sql`` models, whose entrypoint may
    read the columns of any other model, go to ``deferred`` when given (called with ``macros=`` once every model is
    known)."""
    path = Path(path)
    module = _import(path, root)
    specs = list(module.__sqlmesh_models__)
    if specs:
        out = []
        for spec in specs:
            build = partial(sqlmesh_python_model, path, spec, defaults or {}, dialect)
            if deferred is not None and spec.kwargs.get("is_sql"):
                deferred.append(build)
            else:
                out.append(build(macros=macros))
        return out
    if getattr(module, "MODEL", None) is None:
        return []
    return [load_python_model(path, module=module)]


def load_python_model(path: str | Path, *, module: Any = None) -> PythonSourceModel:
    """Import a Python source model file; raise ModelFileError naming the file and line for anything wrong."""
    path = Path(path)
    text = read_utf8(path)
    line = _line_of_model(text)
    module = module or _import(path, None)
    config = getattr(module, "MODEL", None)
    if not isinstance(config, dict):
        raise ModelFileError(
            path,
            None,
            "a Python model defines MODEL = {...}",
            hint="add MODEL = {'name': ..., 'kind': 'INCREMENTAL_BY_CURSOR', 'cursor': ...}",
        )
    fetch = getattr(module, "fetch", None)
    if not callable(fetch):
        raise ModelFileError(
            path, None, "a Python model defines a function fetch(last_value, initial_value, is_backfill)"
        )
    params = set(inspect.signature(fetch).parameters)
    unknown = params - set(FETCH_ARGS)
    if unknown:
        raise ModelFileError(
            path,
            fetch.__code__.co_firstlineno,
            f"fetch takes unknown argument(s) {', '.join(sorted(unknown))}",
            hint="use " + ", ".join(FETCH_ARGS),
        )
    name = str(config.get("name", "")).lower()
    if not name:
        raise ModelFileError(path, line, "MODEL has no name", hint="add 'name': 'schema.table'")
    kind_name = str(config.get("kind", "INCREMENTAL_BY_CURSOR")).upper()
    if kind_name != "INCREMENTAL_BY_CURSOR":
        raise ModelFileError(path, line, f"a Python model's kind is INCREMENTAL_BY_CURSOR, found {kind_name}")
    if not config.get("cursor"):
        raise ModelFileError(path, line, "MODEL has no cursor column", hint="add 'cursor': '<column>'")
    unit = config.get("interval_unit")
    if unit is not None and unit not in INTERVAL_UNITS:
        raise ModelFileError(path, line, f"unknown interval_unit '{unit}'")
    kind = IncrementalByCursor(str(config["cursor"]).lower(), config.get("initial_value"))
    return PythonSourceModel(
        name=name,
        path=path,
        kind=kind,
        query=parse_query(f"SELECT * FROM {FETCHED_VIEW}", path=path),
        columns={str(k).lower(): str(v) for k, v in (config.get("columns") or {}).items()},
        owner=config.get("owner"),
        description=config.get("description") or (fetch.__doc__ or "").strip() or None,
        tags=tuple(config.get("tags") or ()),
        cron=config.get("cron"),
        header_line=line or 1,
        fetch=fetch,
        source_text=text,
    )


def call_fetch(model: PythonSourceModel, last_value: Any, initial_value: Any, is_backfill: bool) -> Any:
    """Call the model's fetch with the arguments it declares."""
    assert model.fetch is not None
    given = {"last_value": last_value, "initial_value": initial_value, "is_backfill": is_backfill}
    params = inspect.signature(model.fetch).parameters
    return model.fetch(**{k: v for k, v in given.items() if k in params})
