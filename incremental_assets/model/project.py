"""A project as a value: its settings, models, sources and user audits, in dependency order.

Loaded by :mod:`incremental_assets.load.project`; the safety analyses of its models are computed, once
per project, by :mod:`incremental_assets.plan.analyses`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from incremental_assets.errors import SelectionError
from incremental_assets.model.audits import UserAudit
from incremental_assets.model.settings import Settings
from incremental_assets.model.sql_model import SqlModel

SOURCE_FORMATS = ("delta", "parquet", "csv", "json", "table")


@dataclass(frozen=True)
class CsvSettings:
    """How a CSV source's files are written (``csv_settings`` in sources.yaml, named as a SEED's)."""

    delimiter: str = ","
    quotechar: str = '"'
    escapechar: str | None = None
    header: bool = True
    encoding: str = "utf-8"

    def spark_options(self) -> dict[str, str]:
        """The options of Spark's CSV reader."""
        options = {"sep": self.delimiter, "quote": self.quotechar, "header": str(self.header).lower()}
        options["encoding"] = self.encoding
        if self.escapechar is not None:
            options["escape"] = self.escapechar
        return options


@dataclass(frozen=True, eq=False)
class Source:
    """A table no model produces (SQLMesh's EXTERNAL model), declared in sources.yaml."""

    name: str
    location: str
    format: str
    columns: Mapping[str, str] = field(default_factory=dict)
    time_column: str | None = None  # the partition column
    interval_unit: str | None = None
    line: int | None = None
    event_time_column: str | None = None  # the row's event time; time_column is it truncated to interval_unit
    time_format: str | None = None  # a text time column's strftime format (SQLMesh's `time_column (col, format)`)
    csv: CsvSettings = field(default_factory=CsvSettings)  # how a CSV source's files are written

    @property
    def is_time_series(self) -> bool:
        return self.time_column is not None

    @property
    def in_catalog(self) -> bool:
        """A table or view of Spark's catalog (``before_all`` or a pre-statement makes it), read by its name."""
        return self.format == "table"


@dataclass(frozen=True, eq=False)
class Project:
    directory: Path
    settings: Settings
    models: Mapping[str, SqlModel]
    sources: Mapping[str, Source]
    order: tuple[str, ...]
    audits: Mapping[str, UserAudit] = field(default_factory=dict)
    variables: Mapping[str, Any] = field(default_factory=dict)  # config `variables`, for @VAR
    # config `before_all` / `after_all`, macros expanded, in the order of the project folders; Spark SQL
    before_all: tuple[str, ...] = ()
    after_all: tuple[str, ...] = ()
    directories: tuple[Path, ...] = ()  # every folder of a project loaded from several (the first is `directory`)

    def relative_path(self, path: Path) -> Path:
        """A project file as the user knows it: relative to the project folder, or for a file of a further
        folder (a project loaded from several), relative to that folder's parent (``repo_2/models/c.sql``)."""
        for folder in (self.directory, *self.directories):
            if folder in path.parents:
                return path.relative_to(folder if folder == self.directory else folder.parent)
        return path

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

    def event_time_of(self, name: str) -> tuple[str, str] | None:
        """A relation's event-time column and the unit its time (partition) column truncates it to, if declared."""
        if name in self.models:
            model = self.models[name]
            return (
                (model.event_time_column, model.unit.value) if model.event_time_column and model.time_column else None
            )
        source = self.sources.get(name)
        if source is not None and source.event_time_column and source.time_column:
            return source.event_time_column, source.interval_unit or "day"
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
                    hits |= closure(name, lambda n: [u.name for u in self.upstream_models(self.models[n])])
                if down:
                    hits |= closure(name, self.downstream)
            chosen |= hits
        return [m for m in self.ordered() if m.name in chosen]


def closure(start: str, step: Callable[[str], Iterable[str]]) -> set[str]:
    """The names reached from ``start`` by ``step`` (a name's neighbours), one step or more (``start`` itself only
    through a cycle).

    >>> sorted(closure("a", {"a": ["b"], "b": ["c"], "c": []}.__getitem__))
    ['b', 'c']
    """
    seen: set[str] = set()
    stack = [start]
    while stack:
        for nxt in step(stack.pop()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen
