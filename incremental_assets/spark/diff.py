"""Two builds of one model's table compared: production's and an environment's.

Schema and row counts per interval come from the Delta logs; rows are compared by Spark, matched on the
model's grain (SQLMesh's ``grain``/``grains``), or as whole rows without one (a multiset difference).
Rows are compared over the columns both sides have with the same type; the others are schema
differences.
"""

from __future__ import annotations

import datetime as dt
import decimal
from dataclasses import dataclass, field
from typing import Any, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from incremental_assets import delta
from incremental_assets.spark.inputs import read_table_window

EXAMPLES = 5


@dataclass(frozen=True)
class TableDiff:
    schema: dict[str, list] = field(default_factory=dict)  # added / removed / changed columns
    counts: list[dict[str, Any]] = field(default_factory=list)  # per interval (or the whole table): both sides' rows
    grain: tuple[str, ...] = ()  # what rows were matched on (empty: whole rows)
    only_production: int = 0
    only_environment: int = 0
    changed: int = 0
    examples: dict[str, list] = field(default_factory=dict)

    @property
    def equal(self) -> bool:
        return (
            not any(self.schema.values())
            and not self.only_production
            and not self.only_environment
            and not self.changed
            and all(c["production"] == c["environment"] for c in self.counts)
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "equal": self.equal,
            "schema": self.schema,
            "counts": self.counts,
            "grain": list(self.grain),
            "rows": {
                "only_production": self.only_production,
                "only_environment": self.only_environment,
                "changed": self.changed,
            },
            "examples": self.examples,
        }


def schema_diff(production: dict[str, str], environment: dict[str, str]) -> dict[str, list]:
    """Columns added, removed and of another type in the environment (names compared case-insensitively).

    >>> schema_diff({"a": "int", "b": "string"}, {"A": "bigint", "c": "date"})
    {'added': [['c', 'date']], 'removed': [['b', 'string']], 'changed': [['a', 'int', 'bigint']]}
    """
    prod = {k.lower(): (k, v) for k, v in production.items()}
    env = {k.lower(): (k, v) for k, v in environment.items()}
    return {
        "added": [[env[k][0], env[k][1]] for k in env if k not in prod],
        "removed": [[prod[k][0], prod[k][1]] for k in prod if k not in env],
        "changed": [[prod[k][0], prod[k][1], env[k][1]] for k in prod if k in env and prod[k][1] != env[k][1]],
    }


def interval_counts(production_uri: str, environment_uri: str) -> list[dict[str, Any]]:
    """Rows per ``ia_interval`` on both sides (one entry ``interval: None`` for an unpartitioned table)."""
    prod, env = delta.interval_row_counts(production_uri), delta.interval_row_counts(environment_uri)
    if prod is None or env is None:
        return [
            {
                "interval": None,
                "production": delta.row_count(production_uri) or 0,
                "environment": delta.row_count(environment_uri) or 0,
            }
        ]
    return [
        {"interval": k, "production": prod.get(k, 0), "environment": env.get(k, 0)}
        for k in sorted(set(prod) | set(env))
    ]


def diff_tables(spark: SparkSession, production_uri: str, environment_uri: str, grain: Sequence[str] = ()) -> TableDiff:
    """Compare the current versions of two Delta tables of one model (production's first)."""
    prod_types, env_types = delta.column_types(production_uri) or {}, delta.column_types(environment_uri) or {}
    schema = schema_diff(prod_types, env_types)
    env_names = {k.lower(): k for k in env_types}
    common = [c for c in prod_types if c.lower() in env_names and prod_types[c] == env_types[env_names[c.lower()]]]
    prod, _ = read_table_window(spark, production_uri, None, None)
    env, _ = read_table_window(spark, environment_uri, None, None)
    prod = prod.select(*[F.col(c).alias(f"c{i}") for i, c in enumerate(common)])
    env = env.select(*[F.col(env_names[c.lower()]).alias(f"c{i}") for i, c in enumerate(common)])
    keys = [common.index(c) for c in _grain_columns(grain, common)]
    counts = interval_counts(production_uri, environment_uri)
    if keys:
        return _by_grain(prod, env, common, keys, schema, counts)
    only_prod, only_env = prod.exceptAll(env), env.exceptAll(prod)
    return TableDiff(
        schema=schema,
        counts=counts,
        only_production=only_prod.count(),
        only_environment=only_env.count(),
        examples={
            "only_production": _examples(only_prod, common),
            "only_environment": _examples(only_env, common),
            "changed": [],
        },
    )


def _grain_columns(grain: Sequence[str], common: list[str]) -> list[str]:
    """The grain's columns as the tables name them; none when a grain column is not on both sides alike."""
    by_lower = {c.lower(): c for c in common}
    found = [by_lower.get(g.lower()) for g in grain]
    return [c for c in found if c] if found and all(found) else []


def _by_grain(
    prod: DataFrame, env: DataFrame, common: list[str], keys: list[int], schema: dict, counts: list
) -> TableDiff:
    p = prod.select(*[F.col(f"c{i}").alias(f"p{i}") for i in range(len(common))], F.lit(True).alias("p_row"))
    e = env.select(*[F.col(f"c{i}").alias(f"e{i}") for i in range(len(common))], F.lit(True).alias("e_row"))
    on: Column = F.lit(True)
    for i in keys:
        on = on & F.col(f"p{i}").eqNullSafe(F.col(f"e{i}"))
    joined = p.join(e, on, "full_outer")
    same: Column = F.lit(True)
    for i in range(len(common)):
        if i not in keys:
            same = same & F.col(f"p{i}").eqNullSafe(F.col(f"e{i}"))
    state = (
        F.when(F.col("e_row").isNull(), "only_production")
        .when(F.col("p_row").isNull(), "only_environment")
        .when(~same, "changed")
        .otherwise("same")
    )
    joined = joined.withColumn("state", state).where(F.col("state") != "same").cache()
    try:
        totals = {r["state"]: r["count"] for r in joined.groupBy("state").count().collect()}
        examples: dict[str, list] = {}
        ordered = joined.orderBy(*[F.coalesce(F.col(f"p{i}"), F.col(f"e{i}")) for i in keys])
        for kind in ("only_production", "only_environment", "changed"):
            rows = ordered.where(F.col("state") == kind).limit(EXAMPLES).collect() if totals.get(kind) else []
            examples[kind] = [_example(r, common, keys, kind) for r in rows]
    finally:
        joined.unpersist()
    return TableDiff(
        schema=schema,
        counts=counts,
        grain=tuple(common[i] for i in keys),
        only_production=totals.get("only_production", 0),
        only_environment=totals.get("only_environment", 0),
        changed=totals.get("changed", 0),
        examples=examples,
    )


def _example(row: Any, common: list[str], keys: list[int], kind: str) -> dict[str, Any]:
    side = "p" if kind == "only_production" else "e"
    if kind != "changed":
        return {c: _plain(row[f"{side}{i}"]) for i, c in enumerate(common)}
    key = {common[i]: _plain(row[f"p{i}"]) for i in keys}
    columns = {
        common[i]: {"production": _plain(row[f"p{i}"]), "environment": _plain(row[f"e{i}"])}
        for i in range(len(common))
        if i not in keys and row[f"p{i}"] != row[f"e{i}"]
    }
    return {"key": key, "columns": columns}


def _examples(frame: DataFrame, common: list[str]) -> list[dict[str, Any]]:
    rows = frame.orderBy(*[F.col(f"c{i}") for i in range(len(common))]).limit(EXAMPLES).collect() if common else []
    return [{c: _plain(r[f"c{i}"]) for i, c in enumerate(common)} for r in rows]


def _plain(value: Any) -> Any:
    """A value as JSON can hold it (times as ISO-8601, decimals as text)."""
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
