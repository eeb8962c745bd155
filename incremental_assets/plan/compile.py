"""Glue between a project's models and the analysis passes: which tables are time series, the model's
interval, its overrides; one Analysis per incremental model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from incremental_assets.analysis.classify import analyze_query
from incremental_assets.analysis.result import Analysis

if TYPE_CHECKING:
    from incremental_assets.model import SqlModel
    from incremental_assets.project import Project


def analyze_model(project: "Project", model: "SqlModel") -> Analysis | None:
    """Classify an incremental model (None for other kinds, which always run in full)."""
    from incremental_assets.model import IncrementalByTimeRange
    from incremental_assets.time_window import NOMINAL_LENGTH

    kind = model.kind
    if not isinstance(kind, IncrementalByTimeRange):
        return None
    time_columns = {name: project.time_column_of(name) for name in model.depends_on}
    time_columns[model.name] = kind.time_column
    return analyze_query(
        model.query,
        model_name=model.name,
        time_column=kind.time_column,
        time_columns=time_columns,
        interval=NOMINAL_LENGTH[model.interval_unit or "day"],
        overrides=kind.safety_overrides,
        declared_lookback=kind.lookback,
        dialect=model.dialect,
    )
