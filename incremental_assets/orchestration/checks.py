"""Audits and assertions as Dagster asset checks, evaluated on Spark over the rows a run wrote.

Blocking audits run on the staged files *before* the Delta commit: a failure fails the run and commits
nothing, so the window stays missing and downstream models never read it (Dagster alone would still
record a partition whose blocking check failed as materialized). Non-blocking audits run after the
commit on the committed files of the window and only warn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dagster as dg
from pyspark.sql import DataFrame, SparkSession

from incremental_assets import storage
from incremental_assets.audits import Audit, failing_rows_sql
from incremental_assets.errors import IncrementalAssetsError
from incremental_assets.model import SqlModel
from incremental_assets.project import Project
from incremental_assets.time_window import TimeWindow

SAMPLE_ROWS = 5


class AuditFailedError(IncrementalAssetsError):
    """A blocking audit found failing rows; the window was not committed."""


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


def is_blocking(project: Project, audit: Audit) -> bool:
    """An audit's own flag, else its definition's (user audits), else SQLMesh's default: blocking."""
    if audit.blocking is not None:
        return audit.blocking
    user = project.audits.get(audit.name)
    return user.blocking if user is not None else True


def check_specs(project: Project, model: SqlModel, key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    """One asset check per declared audit/assertion, blocking where the audit blocks."""
    return [
        dg.AssetCheckSpec(
            audit.check_name,
            asset=key,
            blocking=is_blocking(project, audit),
            description=f"{audit.origin[:-1]} {audit.text} ({model.path.name}:{audit.line})",
        )
        for audit in model.audits
    ]


def evaluate(spark: SparkSession, project: Project, model: SqlModel, rows: DataFrame, audits: list[Audit]) -> list[AuditOutcome]:
    """Run each audit's failing-rows query over ``rows``; count the failures and keep a sample."""
    view = "ia_audited_" + model.name.replace(".", "_")
    rows.drop(storage.PARTITION_COLUMN, storage.BUCKET_COLUMN).createOrReplaceTempView(view)
    sqls = [failing_rows_sql(audit, view, project.audits.get(audit.name)) for audit in audits]
    if not sqls:
        return []
    # Every audit's failing rows are counted in ONE Spark job (a UNION ALL of the counts): a job costs
    # a fixed ~0.3-0.7 s on a small machine, and each interval of a run pays it before its commit.
    counting = " UNION ALL ".join(f"SELECT {i} AS ia_audit, COUNT(*) AS ia_failing FROM ({sql}) AS ia_audit_{i}" for i, sql in enumerate(sqls))
    counts = {row[0]: row[1] for row in spark.sql(counting).collect()}
    outcomes = []
    for i, (audit, sql) in enumerate(zip(audits, sqls)):
        count = counts.get(i, 0)
        sample = [r.asDict() for r in spark.sql(sql).limit(SAMPLE_ROWS).collect()] if count else []
        outcomes.append(AuditOutcome(audit, is_blocking(project, audit), count, sample, sql))
    return outcomes


def read_staged(spark: SparkSession, staging: str) -> DataFrame:
    return spark.read.parquet(staging)


def read_committed(spark: SparkSession, project: Project, model: SqlModel, window: TimeWindow | None) -> DataFrame:
    uri = storage.table_uri(project.settings.warehouse, model.name)
    files = storage.committed_files(uri, window=window, unit=model.interval_unit)
    if not files:
        return spark.createDataFrame([], "ia_empty INT")
    return spark.read.parquet(*files)


def check_result(key: dg.AssetKey, outcome: AuditOutcome, window: TimeWindow | None) -> dg.AssetCheckResult:
    meta: dict[str, Any] = {
        "failing_rows": outcome.failing_rows,
        "audit": outcome.audit.text,
        "sql": dg.MetadataValue.md(f"```sql\n{outcome.sql}\n```"),
    }
    if window is not None:
        meta["window_start"] = window.start.isoformat()
        meta["window_end"] = window.end.isoformat()
    if outcome.sample:
        meta["sample"] = dg.MetadataValue.json([{k: str(v) for k, v in row.items()} for row in outcome.sample])
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=outcome.audit.check_name,
        passed=outcome.passed,
        severity=dg.AssetCheckSeverity.ERROR if outcome.blocking else dg.AssetCheckSeverity.WARN,
        metadata=meta,
    )


def failure_message(model: SqlModel, outcomes: list[AuditOutcome], window: TimeWindow | None) -> str:
    parts = [f"{o.audit.text}: {o.failing_rows} failing rows, e.g. {o.sample[:2]}" for o in outcomes if not o.passed]
    return f"{model.name} {window or '(full)'}: blocking audit failed, nothing was committed: " + "; ".join(parts)


class WindowAuditor:
    """Audits of one model over one asset execution: blocking ones per batch before each commit,
    the others once over the whole window after the last commit."""

    def __init__(self, spark: SparkSession, project: Project, model: SqlModel, key: dg.AssetKey, context: Any):
        self.spark, self.project, self.model, self.key, self.context = spark, project, model, key, context
        self.blocking = [a for a in model.audits if is_blocking(project, a)]
        self.others = [a for a in model.audits if not is_blocking(project, a)]
        self.blocking_outcomes: dict[str, list[AuditOutcome]] = {}

    def before_commit(self, window: TimeWindow | None):
        if not self.blocking:
            return None

        def audit_staged(staging: str) -> None:
            outcomes = evaluate(self.spark, self.project, self.model, read_staged(self.spark, staging), self.blocking)
            for o in outcomes:
                self.blocking_outcomes.setdefault(o.audit.check_name, []).append(o)
            if not all(o.passed for o in outcomes):
                for o in outcomes:
                    r = check_result(self.key, o, window)
                    self.context.log_event(
                        dg.AssetCheckEvaluation(
                            asset_key=self.key, check_name=r.check_name, passed=r.passed, metadata=r.metadata, severity=r.severity
                        )
                    )
                raise AuditFailedError(failure_message(self.model, outcomes, window))

        return audit_staged

    def results(self, window: TimeWindow | None, *, view_sql: str | None = None) -> list[dg.AssetCheckResult]:
        out = []
        for name, outcomes in self.blocking_outcomes.items():
            merged = AuditOutcome(outcomes[0].audit, True, sum(o.failing_rows for o in outcomes), [], outcomes[0].sql)
            out.append(check_result(self.key, merged, window))
        pending = self.others + ([a for a in self.blocking if a.check_name not in self.blocking_outcomes])
        if pending:
            rows = self.spark.sql(view_sql) if view_sql is not None else read_committed(self.spark, self.project, self.model, window)
            out += [check_result(self.key, o, window) for o in evaluate(self.spark, self.project, self.model, rows, pending)]
        return out
