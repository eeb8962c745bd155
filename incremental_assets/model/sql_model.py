"""What a model IS: its configuration and its query AST, and the fingerprint of what decides its rows.

A model is read from a file by :mod:`incremental_assets.load`; this module holds the value only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Mapping

from sqlglot import exp, transforms
from sqlglot.dialects.spark import Spark

from incremental_assets.model.audits import Audit, UserAudit
from incremental_assets.model.intervals import IntervalUnit
from incremental_assets.model.kinds import (
    Embedded,
    IncrementalByTimeRange,
    Kind,
    MergeKind,
    View,
)

# Macros a query may use; each is rendered to a typed literal for the run window.
DATE_MACROS = frozenset(
    f"{edge}_{suffix}"
    for edge in ("start", "end", "execution", "latest")
    for suffix in ("ds", "date", "ts", "dt", "dtntz", "tstz", "epoch", "millis", "hour")
) | {"this_model"}


@dataclass(frozen=True)
class TableReference:
    """A table the query reads, by its model or source name, with the line it appears on."""

    name: str
    line: int | None


@dataclass(frozen=True, eq=False)
class SqlModel:
    """A parsed model file: configuration plus the query AST (macros not yet rendered)."""

    name: str
    path: Path
    kind: Kind
    query: exp.Query
    dialect: str = "spark"
    start: datetime | None = None
    end: datetime | None = None
    cron: str | None = None
    interval_unit: IntervalUnit | None = None
    owner: str | None = None
    tags: tuple[str, ...] = ()
    grains: tuple[str, ...] = ()
    description: str | None = None
    column_descriptions: Mapping[str, str] = field(default_factory=dict)
    columns: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True
    metadata: Mapping[str, str] = field(default_factory=dict)
    references: tuple[TableReference, ...] = ()
    header_line: int = 1
    query_line: int = 1
    lines: Mapping[str, int] = field(default_factory=dict)
    audits: tuple[Audit, ...] = ()
    embeds: tuple[str, ...] = ()  # EMBEDDED models inlined into the query
    written_query: exp.Query | None = None  # the query as written, before they were inlined
    pre_statements: tuple[exp.Expr, ...] = ()  # run before the query, in the same session
    post_statements: tuple[exp.Expr, ...] = ()  # run after the write
    inline_audits: tuple[UserAudit, ...] = ()  # AUDIT (...) blocks of the model file
    event_time_column: str | None = None  # the row's event time; the kind's time_column is it truncated to the unit
    derived_start: bool = False  # start not written: from the upstream models or the previous interval
    relative_start: str | None = None  # a start written relative to the load time ('1 year ago'), as written

    @property
    def schema(self) -> str:
        return self.name.rsplit(".", 1)[0] if "." in self.name else "default"

    @property
    def table(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def is_incremental(self) -> bool:
        return isinstance(self.kind, IncrementalByTimeRange)

    @property
    def unit(self) -> IntervalUnit:
        """The interval unit of the model's time partitions (a day unless given or derived from cron)."""
        return IntervalUnit.of(self.interval_unit)

    @property
    def is_merge_style(self) -> bool:
        """Unique key, SCD type 2 or cursor: the table is merged into rather than replaced by window."""
        return isinstance(self.kind, MergeKind)

    @property
    def forward_only(self) -> bool:
        """A changed definition applies to new intervals only; the existing ones are kept."""
        return bool(getattr(self.kind, "forward_only", False))

    @property
    def has_table(self) -> bool:
        """Whether a run writes data (EMBEDDED models and plain views write none)."""
        return not isinstance(self.kind, Embedded) and not (isinstance(self.kind, View) and not self.kind.materialized)

    @property
    def time_column(self) -> str | None:
        return self.kind.time_column if isinstance(self.kind, IncrementalByTimeRange) else None

    @property
    def depends_on(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.name for r in self.references))

    def line_of(self, key: str) -> int:
        return self.lines.get(key, self.header_line)

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of what decides the data: the normalized query, the kind and the time layout.

        Owner, tags and descriptions are left out: changing them does not change a single row; so are a
        kind's lifecycle settings (forward_only, on_*_change), which say how a change is applied, and the
        start, which says which intervals exist, not what an interval holds (as in SQLMesh: a start moved
        earlier adds intervals to compute, one moved later keeps the rows built before it).
        """
        return hashlib.sha256(json.dumps(self.data_payload(), sort_keys=True, default=str).encode()).hexdigest()

    def data_payload(self) -> dict:
        """What the fingerprint hashes (JSON values): the definition a table is built with."""
        skip: frozenset[str] = getattr(self.kind, "not_in_fingerprint", frozenset())
        kind = {k: sorted(v) if isinstance(v, frozenset) else v for k, v in vars(self.kind).items() if k not in skip}
        payload: dict[str, object] = {
            "query": normalized_sql(self.query),
            "kind": self.kind.name,
            "kind_config": kind,
            "interval_unit": self.interval_unit,
            "columns": dict(self.columns),
            "dialect": "spark",
        }
        if self.pre_statements or self.post_statements:  # as SQLMesh: they decide the rows too
            payload["pre_statements"] = [normalized_sql(s) for s in self.pre_statements]
            payload["post_statements"] = [normalized_sql(s) for s in self.post_statements]
        return payload


# Spark (4.x) runs QUALIFY itself. sqlglot writes it for Spark as a subquery whose window value is one more
# column, which a `SELECT * ... QUALIFY` then returns (`_w`); every other rewrite of a SELECT is kept.
Spark.Generator.TRANSFORMS[exp.Select] = transforms.preprocess(
    [transforms.eliminate_distinct_on, transforms.unnest_to_explode, transforms.any_to_exists]
)


def normalized_sql(query: exp.Expr) -> str:
    """The query as canonical Spark SQL: comments and formatting do not change the fingerprint."""
    return query.sql(dialect="spark", comments=False, normalize=True)


SEED_VIEW = "__ia_seed"
