"""A project folder: its models, its sources, the dependencies between them, in topological order.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp()); (d / "models").mkdir()
>>> _ = (d / "models" / "a.sql").write_text("MODEL (name s.a, kind FULL); SELECT 1 AS x")
>>> _ = (d / "models" / "b.sql").write_text("MODEL (name s.b, kind FULL); SELECT x FROM s.a")
>>> [m.name for m in load_project(d).ordered()]
['s.a', 's.b']
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Iterable, Mapping

import yaml
from sqlglot import exp

from incremental_assets.audits import BUILTINS, UserAudit, parse_audit_file
from incremental_assets.errors import ModelFileError, ProjectError, SelectionError
from incremental_assets.model import Embedded, SqlModel, parse_model_file, table_name, table_references
from incremental_assets.python_models import load_python_model
from incremental_assets.settings import Settings, load_settings
from incremental_assets.time_window import INTERVAL_UNITS

SOURCE_FORMATS = ("delta", "parquet", "csv", "json", "table")


@dataclass(frozen=True, eq=False)
class Source:
    """A table no model produces (SQLMesh's EXTERNAL model), declared in sources.yaml."""

    name: str
    location: str
    format: str
    columns: Mapping[str, str] = field(default_factory=dict)
    time_column: str | None = None
    interval_unit: str | None = None
    line: int | None = None

    @property
    def is_time_series(self) -> bool:
        return self.time_column is not None


@dataclass(frozen=True, eq=False)
class Project:
    directory: Path
    settings: Settings
    models: Mapping[str, SqlModel]
    sources: Mapping[str, Source]
    order: tuple[str, ...]
    audits: Mapping[str, UserAudit] = field(default_factory=dict)

    @cached_property
    def analyses(self) -> dict:
        """The safety analysis of every incremental model (computed once, on first use)."""
        from incremental_assets.analysis.model import analyze_model

        return {m.name: analyze_model(self, m) for m in self.models.values() if m.is_incremental}

    def analysis(self, name: str):
        """The Analysis of an incremental model, None for other kinds."""
        return self.analyses.get(name)

    def input_bound(self, model_name: str, input_name: str):
        """How far beyond a run window a model reads one input (a SourceBound), or None when there is
        no derived bound: the input has no time dimension, or the model is not analysed or refused."""
        analysis = self.analysis(model_name)
        if analysis is None or analysis.refused:
            return None
        return analysis.bounds.get(input_name)

    def ordered(self) -> list[SqlModel]:
        """Models in dependency order (upstreams first); EMBEDDED models are not among them (they are
        inlined into their consumers and never run on their own)."""
        return [self.models[name] for name in self.order]

    def model(self, name: str) -> SqlModel:
        try:
            return self.models[name.lower()]
        except KeyError:
            raise SelectionError(f"no model named '{name}'; models are: {', '.join(sorted(self.models))}") from None

    def upstream_models(self, model: SqlModel) -> list[SqlModel]:
        return [self.models[n] for n in model.depends_on if n in self.models and n != model.name]

    def downstream(self, name: str) -> list[str]:
        return [m.name for m in self.models.values() if name in m.depends_on and m.name != name]

    def time_column_of(self, name: str) -> str | None:
        if name in self.models:
            return self.models[name].time_column
        if name in self.sources:
            return self.sources[name].time_column
        return None

    def select(self, selection: str | Iterable[str] | None) -> list[SqlModel]:
        """Resolve a selection like ``shop.orders``, ``+shop.orders`` (with upstreams), ``shop.orders+``
        (with downstreams) or ``tag:sales``, comma- or space-separated; None selects everything."""
        if selection is None:
            return self.ordered()
        terms = selection.replace(",", " ").split() if isinstance(selection, str) else list(selection)
        chosen: set[str] = set()
        for term in terms:
            up, down = term.startswith("+"), term.endswith("+")
            core = term.strip("+").lower()
            if core.startswith("tag:"):
                hits = {m.name for m in self.models.values() if core[4:] in (t.lower() for t in m.tags)}
                if not hits:
                    raise SelectionError(f"no model has tag '{core[4:]}'")
            else:
                hits = {self.model(core).name}
            for name in list(hits):
                if up:
                    hits |= self._closure(name, lambda n: [u.name for u in self.upstream_models(self.models[n])])
                if down:
                    hits |= self._closure(name, self.downstream)
            chosen |= hits
        return [m for m in self.ordered() if m.name in chosen]

    @staticmethod
    def _closure(start: str, step) -> set[str]:
        seen: set[str] = set()
        stack = [start]
        while stack:
            for nxt in step(stack.pop()):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen


def _node_line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def load_sources(path: Path, project_dir: Path) -> dict[str, Source]:
    """Read sources.yaml: a list of {name, location, format, columns?, time_column?, interval_unit?}."""
    if not path.exists():
        return {}
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ModelFileError(path, mark.line + 1 if mark else None, f"invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if root is None:
        return {}
    if isinstance(root, yaml.MappingNode) and any(k.value == "sources" for k, _ in root.value):
        root = next(v for k, v in root.value if k.value == "sources")
    if not isinstance(root, yaml.SequenceNode):
        raise ModelFileError(path, _node_line(root), "sources.yaml must be a list of sources", hint="start each entry with `- name: raw.orders`")
    sources: dict[str, Source] = {}
    for node in root.value:
        line = _node_line(node)
        if not isinstance(node, yaml.MappingNode):
            raise ModelFileError(path, line, "each source must be a mapping with name, location and format")
        entry = yaml.safe_load(yaml.serialize(node)) or {}
        unknown = set(entry) - {"name", "location", "format", "columns", "time_column", "interval_unit", "description"}
        if unknown:
            raise ModelFileError(path, line, f"unknown key(s) {', '.join(sorted(unknown))} in a source", hint="use name, location, format, columns, time_column, interval_unit")
        for key in ("name", "location", "format"):
            if not entry.get(key) or not isinstance(entry.get(key), str):
                raise ModelFileError(path, line, f"source is missing '{key}'", hint=f"add `{key}: ...` to the entry")
        for key in ("name", "location", "time_column"):
            if "\x00" in str(entry.get(key) or ""):
                raise ModelFileError(path, line, f"source {key} contains a NUL character")
        name = entry["name"].lower()
        fmt = entry["format"].lower()
        if fmt not in SOURCE_FORMATS:
            raise ModelFileError(path, line, f"source {name}: unknown format '{fmt}'", hint="use one of " + ", ".join(SOURCE_FORMATS))
        if name in sources:
            raise ModelFileError(path, line, f"source {name} is declared twice (first on line {sources[name].line})")
        columns = entry.get("columns") or {}
        if isinstance(columns, list):
            try:
                columns = {str(k): str(v) for item in columns for k, v in dict(item).items()}
            except (TypeError, ValueError):
                raise ModelFileError(path, line, f"source {name}: columns must map names to types") from None
        if not isinstance(columns, dict):
            raise ModelFileError(path, line, f"source {name}: columns must map names to types", hint="write `columns: {id: bigint}`")
        unit = entry.get("interval_unit")
        if unit is not None and str(unit).lower() not in INTERVAL_UNITS:
            raise ModelFileError(path, line, f"source {name}: unknown interval_unit '{unit}'", hint="use one of " + ", ".join(INTERVAL_UNITS))
        time_column = entry.get("time_column")
        location = entry["location"]
        if fmt != "table" and "://" not in location and not Path(location).is_absolute():
            location = str((project_dir / location).resolve())
        sources[name] = Source(
            name=name,
            location=location,
            format=fmt,
            columns={str(k).lower(): str(v) for k, v in columns.items()},
            time_column=str(time_column).lower() if time_column else None,
            interval_unit=str(unit).lower() if unit else ("day" if time_column else None),
            line=line,
        )
    return sources


def load_project(directory: str | Path = ".", *, settings: Settings | None = None) -> Project:
    """Load every model under ``models/`` and the sources; raise ProjectError listing every problem."""
    directory = Path(directory).resolve()
    settings = settings or load_settings(directory)
    models_dir = directory / "models"
    if not models_dir.is_dir():
        raise ProjectError([ModelFileError(directory, None, "no models/ folder here", hint="pass --project DIR pointing at the project folder")])
    errors: list[ModelFileError] = []
    try:
        sources = load_sources(directory / "sources.yaml", directory)
    except ModelFileError as exc:
        errors.append(exc)
        sources = {}

    models: dict[str, SqlModel] = {}
    python_files = [p for p in models_dir.rglob("*.py") if not p.name.startswith("_")]
    for path in sorted([*models_dir.rglob("*.sql"), *python_files]):
        try:
            model = parse_model_file(path, default_dialect=settings.dialect) if path.suffix == ".sql" else load_python_model(path)
        except ModelFileError as exc:
            errors.append(exc)
            continue
        if not model.enabled:
            continue
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
            continue
        if model.name in sources:
            errors.append(ModelFileError(path, model.line_of("name"), f"model {model.name} has the name of a source in sources.yaml", hint="rename the model or the source"))
            continue
        models[model.name] = model

    for model in models.values():
        for ref in model.references:
            if ref.name not in models and ref.name not in sources and ref.name != model.name:
                errors.append(
                    ModelFileError(
                        model.path,
                        ref.line,
                        f"unknown table '{ref.name}' in model {model.name}",
                        hint="declare it in sources.yaml or create a model with that name",
                    )
                )
            if ref.name == model.name and not model.is_incremental:
                errors.append(ModelFileError(model.path, ref.line, f"model {model.name} reads itself; only incremental models may"))
    user_audits: dict[str, UserAudit] = {}
    for path in sorted((directory / "audits").glob("*.sql")):
        try:
            user_audits.update((a.name, a) for a in parse_audit_file(path))
        except ModelFileError as exc:
            errors.append(exc)
    for model in models.values():
        for audit in model.audits:
            if audit.name not in BUILTINS and audit.name not in user_audits:
                errors.append(
                    ModelFileError(
                        model.path,
                        audit.line,
                        f"unknown audit '{audit.name}' in model {model.name}",
                        hint="use a built-in (" + ", ".join(BUILTINS) + ") or define it in audits/*.sql",
                    )
                )
    if errors:
        raise ProjectError(errors)
    models = inline_embedded(models)
    order = [n for n in _topological_order(models) if not isinstance(models[n].kind, Embedded)]
    return Project(directory=directory, settings=settings, models=models, sources=sources, order=tuple(order), audits=user_audits)


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
                raise ProjectError([ModelFileError(model.path, table.this.meta.get("line"), "embedded models form a cycle: " + " -> ".join(stack + (name,)))])
            inner = expand(models[name], stack + (name,))
            inlined |= {name, *inner.embeds}
            body = inner.query.copy()
            alias = exp.TableAlias(this=exp.to_identifier(table.alias or table.name))
            table.replace(exp.Subquery(this=body, alias=alias))
        return replace(model, query=query, references=table_references(query), embeds=tuple(sorted(inlined)))

    for name, model in models.items():
        out[name] = expand(model, (name,))
    return out


def _topological_order(models: Mapping[str, SqlModel]) -> list[str]:
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
                        next((r.line for r in model.references if r.name == cycle[-2] or r.name in cycle), model.query_line),
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
