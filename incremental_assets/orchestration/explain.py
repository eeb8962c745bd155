"""What ``explain`` says of a model: kind, safety class and reasons, per-source bounds, partitions and
backfill policy, as one frozen value the CLI prints as text or JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from incremental_assets.analysis.result import Analysis, Reason, SourceBound, describe_bound
from incremental_assets.model.intervals import IntervalUnit
from incremental_assets.model.kinds import describe_write
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.plan.analyses import analysis_of, run_size

READ_IN_FULL = "read in full (no time dimension)"


@dataclass(frozen=True)
class Partitions:
    """A partitioned model's time partitions: unit, range, first key and the column they are cut on."""

    interval_unit: IntervalUnit | None
    start: str | None
    end: str | None
    first_key: str | None
    time_column: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "interval_unit": self.interval_unit,
            "start": self.start,
            "end": self.end,
            "first_key": self.first_key,
            "time_column": self.time_column,
        }


@dataclass(frozen=True)
class Explanation:
    """One model explained. ``sources`` maps each table it reads to its bound, None when read in full;
    ``write`` says how a merge-style model writes (None for the others)."""

    model: str
    kind: str
    file: str
    safety_class: str
    backfill_policy: str
    write: str | None = None
    reasons: tuple[Reason, ...] = ()
    sources: Mapping[str, SourceBound | None] = field(default_factory=dict, hash=False)
    partitions: Partitions | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def to_json(self) -> dict[str, Any]:
        """What ``explain --json`` prints, keys in this order."""
        info: dict[str, Any] = {
            "model": self.model,
            "kind": self.kind,
            "file": self.file,
            "safety_class": self.safety_class,
        }
        if self.write:
            info["write"] = self.write
        info["reasons"] = [{"rule": r.rule, "message": r.message, "line": r.line} for r in self.reasons]
        info["sources"] = {name: describe_source(bound) for name, bound in self.sources.items()}
        info["partitions"] = self.partitions.to_json() if self.partitions else None
        info["backfill_policy"] = self.backfill_policy
        return info


def describe_source(bound: SourceBound | None) -> dict[str, object] | str:
    """A source's bound as ISO-8601 durations, or that the source is read in full.

    >>> describe_source(None)
    'read in full (no time dimension)'
    """
    return describe_bound(bound) if bound is not None else READ_IN_FULL


def safety_class_text(analysis: Analysis | None) -> str:
    """The safety class as ``validate`` and ``explain`` show it; a model without analysis runs in full.

    >>> safety_class_text(None)
    'runs in full'
    """
    return "runs in full" if analysis is None else analysis.label


def explain_model(project: Project, model: SqlModel) -> Explanation:
    """What ``explain`` says of one model of ``project``."""
    analysis = analysis_of(project, model.name)
    write = describe_write(model.kind) or None
    explained = Explanation(
        model.name,
        model.kind.name,
        str(project.relative_path(model.path)),
        safety_class="not applicable (no time windows: merges by key or cursor)"
        if write
        else safety_class_text(analysis),
        backfill_policy="single run (unpartitioned)",
        write=write,
    )
    if model.kind.name == "EMBEDDED":
        consumers = sorted(m.name for m in project.models.values() if model.name in m.embeds)
        inlined = "inlined into " + (", ".join(consumers) if consumers else "no model") + " (analysed there)"
        return replace(explained, safety_class=inlined, backfill_policy="none: no table, no asset")
    if analysis is None:
        return explained
    partitions, policy = _partitioning(project, model)
    return replace(
        explained,
        reasons=analysis.reasons,
        sources={
            name: bound for name, bound in sorted(analysis.bounds.items()) if name != model.name or bound is not None
        },
        partitions=partitions,
        backfill_policy=policy,
    )


def _partitioning(project: Project, model: SqlModel) -> tuple[Partitions, str]:
    """The partitions and the backfill policy the translator gives an analysed model."""
    from incremental_assets.orchestration.translator import ModelTranslator

    translator = ModelTranslator()
    partitions = translator.get_partitions_def(model)
    policy = translator.get_backfill_policy(model, run_size(project, model))
    per_run = policy.max_partitions_per_run if policy is not None else None
    return (
        Partitions(
            interval_unit=model.interval_unit,
            start=model.start.isoformat() if model.start else None,
            end=model.end.isoformat() if model.end else None,
            first_key=partitions.get_first_partition_key() if partitions else None,
            time_column=model.time_column,
        ),
        "single run (one Spark job for any range)" if per_run is None else f"multi run, {per_run} interval(s) per run",
    )
