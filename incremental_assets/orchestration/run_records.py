"""What a command keeps of each Dagster run it started: the outcome, the rows written, the error as a user
reads it, the audits that failed without blocking the commit; and the line the command prints for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from incremental_assets.model.intervals import TimeWindow

BAD_INPUT_ERRORS = (
    "SourceDataError",
    "ModelQueryError",
)  # a run failed on unreadable input data exits 2, as any bad input


@dataclass
class RunRecord:
    model: str
    window: TimeWindow | None
    success: bool
    run_id: str
    seconds: float
    rows: int | None = None
    error: str | None = None
    bad_input: bool = False  # failed on input the user must fix (a source file that cannot be read as declared)
    warnings: tuple[str, ...] = ()  # non-blocking audits that found failing rows (the window was committed)


@dataclass
class RunReport:
    records: list[RunRecord] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return all(r.success for r in self.records)


def record_of_run(model: str, window: TimeWindow | None, result: Any, seconds: float) -> RunRecord:
    """The record of a finished in-process run (``result``: Dagster's execution result) of ``model``."""
    rows = None
    error = None
    bad_input = False
    warnings: list[str] = []
    for event in result.all_events:
        if event.event_type_value == "ASSET_MATERIALIZATION":
            meta = event.materialization.metadata
            written = meta.get("run_rows_written") or meta.get("rows_written")  # older runs recorded it so
            if written is not None and isinstance(written.value, int):  # recorded as an int
                rows = written.value
        elif event.event_type_value == "ASSET_CHECK_EVALUATION":
            warnings.extend(_audit_warning(event.event_specific_data))
        if event.is_step_failure:
            data = event.step_failure_data
            error = _error_text(data.error)
            bad_input = bad_input or _is_bad_input(data.error)
    return RunRecord(model, window, result.success, result.run_id, seconds, rows, error, bad_input, tuple(warnings))


def _audit_warning(evaluation: Any) -> list[str]:
    """A non-blocking audit's failure, in one line (nothing for a passed check or one that is not an audit)."""
    meta = evaluation.metadata
    if evaluation.passed or evaluation.severity != dg.AssetCheckSeverity.WARN or "failing_rows" not in meta:
        return []
    failing, audit = meta["failing_rows"].value, meta["audit"].value if "audit" in meta else evaluation.check_name
    return [f"warning: non-blocking audit {audit} found {failing:,} failing row(s); the rows were committed"]


def _error_text(error: Any) -> str:
    """A failed step's error as the user should read it: our own errors without their class name."""
    if error is None:
        return "failed"
    cause = error.cause or error
    text = cause.message.strip()
    if cause.cls_name and cause.cls_name.endswith("Error") and text.startswith("incremental_assets.errors."):
        text = text.split(": ", 1)[-1]
    elif text.startswith("pyspark.errors.exceptions."):  # Spark's own error: its message, not PySpark's class path
        text = text.split(": ", 1)[-1]
    return text


def _is_bad_input(error: Any) -> bool:
    return error is not None and (error.cause or error).cls_name in BAD_INPUT_ERRORS


def progress_line(prefix: str, model_name: str, window: TimeWindow | None, rebuild: bool, record: RunRecord) -> str:
    """What a command prints when one of its runs ends: ``prefix`` (e.g. the counts so far), the model, the
    window and the outcome, then a line per non-blocking audit that failed."""
    where = (str(window) if window else "full") + (" (rebuilt from start, one commit)" if rebuild else "")
    return (
        f"{prefix} {model_name} {where}: {'ok' if record.success else 'FAILED'}"
        + (f", {record.rows:,} rows" if record.rows is not None else "")
        + (f"\n    {record.error}" if record.error else "")
        + "".join(f"\n    {warning}" for warning in record.warnings)
    )


def skipped(model_name: str, window: TimeWindow | None) -> RunRecord:
    """The record of a window not run because an upstream model (or an earlier window) failed."""
    return RunRecord(model_name, window, False, "", 0.0, error="skipped: an upstream model failed")
