"""Audits evaluated on Spark: every audit's failing rows counted over staged or committed rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from incremental_assets import delta
from incremental_assets.model.audits import Audit
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.plan.audit_sql import failing_rows_sql, is_blocking
from incremental_assets.spark.inputs import read_table_window

SAMPLE_ROWS = 5


@dataclass(frozen=True)
class AuditOutcome:
    audit: Audit
    blocking: bool
    failing_rows: int
    sample: list[dict[str, Any]]
    sql: str

    @property
    def passed(self) -> bool:
        return self.failing_rows == 0


def evaluate(
    spark: SparkSession, project: Project, model: SqlModel, rows: DataFrame, audits: list[Audit]
) -> list[AuditOutcome]:
    """Run each audit's failing-rows query over ``rows``; count the failures and keep a sample."""
    view = "ia_audited_" + model.name.replace(".", "_")
    rows.drop(delta.PARTITION_COLUMN, delta.DAY_COLUMN, delta.BUCKET_COLUMN).createOrReplaceTempView(view)
    sqls = [failing_rows_sql(audit, view, project.audits.get(audit.name), model.name) for audit in audits]
    if not sqls:
        return []
    # Every audit's failing rows are counted in ONE Spark job (a UNION ALL of the counts): a job costs
    # a fixed ~0.3-0.7 s on a small machine, and each interval of a run pays it before its commit.
    counting = " UNION ALL ".join(
        f"SELECT {i} AS ia_audit, COUNT(*) AS ia_failing FROM ({sql}) AS ia_audit_{i}" for i, sql in enumerate(sqls)
    )
    counts = {row[0]: row[1] for row in spark.sql(counting).collect()}
    outcomes = []
    for i, (audit, sql) in enumerate(zip(audits, sqls)):
        count = counts.get(i, 0)
        sample = [r.asDict() for r in spark.sql(sql).limit(SAMPLE_ROWS).collect()] if count else []
        outcomes.append(AuditOutcome(audit, is_blocking(project, audit), count, sample, sql))
    return outcomes


def read_staged(
    spark: SparkSession, staging: str, window: TimeWindow | None = None, unit: str | None = None
) -> DataFrame:
    """The rows a run staged, those of ``window`` only: on a table cut by day the staged files also hold
    the other hours of the days the window covers in part, copied, not written by this run."""
    # A staging folder always holds a file with its columns, even for a window with no rows.
    rows = spark.read.parquet(staging)
    if window is None or delta.DAY_COLUMN not in rows.columns:
        return rows
    first, end = delta.interval_bounds(window, unit)
    interval = F.col(delta.PARTITION_COLUMN)
    return rows.where((interval >= first) & (interval < end))


def read_committed(spark: SparkSession, project: Project, model: SqlModel, window: TimeWindow | None) -> DataFrame:
    """The committed rows of ``window`` (all rows without one), with the table's columns even when the
    window holds no row: audits of an empty window evaluate over zero rows."""
    uri = project.settings.table_location(model.name)
    return read_table_window(spark, uri, window, model.interval_unit)[0]
