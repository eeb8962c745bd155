"""Which intervals are stale: computed from inputs that were materialized again after them.

Dagster numbers every materialization event (its storage id grows with each event). An interval of a
model is stale when an interval of an upstream model that it reads (its lookback included) has a newer
materialization than its own: late data re-ran the upstream interval, or the upstream was rebuilt
because its definition changed. A FULL or materialized VIEW model is stale when any upstream
materialization is newer than its own. Nothing is stored besides what Dagster records anyway. A plain
VIEW (or an embedded model) holds no data: it is never stale.

An interval's own moment is its latest materialization or confirmation (see :mod:`.confirm`): when a
change recomputed an upstream model but not this one (it reads none of the upstream columns whose
values changed, as the plan decided when the upstream was rebuilt), the upstream's rebuild confirmed the
intervals of this model as current, and they are not stale. Upstream moments are materializations only:
a confirmation changes no data.

An unpartitioned upstream (a FULL dimension) refreshed with new rows does not make a partitioned model's
intervals stale (as in SQLMesh, only new intervals read the new rows); its definition changing does: the
intervals computed before its first materialization with the new definition are stale.
"""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from incremental_assets.model import clock
from incremental_assets.model.intervals import TimeWindow, merge
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration.confirm import current_id, current_ids
from incremental_assets.orchestration.partition_keys import window_of_key
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.analyses import input_bound


@dataclass(frozen=True)
class Stale:
    """Intervals of one model to compute again, and which upstream models made them stale."""

    windows: tuple[TimeWindow, ...] = ()
    causes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.windows or self.causes)


def latest_ids(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict[str, int]:
    """The storage id of the latest materialization of each partition of an asset."""
    return dict(instance.get_latest_storage_id_by_partition(key, dg.DagsterEventType.ASSET_MATERIALIZATION))


def latest_id(instance: dg.DagsterInstance, key: dg.AssetKey) -> int | None:
    """The storage id of an asset's latest materialization (any partition)."""
    records = instance.fetch_materializations(key, limit=1).records
    return records[0].storage_id if records else None


def definition_changed_at(instance: dg.DagsterInstance, key: dg.AssetKey, scan: int = 500) -> int | None:
    """The storage id of an asset's first materialization with its current definition (fingerprint), when
    an earlier one had another; None when it has only ever had one definition (within ``scan`` records)."""
    records = instance.fetch_materializations(key, limit=scan).records
    if not records:
        return None

    def fingerprint(record) -> str | None:
        value = record.asset_materialization.metadata.get("fingerprint") if record.asset_materialization else None
        return value.value if value is not None else None

    current = fingerprint(records[0])
    first = records[0].storage_id
    for record in records[1:]:
        if fingerprint(record) != current:
            return first
        first = record.storage_id
    return None


def _windows(partitions: dg.TimeWindowPartitionsDefinition, ids: dict[str, int]) -> list[tuple[TimeWindow, int]]:
    out = []
    now = clock.now()
    for key, sid in ids.items():
        window = window_of_key(partitions, key, now=now)
        if window is not None:  # else a key of an older partitions definition
            out.append((window, sid))
    return out


def stale_intervals(instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator) -> Stale:
    """The stale intervals of a partitioned model, or whether an unpartitioned one is stale (``causes``)."""
    upstreams = project.upstream_models(model)
    if not upstreams or not model.has_table:
        return Stale()
    partitions = translator.get_partitions_def(model)
    key = translator.get_asset_key(model)
    if not isinstance(partitions, dg.TimeWindowPartitionsDefinition):
        own = current_id(instance, key)
        if own is None:
            return Stale()
        causes = tuple(u.name for u in upstreams if (latest_id(instance, translator.get_asset_key(u)) or 0) > own)
        return Stale(causes=causes)
    own_ids = current_ids(instance, key)
    if not own_ids:
        return Stale()
    own = dict((w.start, (w, sid)) for w, sid in _windows(partitions, own_ids))
    oldest = min(own_ids.values())
    unit = model.unit
    stale: list[TimeWindow] = []
    causes: list[str] = []
    for upstream in upstreams:
        up_partitions = translator.get_partitions_def(upstream)
        if not isinstance(up_partitions, dg.TimeWindowPartitionsDefinition):
            changed_at = definition_changed_at(instance, translator.get_asset_key(upstream))
            if changed_at is not None:
                older = [w for w, sid in own.values() if sid < changed_at]
                if older:
                    stale += older
                    causes.append(upstream.name)
            continue
        bound = input_bound(project, model.name, upstream.name)
        hit = False
        newer = {k: sid for k, sid in latest_ids(instance, translator.get_asset_key(upstream)).items() if sid > oldest}
        for window, sid in _windows(up_partitions, newer):
            # Intervals of this model whose read window (widened by the lookback) overlaps the upstream interval.
            reach = window.widen(bound.after, bound.before) if bound is not None else window
            cursor = unit.floor(reach.start)
            while cursor < reach.end:
                mine = own.get(cursor)
                if mine is not None and mine[1] < sid:
                    stale.append(mine[0])
                    hit = True
                cursor = unit.next(cursor)
        if hit:
            causes.append(upstream.name)
    return Stale(tuple(merge(stale)), tuple(causes))
