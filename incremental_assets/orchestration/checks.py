"""Audits and assertions as Dagster asset checks, evaluated on Spark over the rows a run wrote.

Blocking audits run on the staged files *before* the Delta commit: a failure fails the run and commits
nothing, so the window stays missing and downstream models never read it (Dagster alone would still
record a partition whose blocking check failed as materialized). Non-blocking audits run after the
commit on the committed files of the window and only warn.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from incremental_assets.errors import AuditFailedError
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.plan.audit_sql import is_blocking
from incremental_assets.spark.audits import (
    AuditOutcome,
    evaluate,
    read_committed,
    read_staged,
)
from incremental_assets.spark.session import SparkSession

DEFINITION_CHECK = "definition_current"


def check_specs(project: Project, model: SqlModel, key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
    """One asset check per declared audit/assertion, blocking where the audit blocks; and, for a model
    with a table, ``definition_current``: whether the table holds what the model's current definition
    computes (failed, with the plan's category, as soon as the automation sensor sees the model file
    edited; passed again by the run that rebuilds it). Dagster's own stale status of a partitioned asset
    is per partition only: this check is the asset-level mark."""
    own = (
        [
            dg.AssetCheckSpec(
                DEFINITION_CHECK,
                asset=key,
                description="The table was built with the model's current definition (fails when the model file "
                "changed since)",
            )
        ]
        if model.has_table
        else []
    )
    return own + [
        dg.AssetCheckSpec(
            audit.check_name,
            asset=key,
            blocking=is_blocking(project, audit),
            description=f"{audit.origin[:-1]} {audit.text} ({model.path.name}:{audit.line})",
        )
        for audit in model.audits
    ]


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


def _definition_metadata(
    model: SqlModel, built_with: str | None, category: str | None, reasons: tuple[str, ...] = ()
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "fingerprint": model.fingerprint,
        "built_with": built_with or "",
        "model_file": str(model.path),
    }
    if category:
        meta["category"] = category
    if reasons:
        meta["changes"] = "; ".join(reasons)
    return meta


def definition_evaluation(
    key: dg.AssetKey, model: SqlModel, category: str, reasons: tuple[str, ...] = ()
) -> dg.AssetCheckEvaluation:
    """The changed mark the automation sensor reports when it sees a model's definition differ from its table's."""
    meta = _definition_metadata(model, None, category, reasons)
    del meta["built_with"]
    meta["status"] = f"changed ({category}): the table was built with another definition"
    return dg.AssetCheckEvaluation(
        asset_key=key, check_name=DEFINITION_CHECK, passed=False, severity=dg.AssetCheckSeverity.WARN, metadata=meta
    )


def definition_result(key: dg.AssetKey, model: SqlModel, built_with: str | None) -> dg.AssetCheckResult:
    """After a run: whether the table now holds the current definition (a forward_only model keeps its
    older rows, and says so)."""
    current = built_with is None or built_with == model.fingerprint
    meta = _definition_metadata(model, built_with, None)
    meta["status"] = "current" if current else "the table keeps rows of an earlier definition (forward_only)"
    return dg.AssetCheckResult(
        asset_key=key, check_name=DEFINITION_CHECK, passed=current, severity=dg.AssetCheckSeverity.WARN, metadata=meta
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
            outcomes = evaluate(
                self.spark,
                self.project,
                self.model,
                read_staged(self.spark, staging, window, self.model.interval_unit),
                self.blocking,
            )
            for o in outcomes:
                self.blocking_outcomes.setdefault(o.audit.check_name, []).append(o)
            if not all(o.passed for o in outcomes):
                for o in outcomes:
                    r = check_result(self.key, o, window)
                    self.context.log_event(
                        dg.AssetCheckEvaluation(
                            asset_key=self.key,
                            check_name=o.audit.check_name,
                            passed=r.passed,
                            metadata=r.metadata,
                            severity=r.severity,
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
            rows = (
                self.spark.sql(view_sql)
                if view_sql is not None
                else read_committed(self.spark, self.project, self.model, window)
            )
            out += [
                check_result(self.key, o, window) for o in evaluate(self.spark, self.project, self.model, rows, pending)
            ]
        return out
