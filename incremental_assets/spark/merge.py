"""Writes of the merge-style kinds on Spark: upsert by key, SCD type 2 history, cursor appends.

Every write ends in ONE Delta commit made by :mod:`incremental_assets.delta`:

- unique key and SCD type 2 tables are partitioned by ``ia_bucket`` (a hash of the key); a run reads the
  committed files of the buckets its changes touch, computes their new content, stages it, and replaces
  exactly those buckets. Other buckets are neither read nor rewritten.
- cursor tables are appended to (or replaced on a backfill); the cursor is MAX(cursor) of the committed
  rows, read again after the commit, so it moves exactly when the data lands.
"""

from __future__ import annotations

from datetime import datetime, timezone
from functools import reduce
from typing import Any, Callable, Protocol

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from incremental_assets import delta
from incremental_assets.errors import DuplicateKeyError, StorageError
from incremental_assets.model.intervals import to_utc
from incremental_assets.model.kinds import (
    IncrementalByCursor,
    MatchedUpdate,
    ScdType2,
    UniqueKey,
)
from incremental_assets.model.project import Project
from incremental_assets.plan.rebuild import TargetState
from incremental_assets.plan.run_plan import RunPlan
from incremental_assets.spark import faults


class Session(Protocol):
    """What a merge write needs of its caller: the SparkSession and the project (read only)."""

    @property
    def spark(self) -> SparkSession: ...

    @property
    def project(self) -> Project: ...


EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
DUPLICATE_SAMPLE = 10
Stage = Callable[[DataFrame, str], None]


def bucket_of(keys: tuple[str, ...], buckets: int) -> Column:
    """The bucket of a row: a stable hash of its key, as the partition value text."""
    return F.pmod(F.xxhash64(*[F.col(f"`{k}`") for k in keys]), F.lit(buckets)).cast("string")


def _same_key(left: str, right: str, keys: tuple[str, ...]) -> Column:
    # Null-safe: a NULL key is a key like any other (it matches itself once).
    return reduce(lambda a, b: a & b, [F.col(f"{left}.`{k}`").eqNullSafe(F.col(f"{right}.`{k}`")) for k in keys])


def check_unique(df: DataFrame, keys: tuple[str, ...], model: str, path: object) -> None:
    """Raise DuplicateKeyError naming some keys that occur more than once in ``df``."""
    dupes = (
        df.groupBy(*[F.col(f"`{k}`") for k in keys]).count().where("count > 1").limit(DUPLICATE_SAMPLE + 1).collect()
    )
    if not dupes:
        return
    shown = [", ".join(f"{k}={row[k]!r}" for k in keys) + f" ({row['count']} rows)" for row in dupes[:DUPLICATE_SAMPLE]]
    more = " and more" if len(dupes) > DUPLICATE_SAMPLE else ""
    raise DuplicateKeyError(
        f"model {model} ({path}): the query returned several rows for the same unique key, nothing was committed: "
        + "; ".join(shown)
        + more
        + ". Make the query return one row per key (e.g. pick the latest with ROW_NUMBER() ... = 1)"
    )


def target_state(executor: Session, model_name: str) -> TargetState:
    """Read what a merge-style model's committed table says: its latest commit's metadata and, for a
    cursor model, MAX(cursor) over the committed rows."""
    model = executor.project.models[model_name]
    uri = executor.project.settings.table_location(model_name)
    if not delta.exists(uri):
        return TargetState()
    meta = delta.last_commit_metadata(uri)
    window_end = to_utc(meta["window_end"]) if meta.get("window_end") else None
    last_value = value_type = None
    if isinstance(model.kind, IncrementalByCursor):
        last_value, value_type = _max_cursor(executor, uri, model.kind.cursor)
    return TargetState(True, last_value, value_type, meta.get("fingerprint") or None, window_end)


def check_buckets(uri: str, model: Any) -> None:
    """A keyed table's rows are placed by ``pmod(hash(key), buckets)``: another bucket count would put a
    key's new rows beside its old ones, so a changed count is refused until the table is rebuilt."""
    recorded = delta.last_commit_metadata(uri).get("buckets")
    if recorded and int(recorded) != model.kind.buckets:
        raise StorageError(
            f"model {model.name} ({model.path}): its table was written with {recorded} key buckets, the model now says "
            f"{model.kind.buckets}; put back `buckets {recorded}` or delete {uri} to rebuild the table"
        )


def starts_over(plan: RunPlan, model: Any, uri: str) -> bool:
    """Whether a keyed run rebuilds the table from scratch (no table, a full refresh, or a changed
    definition of a model that is not forward_only): its rows are the query's alone."""
    if plan.target is not None:
        return plan.target.is_backfill(model)
    return not delta.exists(uri)


def all_buckets(uri: str, model: Any) -> list[str]:
    """Every bucket the table may hold files in: a rebuild replaces them all in one commit."""
    recorded = delta.last_commit_metadata(uri).get("buckets")
    return [str(i) for i in range(max(model.kind.buckets, int(recorded or 0)))]


def committed_rows(executor: Session, uri: str, buckets: list[str] | None = None) -> DataFrame:
    """The table's committed rows (of ``buckets``), each column of the Spark type that wrote it: rows written
    back keep the table's types (a timestamp without time zone stays one)."""
    files = delta.committed_files(uri, buckets=buckets)
    schema = from_arrow_schema(delta.arrow_schema(uri), prefer_timestamp_ntz=True)
    if not files:
        return executor.spark.createDataFrame([], schema)
    return executor.spark.read.schema(schema).parquet(*files)


def _max_cursor(executor: Session, uri: str, cursor: str) -> tuple[str | None, str | None]:
    rows = committed_rows(executor, uri)
    if cursor not in rows.columns:
        return None, None
    value = rows.agg(F.max(F.col(f"`{cursor}`")).cast("string").alias("v")).first()
    return (value["v"] if value else None), rows.schema[cursor].dataType.simpleString()


def _buckets_and_rows(rows: DataFrame) -> tuple[list[str], int]:
    """The buckets ``rows`` fall in and how many rows there are, in one Spark job."""
    counts = rows.groupBy(delta.BUCKET_COLUMN).count().collect()
    return sorted(r[0] for r in counts), sum(r["count"] for r in counts)


# -- the writes ----------------------------------------------------------------------------------


def upsert(
    executor: Session, plan: RunPlan, df: DataFrame, uri: str, stage: Stage
) -> tuple[list[str] | None, dict[str, Any]]:
    """Stage the new content of every bucket the run's rows touch; returns (buckets, counts)."""
    model = executor.project.models[plan.model]
    kind = model.kind
    assert isinstance(kind, UniqueKey)
    check_unique(df, kind.unique_key, model.name, model.path)
    fresh = starts_over(plan, model, uri)
    if not fresh:
        check_buckets(uri, model)
    new = df.withColumn(delta.BUCKET_COLUMN, bucket_of(kind.unique_key, kind.buckets))
    touched, total = _buckets_and_rows(new)
    if fresh:
        stage(new, delta.BUCKET_COLUMN)
        return (all_buckets(uri, model) if delta.exists(uri) else touched), {"rows_inserted": total, "rows_updated": 0}
    if not touched:
        return [], {"rows_inserted": 0, "rows_updated": 0}
    old = committed_rows(executor, uri, touched).withColumn("__t", F.lit(True)).alias("target")
    source = new.withColumn("__s", F.lit(True)).alias("source")
    joined = old.join(source, _same_key("target", "source", kind.unique_key), "full_outer")
    matched = F.col("target.__t").isNotNull() & F.col("source.__s").isNotNull()
    only_source = F.col("target.__t").isNull()
    columns = list(df.columns)
    # Without when_matched a matched row becomes the source row; with it, the first clause that holds
    # sets its columns and keeps the stored value of the others.
    clauses = kind.when_matched or (MatchedUpdate(None, tuple((c, f"source.`{c}`") for c in columns)),)

    def merged(column: str) -> Column:
        stored = F.col(f"target.`{column}`") if column in old.columns else F.lit(None)
        value = F.when(only_source, F.col(f"source.`{column}`"))
        for clause in clauses:
            holds = matched & F.expr(clause.condition) if clause.condition else matched
            assigned = dict(clause.assignments)
            value = value.when(holds, F.expr(assigned[column]) if column in assigned else stored)
        return value.otherwise(stored).alias(column)

    result = joined.select(*[merged(c) for c in columns]).withColumn(
        delta.BUCKET_COLUMN, bucket_of(kind.unique_key, kind.buckets)
    )
    updated = joined.where(matched).count()
    stage(result, delta.BUCKET_COLUMN)
    return touched, {"rows_inserted": total - updated, "rows_updated": updated}


def scd_type_2(
    executor: Session, plan: RunPlan, df: DataFrame, uri: str, stage: Stage, execution_time: datetime
) -> tuple[list[str] | None, dict[str, Any]]:
    """Stage the new history of every bucket with a changed, new, deleted or re-inserted key."""
    model = executor.project.models[plan.model]
    kind = model.kind
    assert isinstance(kind, ScdType2)
    keys, vt = kind.unique_key, kind.valid_to_name
    check_unique(df, keys, model.name, model.path)
    rebuild = starts_over(plan, model, uri)
    if not rebuild:
        check_buckets(uri, model)
    now = F.lit(execution_time.astimezone(timezone.utc)).cast("timestamp")
    ts = history_type(kind, df)
    if rebuild:
        return _first_history(model, kind, df, uri, stage, now, ts)

    history = committed_rows(executor, uri)
    closes, inserts = _closes_and_inserts(kind, df, history, now, ts)
    fills, filled = _fills(kind, df, history)
    touched_inserts, inserted = _buckets_and_rows(inserts)
    touched_closes, closed = _buckets_and_rows(closes)
    touched = sorted(set(touched_inserts) | set(touched_closes) | set(_buckets_and_rows(fills)[0]))
    counts = {"rows_inserted": inserted, "rows_closed": closed}
    if not touched:
        return [], counts
    old = committed_rows(executor, uri, touched).alias("h")
    x = closes.drop(delta.BUCKET_COLUMN).alias("x")
    f = fills.drop(delta.BUCKET_COLUMN).alias("f")
    current = F.col(f"h.`{vt}`").isNull()
    rewritten = (
        old.join(x, _same_key("h", "x", keys) & current, "left")
        .join(f, _same_key("h", "f", keys) & current, "left")
        .select(
            *[
                F.coalesce(F.col("x.__closed_at").cast(ts), F.col(f"h.`{vt}`").cast(ts)).alias(vt)
                if c == vt
                else F.coalesce(F.col(f"h.`{c}`"), F.col(f"f.`__f_{c}`").cast(old.schema[c].dataType)).alias(c)
                if c in filled
                else F.col(f"h.`{c}`").alias(c)
                for c in old.columns
            ]
        )
    )
    result = rewritten.withColumn(delta.BUCKET_COLUMN, bucket_of(keys, kind.buckets)).unionByName(
        inserts, allowMissingColumns=True
    )
    stage(result, delta.BUCKET_COLUMN)
    return touched, counts


def _closes_and_inserts(
    kind: ScdType2, df: DataFrame, history: DataFrame, now: Column, ts: str
) -> tuple[DataFrame, DataFrame]:
    """Against the table's ``history``: the current versions the run closes (key and closing time) and the
    new versions it inserts, each row with its bucket."""
    keys, vf, vt = kind.unique_key, kind.valid_from_name, kind.valid_to_name
    updated_at = F.col(f"s.`{kind.updated_at_name}`").cast("timestamp") if kind.by == "time" else None
    null_ts = F.lit(None).cast(ts)
    columns = list(df.columns)
    compared = list(kind.columns) or [c for c in columns if c not in keys]
    src = df.withColumn("__s", F.lit(True)).alias("s")
    current = history.where(F.col(f"`{vt}`").isNull()).withColumn("__c", F.lit(True)).alias("c")
    joined = src.join(current, _same_key("s", "c", keys), "full_outer")
    both = F.col("s.__s").isNotNull() & F.col("c.__c").isNotNull()
    if updated_at is not None:  # kind.by == "time"
        changed = both & (updated_at > F.col(f"c.`{kind.updated_at_name}`").cast("timestamp"))
        changed_at = updated_at
    else:
        same = reduce(lambda a, b: a & b, [F.col(f"s.`{c}`").eqNullSafe(F.col(f"c.`{c}`")) for c in compared])
        changed = both & ~same
        changed_at = now
    added = F.col("s.__s").isNotNull() & F.col("c.__c").isNull()
    deleted = F.col("s.__s").isNull() & F.col("c.__c").isNotNull() & F.lit(kind.invalidate_hard_deletes)

    closes = joined.where(changed | deleted).select(
        *[F.col(f"c.`{k}`").alias(k) for k in keys], F.when(changed, changed_at).otherwise(now).alias("__closed_at")
    )
    # A key coming back after a delete starts no earlier than its last version ended.
    ended = history.groupBy(*[F.col(f"`{k}`") for k in keys]).agg(F.max(F.col(f"`{vt}`")).alias("__ended")).alias("e")
    fresh = (
        joined.where(changed | added)
        .select(*[F.col(f"s.`{c}`").alias(c) for c in columns], F.when(changed, changed_at).alias("__changed_at"))
        .alias("s")
    )
    fresh = fresh.join(ended, _same_key("s", "e", keys), "left")
    # A key back after a delete starts at its change, no earlier than its last version ended; a key never seen
    # before starts at the execution time (by column) or, as on the first run, at 1970-01-01 (by time; its
    # updated_at with updated_at_as_valid_from), as SQLMesh's.
    back_at = now if kind.by == "column" else F.col(f"s.`{kind.updated_at_name}`").cast("timestamp")
    if kind.by == "column" or kind.updated_at_as_valid_from:
        first_seen = back_at
    else:
        first_seen = F.lit(EPOCH).cast("timestamp")
    last_end = F.col("e.__ended")
    valid_from = F.coalesce(
        F.col("__changed_at"), F.when(last_end.isNull(), first_seen).otherwise(F.greatest(back_at, last_end))
    )
    inserts = fresh.select(
        *[F.col(f"s.`{c}`").alias(c) for c in columns], valid_from.cast(ts).alias(vf), null_ts.alias(vt)
    )
    inserts = inserts.withColumn(delta.BUCKET_COLUMN, bucket_of(keys, kind.buckets)).localCheckpoint()
    closes = closes.withColumn(delta.BUCKET_COLUMN, bucket_of(keys, kind.buckets)).localCheckpoint()
    return closes, inserts


def _fills(kind: ScdType2, df: DataFrame, history: DataFrame) -> tuple[DataFrame, list[str]]:
    """The current versions holding a NULL where the source's row of their key has a value, with that row's
    values (``__f_<column>``), and the columns compared. SQLMesh writes every current version back with
    COALESCE(stored, source) in each column, so such a NULL takes the source's value, in a version the run
    closes as in one it keeps."""
    keys = kind.unique_key
    managed = {kind.valid_from_name, kind.valid_to_name, delta.BUCKET_COLUMN}
    filled = [c for c in df.columns if c in history.columns and c not in keys and c not in managed]
    src = df.select(*[F.col(f"`{k}`") for k in keys], *[F.col(f"`{c}`").alias(f"__f_{c}") for c in filled])
    current = history.where(F.col(f"`{kind.valid_to_name}`").isNull()).alias("c")
    gaps = [F.col(f"c.`{c}`").isNull() & F.col(f"s.`__f_{c}`").isNotNull() for c in filled]
    gap = reduce(lambda a, b: a | b, gaps, F.lit(False))
    fills = current.join(src.alias("s"), _same_key("c", "s", keys)).where(gap)
    fills = fills.select(*[F.col(f"c.`{k}`").alias(k) for k in keys], *[F.col(f"s.`__f_{c}`") for c in filled])
    return fills.withColumn(delta.BUCKET_COLUMN, bucket_of(keys, kind.buckets)).localCheckpoint(), filled


def history_type(kind: ScdType2, df: DataFrame) -> str:
    """The type of valid_from / valid_to: updated_at's own timestamp type (with or without time zone), as
    SQLMesh keeps them alike; a timestamp otherwise."""
    if kind.by == "time" and kind.updated_at_name in df.columns:
        name = df.schema[kind.updated_at_name].dataType.simpleString()
        if name in ("timestamp", "timestamp_ntz"):
            return name
    return "timestamp"


def _first_history(
    model: Any, kind: ScdType2, df: DataFrame, uri: str, stage: Stage, now: Column, ts: str = "timestamp"
) -> tuple[list[str] | None, dict[str, Any]]:
    """An SCD type 2 table started over: one current version per key, replacing every bucket."""
    if kind.execution_time_as_valid_from:
        first_from = now
    elif kind.by == "time" and kind.updated_at_as_valid_from:
        first_from = F.col(f"`{kind.updated_at_name}`").cast("timestamp")
    else:
        first_from = F.lit(EPOCH).cast("timestamp")
    out = (
        df.withColumn(kind.valid_from_name, first_from.cast(ts))
        .withColumn(kind.valid_to_name, F.lit(None).cast(ts))
        .withColumn(delta.BUCKET_COLUMN, bucket_of(kind.unique_key, kind.buckets))
    )
    touched, total = _buckets_and_rows(out)
    stage(out, delta.BUCKET_COLUMN)
    return (all_buckets(uri, model) if delta.exists(uri) else touched), {"rows_inserted": total, "rows_closed": 0}


def new_cursor_value(executor: Session, uri: str, model_name: str) -> str | None:
    """MAX(cursor) of the committed table, read after a commit (what the next run starts from)."""
    kind = executor.project.models[model_name].kind
    assert isinstance(kind, IncrementalByCursor)
    return _max_cursor(executor, uri, kind.cursor)[0]


def write_staged(df: DataFrame, staging: str, partition_column: str | None) -> None:
    """Write a run's rows into its staging folder: one file per bucket, or as Spark partitions them."""
    faults.checkpoint("staging")
    if partition_column:
        df.repartition(partition_column).write.partitionBy(partition_column).parquet(staging)
    else:
        df.write.parquet(staging)
