"""A project folder: its models, its sources, the dependencies between them, in topological order.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp()); (d / "models").mkdir()
>>> _ = (d / "models" / "a.sql").write_text("MODEL (name s.a, kind FULL); SELECT 1 AS x")
>>> _ = (d / "models" / "b.sql").write_text("MODEL (name s.b, kind FULL); SELECT x FROM s.a")
>>> [m.name for m in load_project(d).ordered()]
['s.a', 's.b']
"""

from __future__ import annotations

import functools
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Sequence

from sqlglot import exp

from incremental_assets.errors import ModelFileError, ProjectError
from incremental_assets.load.audits import parse_audit_file
from incremental_assets.load.blueprints import expand_blueprints
from incremental_assets.load.cache import cache_folder
from incremental_assets.load.column_types import ModelColumns, needs_model_types, with_model_types
from incremental_assets.load.external_models import Unlocated, external_model_files, load_external_models
from incremental_assets.load.gc_pause import collection_paused
from incremental_assets.load.macros.evaluator import MacroContext
from incremental_assets.load.macros.python_macros import load_macros
from incremental_assets.load.model_file import model_file_name, read_model_text
from incremental_assets.load.model_graph import default_starts, inline_embedded, topological_order
from incremental_assets.load.parsed import ParsedModels
from incremental_assets.load.python_models import load_python_models
from incremental_assets.load.query import parse_statements, table_name, table_references
from incremental_assets.load.settings import load_settings
from incremental_assets.load.source_columns import file_source_columns
from incremental_assets.load.sources import load_sources
from incremental_assets.load.sqlmesh_config import SqlmeshConfig, load_sqlmesh_config
from incremental_assets.load.sqlmesh_models import SqlmeshPythonModel
from incremental_assets.model.audits import BUILTINS, NON_BLOCKING, UserAudit
from incremental_assets.model.cron import CRON_HINT, cron_problem
from incremental_assets.model.kinds import Embedded
from incremental_assets.model.project import Project, Source
from incremental_assets.model.settings import Settings
from incremental_assets.model.sql_model import SqlModel


def load_project(
    directory: str | Path | Sequence[str | Path] = ".",
    *,
    settings: Settings | None = None,
    variables: Mapping[str, Any] | None = None,
) -> Project:
    """Load every model under ``models/`` and the sources; raise ProjectError listing every problem.

    ``directory`` may be several folders (SQLMesh's ``-p repo_1 -p repo_2``): they load as one project,
    each folder's config (model defaults, variables, ``macros/``, ``before_all``) applying to its own
    models, models of one folder reading those of another; settings and the warehouse are the first's.
    ``variables`` override every config's (a unit test's ``vars``).
    """
    with collection_paused():
        project, errors, _ = _load(directory, settings, variables)
    if errors:
        raise ProjectError(errors)
    return project


def load_valid_models(
    directory: str | Path | Sequence[str | Path] = ".", *, settings: Settings | None = None
) -> tuple[Project, list[ModelFileError]]:
    """The project of every model that loads, with the errors of those that do not: a model whose file,
    references or audits are wrong is left out, and so is every model reading one left out.

    Commands that report (``status``) show the others; commands that build refuse the project."""
    with collection_paused():
        project, errors, left_out = _load(directory, settings)
    return project, errors + left_out


def _load(
    directory: str | Path | Sequence[str | Path], settings: Settings | None, variables: Mapping[str, Any] | None = None
) -> tuple[Project, list[ModelFileError], list[ModelFileError]]:
    directories = _project_directories(directory)
    settings = settings or load_settings(directories[0])
    errors: list[ModelFileError] = []
    configs: list[SqlmeshConfig] = []
    for folder in directories:
        if not (folder / "models").is_dir():
            raise ProjectError(
                [
                    ModelFileError(
                        folder, None, "no models/ folder here", hint="pass --project DIR pointing at the project folder"
                    )
                ]
            )
        try:
            config = load_sqlmesh_config(folder)
            configs.append(replace(config, variables={**config.variables, **variables}) if variables else config)
        except ModelFileError as exc:
            raise ProjectError([exc]) from None
    unlocated: dict[str, Unlocated] = {}
    sources: dict[str, Source] = {}
    for folder, config in zip(directories, configs):
        sources.update(_load_sources(folder, config, errors, unlocated))
    models: dict[str, SqlModel] = {}
    before: list[exp.Expr] = []
    after: list[exp.Expr] = []
    parsed = ParsedModels(cache_folder(directories[0]))
    for folder, config in zip(directories, configs):
        macros = _macro_context(folder, sources, config, errors)
        for model in _load_models(folder / "models", settings, config, sources, errors, macros, parsed).values():
            _add_model(models, _in_default_catalog(model, config.default_catalog), sources, errors)
        before += _config_statements(config, "before_all", settings, macros, errors)
        after += _config_statements(config, "after_all", settings, macros, errors)
    parsed.save()
    sources.update(catalog_tables(models, sources, unlocated, before))
    errors += _reference_errors(models, sources, unlocated, unparsed := _unparsed_models(errors) - set(models))
    user_audits: dict[str, UserAudit] = {}
    for folder in directories:
        user_audits.update(_load_user_audits(folder / "audits", errors))
    user_audits.update(_inline_audits(models, user_audits, errors))
    errors += _audit_errors(models, user_audits)
    left_out: list[ModelFileError] = []
    models = default_starts(inline_embedded(_without_invalid(models, sources, errors, left_out, unparsed)))
    order = [n for n in topological_order(models) if not isinstance(models[n].kind, Embedded)]
    variables = {k: v for config in reversed(configs) for k, v in config.variables.items()}  # the first folder's win
    project = Project(
        directory=directories[0],
        settings=settings,
        models=models,
        sources=sources,
        order=tuple(order),
        audits=user_audits,
        variables=variables,
        before_all=tuple(s.sql(dialect="spark") for s in before),
        after_all=tuple(s.sql(dialect="spark") for s in after),
        directories=tuple(directories),
    )
    return project, errors, left_out


def _without_invalid(
    models: Mapping[str, SqlModel],
    sources: Mapping[str, Source],
    errors: list[ModelFileError],
    left_out: list[ModelFileError],
    unparsed: Collection[str] = (),
) -> dict[str, SqlModel]:
    """The models no error names, less those reading an invalid model or one whose file did not load
    (``unparsed``), said in ``left_out``."""
    bad_files = {str(Path(e.path).resolve()) for e in errors if e.path}
    kept = {n: m for n, m in models.items() if str(m.path.resolve()) not in bad_files}
    while True:
        missing = {n: d for n, m in kept.items() for d in m.depends_on if d != n and d not in kept and d not in sources}
        if not missing:
            return kept
        for name, upstream in missing.items():
            model = kept.pop(name)
            if upstream in models or upstream in unparsed:
                line = next((r.line for r in model.references if r.name == upstream), model.query_line)
                left_out.append(
                    ModelFileError(
                        model.path,
                        line,
                        f"model {name} is left out: it reads {upstream}, which is invalid",
                        hint=f"fix {upstream} first",
                    )
                )


def project_folders(text: str) -> list[str]:
    """The folders of ``$INCREMENTAL_ASSETS_PROJECT``: one, or several separated by ``os.pathsep``.

    >>> project_folders(os.pathsep.join(["repo_1", "repo_2"]))
    ['repo_1', 'repo_2']
    """
    return [part for part in text.split(os.pathsep) if part]


def _project_directories(directory: str | Path | Sequence[str | Path]) -> list[Path]:
    folders = [directory] if isinstance(directory, (str, Path)) else list(directory)
    out: list[Path] = []
    for folder in folders:
        resolved = Path(folder).resolve()
        if resolved not in out:
            out.append(resolved)
    return out or [Path(".").resolve()]


def _config_statements(
    config: SqlmeshConfig, key: str, settings: Settings, macros: MacroContext, errors: list[ModelFileError]
) -> list[exp.Expr]:
    """A config's ``before_all`` / ``after_all``, parsed in the project dialect with its folder's macros."""
    out: list[exp.Expr] = []
    for text in getattr(config, key):
        try:
            out += parse_statements(
                text, dialect=config.dialect or settings.dialect, path=config.path or key, macros=macros
            )
        except ModelFileError as exc:
            errors.append(
                ModelFileError(
                    exc.path, _line_of_text(config.path, text) or exc.line, f"{key}: {exc.message}", hint=exc.hint
                )
            )
    return out


def _line_of_text(path: Path | None, text: str) -> int | None:
    try:
        content = path.read_text(encoding="utf-8", errors="replace") if path else ""
    except OSError:
        return None
    at = content.find(text[:40])
    return content.count("\n", 0, at) + 1 if at >= 0 else None


def catalog_tables(
    models: Mapping[str, SqlModel],
    sources: Mapping[str, Source],
    unlocated: Mapping[str, Unlocated],
    statements: Sequence[exp.Expr],
) -> dict[str, Source]:
    """Tables and views that ``before_all`` or a model's pre-statements create and a model reads: sources
    read from Spark's catalog (with an external model's columns where one declares them).
    """
    created = list(statements)
    for model in models.values():
        created += list(model.pre_statements)
    read = {ref.name for model in models.values() for ref in model.references}
    out: dict[str, Source] = {}
    for statement in created:
        if not isinstance(statement, exp.Create) or str(statement.args.get("kind") or "").upper() not in (
            "TABLE",
            "VIEW",
        ):
            continue
        target = statement.this.this if isinstance(statement.this, exp.Schema) else statement.this
        if not isinstance(target, exp.Table):
            continue
        name = table_name(target)
        if name in models or name in sources or name not in read:
            continue
        declared = unlocated.get(name)
        out[name] = declared.as_catalog_table() if declared else Source(name=name, location=name, format="table")
    return out


def _macro_context(
    directory: Path, sources: Mapping[str, Source], config: SqlmeshConfig, errors: list[ModelFileError]
) -> MacroContext:
    """What the models' macros may use: the project's ``macros/*.py``, its variables and the declared source schemas."""
    functions, macro_errors = load_macros(directory)
    errors.extend(macro_errors)
    schemas = {name: dict(source.columns) for name, source in sources.items() if source.columns}
    variables = {str(k).lower(): v for k, v in (config.variables or {}).items()}
    return MacroContext(macros=functions, schemas=schemas, macros_dir=directory / "macros", variables=variables)


def _load_sources(
    directory: Path, config: SqlmeshConfig, errors: list[ModelFileError], unlocated: dict[str, Unlocated]
) -> dict[str, Source]:
    """sources.yaml, completed by SQLMesh's external models (``external_models.yaml``, ``external_models/``)."""
    try:
        sources = load_sources(directory / "sources.yaml", directory)
        for path in external_model_files(directory):
            sources = load_external_models(
                path, directory, sources, config.dialect or "spark", gateway=config.gateway, unlocated=unlocated
            )
        return sources
    except ModelFileError as exc:
        errors.append(exc)
        return {}


def _model_files(models_dir: Path) -> list[Path]:
    python_files = [p for p in models_dir.rglob("*.py") if not p.name.startswith("_")]
    return sorted([*models_dir.rglob("*.sql"), *python_files])


def _load_models(
    models_dir: Path,
    settings: Settings,
    config: SqlmeshConfig,
    sources: Mapping[str, Source],
    errors: list[ModelFileError],
    macros: MacroContext | None = None,
    parsed: ParsedModels | None = None,
) -> dict[str, SqlModel]:
    """Every enabled model of the model files (``*.sql``, and ``*.py`` not starting with ``_``), each name once;
    ``parsed``: the model parses kept between loads."""
    parsed = parsed or ParsedModels(None)
    models: dict[str, SqlModel] = {}
    defaults = config.default_properties()
    dialect = config.dialect or settings.dialect
    deferred: list[Callable[..., SqlModel]] = []
    waiting: dict[Path, ModelFileError] = {}  # files whose macros asked for columns of models not read yet
    for path in _model_files(models_dir):
        try:
            if path.suffix == ".sql":
                found = _parse_sql(parsed, path, dialect, defaults, config, macros)
            else:
                found = load_python_models(
                    path, root=models_dir.parent, defaults=defaults, dialect=dialect, macros=macros, deferred=deferred
                )
        except ModelFileError as exc:
            if path.suffix == ".sql" and macros is not None and COLUMNS_UNKNOWN in str(exc):
                waiting[path] = exc
            else:
                errors.append(exc)
            continue
        for model in found:
            _add_model(models, model, sources, errors)
    retype = macros is not None and any(needs_model_types(m, models) for m in models.values())
    columns = ModelColumns(parsed.cache.folder if waiting or deferred or retype else None)
    parse = functools.partial(_parse_sql, parsed, dialect=dialect, defaults=defaults, config=config)
    if waiting:
        assert macros is not None
        _parse_waiting(waiting, models, columns, macros, parse, sources, errors)
    if deferred and macros is not None:  # is_sql entrypoints may ask for any model's columns
        macros = replace(macros, schemas={**columns.of(models, macros.schemas), **macros.schemas})
    for build in deferred:
        try:
            _add_model(models, build(macros=macros), sources, errors)
        except ModelFileError as exc:
            errors.append(exc)
    if macros is not None:
        with_model_types(models, columns, macros, parse, functools.partial(_read_columns, sources))
    columns.save()
    return models


def _read_columns(sources: Mapping[str, Source], name: str) -> dict[str, str] | None:
    """The columns of source ``name`` read from its files, when it declares none."""
    source = sources.get(name)
    return None if source is None or source.columns else file_source_columns(source.location, source.format)


def _parse_waiting(
    waiting: dict[Path, ModelFileError],
    models: dict[str, SqlModel],
    columns: ModelColumns,
    macros: MacroContext,
    parse: Callable[..., list[SqlModel]],
    sources: Mapping[str, Source],
    errors: list[ModelFileError],
) -> None:
    """The files whose macros asked for columns of models not read yet, parsed again with the columns of the
    models read so far, until no file gets further (the rest are errors)."""
    while waiting:
        wider = replace(macros, schemas={**columns.of(models, macros.schemas), **macros.schemas})
        before = len(waiting)
        for path in list(waiting):
            try:
                found = parse(path, macros=wider)
            except ModelFileError as exc:
                waiting[path] = exc
                continue
            del waiting[path]
            for model in found:
                _add_model(models, model, sources, errors)
        if len(waiting) == before:
            errors.extend(waiting.values())
            break


# What a macro says when it asks for the columns of a table whose columns are not declared (yet).
COLUMNS_UNKNOWN = "the columns of "


def _parse_sql(
    parsed: ParsedModels,
    path: Path,
    dialect: str,
    defaults: Mapping[str, str],
    config: SqlmeshConfig,
    macros: MacroContext | None,
) -> list[SqlModel]:
    """The models of one SQL file (several with blueprints)."""
    return [
        parsed.parse(path, text=t, dialect=dialect, defaults=defaults, variables=config.variables, macros=macros)
        for t in expand_blueprints(read_model_text(path), path)
    ]


def _in_default_catalog(model: SqlModel, catalog: str | None) -> SqlModel:
    """The model with its three-part table names in the gateway's default catalog read as two-part names
    (SQLMesh names its models ``catalog.schema.table``; here a model is ``schema.table``)."""
    if not catalog or model.query is None:
        return model
    tables = [t for t in model.query.find_all(exp.Table) if t.catalog and t.catalog.lower() == catalog and t.db]
    if not tables:
        return model
    query = model.query.copy()
    for table in query.find_all(exp.Table):
        if table.catalog and table.catalog.lower() == catalog and table.db:
            table.set("catalog", None)
    return replace(model, query=query, references=table_references(query))


def _add_model(
    models: dict[str, SqlModel], model: SqlModel, sources: Mapping[str, Source], errors: list[ModelFileError]
) -> None:
    """Add one loaded model: enabled ones only, each name once, never a source's name."""
    path = model.path
    if not model.enabled:
        return
    if model.name in models:
        first = models[model.name]
        errors.append(
            ModelFileError(
                path,
                model.line_of("name"),
                f"model {model.name} is also defined in {first.path}:{first.line_of('name')}",
                hint="give each model a unique name",
            )
        )
        return
    problem = cron_problem(model.cron) if model.cron else None
    if problem:  # a Python model's cron; a model file's is refused as its header is read
        errors.append(
            ModelFileError(path, model.line_of("cron"), f"invalid cron '{model.cron}': {problem}", hint=CRON_HINT)
        )
        return
    if model.name in sources:
        errors.append(
            ModelFileError(
                path,
                model.line_of("name"),
                f"model {model.name} has the name of a source in sources.yaml",
                hint="rename the model or the source",
            )
        )
        return
    models[model.name] = model


def _inline_audits(
    models: Mapping[str, SqlModel], known: Mapping[str, UserAudit], errors: list[ModelFileError]
) -> dict[str, UserAudit]:
    """``AUDIT (...)`` blocks of model files, by name; one name, one definition across the project."""
    out: dict[str, UserAudit] = {}
    for model in models.values():
        for audit in model.inline_audits:
            first = out.get(audit.name) or known.get(audit.name)
            if first is not None and first.query != audit.query:
                errors.append(
                    ModelFileError(
                        model.path,
                        None,
                        f"audit {audit.name} is also defined in {first.path}",
                        hint="give each audit a unique name",
                    )
                )
                continue
            out[audit.name] = audit
    return out


def _unparsed_models(errors: Sequence[ModelFileError]) -> set[str]:
    """The names of the models whose SQL file has an error (the query did not parse, ...), from their header."""
    names: set[str] = set()
    for path in {Path(e.path) for e in errors if e.path and str(e.path).endswith(".sql")}:
        try:
            texts = expand_blueprints(read_model_text(path), path)
        except (ModelFileError, OSError):
            continue
        names.update(n for n in (model_file_name(path, t) for t in texts) if n)
    return names


def _reference_errors(
    models: Mapping[str, SqlModel],
    sources: Mapping[str, Source],
    unlocated: Mapping[str, Unlocated],
    unparsed: Collection[str] = (),
) -> list[ModelFileError]:
    """Each model's reference to a table no model or source names (a model whose file has an error of its
    own, ``unparsed``, is known by name: that error says it), an external model without a location, itself."""
    errors = []
    for model in models.values():
        for ref in model.references:
            if ref.name in unlocated and ref.name not in sources:
                declared = unlocated[ref.name]
                errors.append(
                    ModelFileError(
                        model.path,
                        ref.line,
                        f"model {model.name} reads external model {ref.name}, which does not say where its data lives",
                        hint="add `location: <path or URI>` (and `format:`) to its entry at "
                        f"{declared.path}:{declared.line}, or create it in before_all",
                    )
                )
            elif (
                ref.name not in models
                and ref.name not in sources
                and ref.name not in unparsed
                and ref.name != model.name
            ):
                errors.append(
                    ModelFileError(
                        model.path,
                        ref.line,
                        f"unknown table '{ref.name}' in model {model.name}",
                        hint="declare it in sources.yaml or create a model with that name",
                    )
                )
            if (
                ref.name == model.name and not model.is_incremental and not isinstance(model, SqlmeshPythonModel)
            ):  # its rows are read before the write
                errors.append(
                    ModelFileError(
                        model.path, ref.line, f"model {model.name} reads itself; only incremental models may"
                    )
                )
    return errors


def _load_user_audits(folder: Path, errors: list[ModelFileError]) -> dict[str, UserAudit]:
    user_audits: dict[str, UserAudit] = {}
    for path in sorted(folder.rglob("*.sql")):  # subfolders too, as SQLMesh
        try:
            user_audits.update((a.name, a) for a in parse_audit_file(path))
        except ModelFileError as exc:
            errors.append(exc)
    return user_audits


def _audit_errors(models: Mapping[str, SqlModel], user_audits: Mapping[str, UserAudit]) -> list[ModelFileError]:
    return [
        ModelFileError(
            model.path,
            audit.line,
            f"unknown audit '{audit.name}' in model {model.name}",
            hint="use a built-in ("
            + ", ".join(n for n in BUILTINS if not n.endswith(NON_BLOCKING))
            + f", each also as <name>{NON_BLOCKING}) or define it in audits/*.sql",
        )
        for model in models.values()
        for audit in model.audits
        if audit.name not in BUILTINS and audit.name not in user_audits
    ]
