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

import hashlib
from dataclasses import dataclass, field
from datetime import datetime

import dagster as dg
from dagster._utils.schedules import reverse_cron_string_iterator

from incremental_assets import delta
from incremental_assets.analysis.safety import same_rows_from_same_inputs
from incremental_assets.model import clock
from incremental_assets.model.cron import expand_cron
from incremental_assets.model.intervals import TimeWindow, merge, to_utc
from incremental_assets.model.kinds import Full, Seed, View
from incremental_assets.model.project import Project
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration.confirm import current_id, current_ids, latest_ids
from incremental_assets.orchestration.integrity_since import read_state, write_state
from incremental_assets.orchestration.partition_keys import key_of, window_of_key
from incremental_assets.orchestration.source_watch import watched
from incremental_assets.orchestration.translator import ModelTranslator
from incremental_assets.plan.analyses import input_bound
from incremental_assets.plan.rebuild import definition_changed

KEY_PREFIX = "incremental_assets.stale:"


@dataclass(frozen=True)
class Stale:
    """Intervals of one model to compute again, and which upstream models made them stale."""

    windows: tuple[TimeWindow, ...] = ()
    causes: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.windows or self.causes)


def latest_id(instance: dg.DagsterInstance, key: dg.AssetKey) -> int | None:
    """The storage id of an asset's latest materialization (any partition)."""
    records = instance.fetch_materializations(key, limit=1).records
    return records[0].storage_id if records else None


def _windows(partitions: dg.TimeWindowPartitionsDefinition, ids: dict[str, int]) -> list[tuple[TimeWindow, int]]:
    out = []
    now = clock.now()
    for key, sid in ids.items():
        window = window_of_key(partitions, key, now=now)
        if window is not None:  # else a key of an older partitions definition
            out.append((window, sid))
    return out


def stale_intervals(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator
) -> Stale:
    """The stale intervals of a partitioned model, or whether an unpartitioned one is stale (``causes``)."""
    upstreams = project.upstream_models(model)
    if not upstreams or not model.has_table:
        return Stale()
    partitions = translator.get_partitions_def(model)
    key = translator.get_asset_key(model)
    if not isinstance(partitions, dg.TimeWindowPartitionsDefinition):
        own = current_id(instance, key)
        return Stale(causes=_newer_upstreams(instance, translator, upstreams, own)) if own is not None else Stale()
    judge = _Judge(instance, project, model, translator, partitions)
    state = read_state(instance, KEY_PREFIX + model.name, StaleLook)
    identity = _identity(model, upstreams, translator)
    looked = judge.look(identity, state if state is not None and state.identity == identity else None)
    looked = judge.still_stale(looked)
    if looked != state:
        write_state(instance, KEY_PREFIX + model.name, looked)
    return judge.answer(looked, upstreams)


def whole_table_current(
    instance: dg.DagsterInstance,
    project: Project,
    model: SqlModel,
    translator: ModelTranslator,
    pending: bool,
    now: datetime,
) -> bool:
    """Whether a FULL, materialized VIEW or SEED model's table is what running it now would write, so
    ``run --auto`` can leave it: materialized with its current definition, no new data noticed in a source
    it reads (``pending``), no upstream model materialized after it, nothing it reads unseen by either
    (see :func:`inputs_seen`; such a model runs every time), and, for a query whose rows depend on when it
    runs (a macro, the clock, a random draw), no tick of its cron since its last run (see
    :func:`unseen_cron_tick`), as the automation sensor decides."""
    if pending or not inputs_seen(project, model):
        return False
    uri = project.settings.table_location(model.name)
    own = current_id(instance, translator.get_asset_key(model))
    if own is None or not delta.exists(uri) or definition_changed(model, delta.built_with(uri)):
        return False
    if _newer_upstreams(instance, translator, project.upstream_models(model), own):
        return False
    return same_rows_from_same_inputs(model.query) or unseen_cron_tick(instance, model, translator, now) is None


def is_whole_table(model: SqlModel) -> bool:
    """A FULL, materialized VIEW or SEED SQL model: one table, computed whole from what it reads (a seed:
    from its CSV, whose content its fingerprint covers, so an unchanged seed is never written again)."""
    kind = model.kind
    whole = isinstance(kind, (Full, Seed)) or (isinstance(kind, View) and kind.materialized)
    return type(model) is SqlModel and whole


def inputs_seen(project: Project, model: SqlModel) -> bool:
    """Whether every change of what a whole-table model reads is seen by the source watch or Dagster's
    records: no statements of its own, no embedded model, and every input an upstream model with a table
    or a watched source (not a plain view, an external table or a source in an unwatched format)."""
    if not is_whole_table(model) or model.embeds or model.pre_statements or model.post_statements:
        return False
    for name in model.depends_on:
        upstream, source = project.models.get(name), project.sources.get(name)
        if upstream is not None and not upstream.has_table:
            return False
        if upstream is None and (source is None or not watched(source)):
            return False
    return True


WHOLE_TABLE_CRON = "@daily"  # a whole-table model without a cron of its own: once a day, as in SQLMesh


def unseen_cron_tick(
    instance: dg.DagsterInstance, model: SqlModel, translator: ModelTranslator, now: datetime
) -> datetime | None:
    """The latest tick of a whole-table model's cron (``@daily`` without one, in UTC as its schedule) at or
    before ``now`` when its latest materialization was computed before that tick (its execution time, the
    instant its clock and date macros read; for an older record, its run's start); None when it was
    computed after, or never (a reason of its own)."""
    records = instance.fetch_materializations(translator.get_asset_key(model), limit=1).records
    if not records:
        return None
    tick = next(reverse_cron_string_iterator(now.timestamp(), expand_cron(model.cron or WHOLE_TABLE_CRON), "UTC"))
    materialization = records[0].asset_materialization
    given = materialization.metadata.get("execution_time") if materialization is not None else None
    if given is not None and isinstance(given.value, str):
        computed = to_utc(given.value).timestamp()
    else:
        run = instance.get_run_record_by_id(records[0].run_id)
        computed = run.start_time if run is not None and run.start_time else records[0].timestamp
    return tick if computed < tick.timestamp() else None


def why_current(model: SqlModel) -> str:
    """What ``run --auto`` says of a whole-table model it leaves alone."""
    if isinstance(model.kind, Seed):
        return "its CSV and definition are unchanged since its table was written"
    if same_rows_from_same_inputs(model.query):
        return "nothing it reads changed since its last run"
    return f"nothing it reads changed and its cron ({model.cron or WHOLE_TABLE_CRON}) did not tick since its last run"


def cron_reason(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator, now: datetime
) -> str | None:
    """Why the automation sensor runs a whole-table model again although nothing it sees changed: its rows
    depend on when it runs, or it reads what the watch cannot see, and its cron ticked since its last run
    (None: neither)."""
    if not is_whole_table(model) or (inputs_seen(project, model) and same_rows_from_same_inputs(model.query)):
        return None
    tick = unseen_cron_tick(instance, model, translator, now)
    if tick is None:
        return None
    return f"its cron ({model.cron or WHOLE_TABLE_CRON}) ticked at {tick:%Y-%m-%d %H:%M} UTC since its last run"


def _newer_upstreams(
    instance: dg.DagsterInstance, translator: ModelTranslator, upstreams: list[SqlModel], own: int
) -> tuple[str, ...]:
    """The upstream models materialized after storage id ``own`` (an unpartitioned model's current one)."""
    return tuple(u.name for u in upstreams if (latest_id(instance, translator.get_asset_key(u)) or 0) > own)


def stale_intervals_from_everything(
    instance: dg.DagsterInstance, project: Project, model: SqlModel, translator: ModelTranslator
) -> Stale:
    """What :func:`stale_intervals` answers for a partitioned model when it judges every recorded event
    again, remembering nothing (the reference its look from where it stopped must agree with)."""
    partitions = translator.get_partitions_def(model)
    assert isinstance(partitions, dg.TimeWindowPartitionsDefinition), "a partitioned model"
    judge = _Judge(instance, project, model, translator, partitions)
    looked = judge.still_stale(judge.look("", None))
    return judge.answer(looked, project.upstream_models(model))


@dataclass(frozen=True)
class StaleLook:
    """Where the staleness of a partitioned model was last judged (kept in the instance's key-value store).

    ``cursors``: per upstream model, every materialization up to that storage id was judged.
    ``fingerprints``: per unpartitioned upstream, the definition of its latest materialization and the
    storage id of its first materialization with it. ``stale``: own partition key -> [the storage id
    that made it stale, the upstream model]; an entry holds until the partition is current after it.
    ``identity``: the definitions (this model's and its upstreams') the judgement holds for."""

    identity: str
    cursors: dict[str, int] = field(default_factory=dict)
    fingerprints: dict[str, list] = field(default_factory=dict)
    stale: dict[str, list] = field(default_factory=dict)


def _identity(model: SqlModel, upstreams: list[SqlModel], translator: ModelTranslator) -> str:
    parts = [model.fingerprint, repr(translator.get_partitions_def(model))]
    parts += [f"{u.name}={u.fingerprint}:{translator.get_partitions_def(u)!r}" for u in upstreams]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


class _Judge:
    """Judges one partitioned model's intervals against its upstreams' materializations."""

    def __init__(self, instance, project: Project, model: SqlModel, translator: ModelTranslator, partitions) -> None:
        self.instance, self.project, self.model, self.translator, self.partitions = (
            instance,
            project,
            model,
            translator,
            partitions,
        )
        self.key = translator.get_asset_key(model)

    def look(self, identity: str, state: StaleLook | None) -> StaleLook:
        """The upstream materializations recorded after where ``state`` stopped, added to its judgement;
        without a state, every own interval against the latest materialization of every upstream interval."""
        own_ids = current_ids(self.instance, self.key) if state is None else None
        looked = StaleLook(identity)
        if state is not None:
            looked = StaleLook(
                identity, dict(state.cursors), {k: list(v) for k, v in state.fingerprints.items()}, dict(state.stale)
            )
        for upstream in self.project.upstream_models(self.model):
            up_key = self.translator.get_asset_key(upstream)
            after = None if state is None else state.cursors.get(upstream.name, 0)
            up_partitions = self.translator.get_partitions_def(upstream)
            if not isinstance(up_partitions, dg.TimeWindowPartitionsDefinition):
                self._unpartitioned(looked, upstream, fetch_definitions(self.instance, up_key, after), own_ids)
                continue
            ids = latest_ids(self.instance, up_key, after_cursor=after)
            looked.cursors[upstream.name] = max([after or 0, *ids.values()])
            if own_ids is not None:  # everything: only what is newer than the oldest own interval can stale one
                oldest = min(own_ids.values(), default=None)
                ids = {k: sid for k, sid in ids.items() if oldest is not None and sid > oldest}
            self._partitioned(looked, upstream, up_partitions, ids, own_ids)
        return looked

    def _partitioned(
        self,
        looked: StaleLook,
        upstream: SqlModel,
        up_partitions: dg.TimeWindowPartitionsDefinition,
        newer: dict[str, int],
        own_ids: dict[str, int] | None,
    ) -> None:
        """Own intervals whose read window (widened by the lookback) overlaps an upstream interval
        materialized at ``newer``'s storage id become candidates (judged by :meth:`still_stale`)."""
        bound = input_bound(self.project, self.model.name, upstream.name)
        unit = self.model.unit
        for window, sid in _windows(up_partitions, newer):
            reach = window.widen(bound.after, bound.before) if bound is not None else window
            cursor = unit.floor(reach.start)
            while cursor < reach.end:
                own_key = key_of(self.partitions, cursor)
                if own_ids is None or own_key in own_ids:
                    self._candidate(looked, own_key, sid, upstream.name)
                cursor = unit.next(cursor)

    def _unpartitioned(
        self, looked: StaleLook, upstream: SqlModel, records: list[tuple[int, str | None]], own_ids
    ) -> None:
        """An unpartitioned upstream whose definition changed: every own interval current before its
        first materialization with the new definition is a candidate."""
        seen = looked.fingerprints.get(upstream.name)
        changed_at = None
        for sid, fingerprint in records:  # oldest first
            if seen is not None and fingerprint != seen[0]:
                changed_at = sid
            if seen is None or fingerprint != seen[0]:
                seen = [fingerprint, sid]
            looked.cursors[upstream.name] = sid
        if seen is not None:
            looked.fingerprints[upstream.name] = seen
        if changed_at is None:  # no new definition among the records
            return
        for own_key, sid in (own_ids if own_ids is not None else current_ids(self.instance, self.key)).items():
            if sid < changed_at:
                self._candidate(looked, own_key, changed_at, upstream.name)

    @staticmethod
    def _candidate(looked: StaleLook, own_key: str, sid: int, upstream: str) -> None:
        known = looked.stale.get(own_key)
        if known is None or known[0] < sid:
            looked.stale[own_key] = [sid, upstream]

    def still_stale(self, looked: StaleLook) -> StaleLook:
        """The candidates whose interval was not materialized (or confirmed) again after what made them stale."""
        if not looked.stale:
            return looked
        own = current_ids(self.instance, self.key, set(looked.stale))
        stale = {k: v for k, v in looked.stale.items() if k in own and own[k] < v[0]}
        return StaleLook(looked.identity, looked.cursors, looked.fingerprints, stale)

    def answer(self, looked: StaleLook, upstreams: list[SqlModel]) -> Stale:
        windows = [w for w, _ in _windows(self.partitions, {k: v[0] for k, v in looked.stale.items()})]
        named = {v[1] for v in looked.stale.values()}
        return Stale(tuple(merge(windows)), tuple(u.name for u in upstreams if u.name in named))


def fetch_definitions(
    instance: dg.DagsterInstance, key: dg.AssetKey, after: int | None, scan: int = 500
) -> list[tuple[int, str | None]]:
    """(storage id, fingerprint) of an asset's materializations after the storage id ``after``, oldest
    first (with ``after`` None: the latest ``scan``)."""
    if after is None:
        records = list(instance.fetch_materializations(key, limit=scan).records)
    else:
        records, cursor = [], None
        while True:
            page = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=key, after_storage_id=after), limit=scan, cursor=cursor, ascending=True
            )
            records += page.records
            if not page.has_more:
                break
            cursor = page.cursor

    def fingerprint(record) -> str | None:
        value = record.asset_materialization.metadata.get("fingerprint") if record.asset_materialization else None
        return value.value if value is not None else None

    return sorted((r.storage_id, fingerprint(r)) for r in records)
