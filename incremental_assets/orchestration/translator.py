"""How a model looks in Dagster: key, group, owners, tags, partitions, policies, metadata.

:meth:`ModelTranslator.get_asset_spec` assembles a model's whole :class:`dagster.AssetSpec` from the
``get_*`` methods, as dagster-dbt's translator does. Subclass :class:`ModelTranslator` and override one
``get_*`` method to change one aspect, or ``get_asset_spec`` to change the spec as a whole:

>>> class Prefixed(ModelTranslator):
...     def get_asset_key(self, model):
...         return super().get_asset_key(model).with_prefix("lake")
>>> class Tagged(ModelTranslator):
...     def get_asset_spec(self, project, model, columns=None):
...         return super().get_asset_spec(project, model, columns).merge_attributes(tags={"team": "sales"})
"""

from __future__ import annotations

import functools
import re
from datetime import datetime
from typing import Any, Mapping, Sequence

import dagster as dg

from incremental_assets.analysis import SourceBound
from incremental_assets.model.cron import expand_cron
from incremental_assets.model.intervals import IntervalUnit
from incremental_assets.model.kinds import IncrementalByTimeRange, Seed, View
from incremental_assets.model.project import Project, Source
from incremental_assets.model.sql_model import SqlModel
from incremental_assets.orchestration import table_metadata
from incremental_assets.orchestration.freshness import freshness_policy
from incremental_assets.orchestration.table_metadata import ModelColumns
from incremental_assets.plan.analyses import input_bound

_TAG_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def partitions_for(
    unit: IntervalUnit | str, start: datetime, end: datetime | None = None
) -> dg.TimeWindowPartitionsDefinition:
    """Dagster partitions whose keys are the model's intervals, in UTC.

    >>> from incremental_assets.model.intervals import utc
    >>> partitions_for("week", utc(2023, 12, 31)).get_first_partition_key()
    '2023-12-31'
    """
    return _partitions(IntervalUnit.of(unit), start.replace(tzinfo=None), end.replace(tzinfo=None) if end else None)


@functools.lru_cache(maxsize=1024)
def _partitions(unit: IntervalUnit, start: datetime, end: datetime | None) -> dg.TimeWindowPartitionsDefinition:
    """One definition per unit, start and end, shared by the models that have them (Dagster compares and
    hashes partitions definitions often while building the asset graph: the same object is the cheapest)."""
    return dg.TimeWindowPartitionsDefinition(
        start=start,
        end=end,
        cron_schedule=unit.cron,
        fmt=unit.partition_format,
        timezone="UTC",
    )


# Named automation conditions a component's YAML can ask for (``automation_condition: eager``).
AUTOMATION_CONDITIONS = ("eager", "on_cron", "on_missing")


class ModelTranslator:
    """Maps models and sources to Dagster concepts; every method can be overridden.

    The settings a Component's YAML exposes are constructor arguments: ``key_prefix`` (prepended to
    every model and source key), ``group_name`` (instead of the model's schema), ``tags`` (added to
    every model's) and ``automation_condition`` (one of :data:`AUTOMATION_CONDITIONS`, for deployments
    that drive runs with Dagster's declarative automation instead of the project's sensor).
    """

    def __init__(
        self,
        *,
        key_prefix: Sequence[str] = (),
        group_name: str | None = None,
        tags: Mapping[str, str] | None = None,
        automation_condition: str | None = None,
    ):
        if automation_condition is not None and automation_condition not in AUTOMATION_CONDITIONS:
            raise ValueError(
                f"automation_condition '{automation_condition}' is not one of {', '.join(AUTOMATION_CONDITIONS)}"
            )
        self.key_prefix = tuple(key_prefix)
        self.group_name = group_name
        self.extra_tags = dict(tags or {})
        self.automation_condition = automation_condition

    def get_asset_spec(self, project: Project, model: SqlModel, columns: ModelColumns | None = None) -> dg.AssetSpec:
        """The model's asset spec: key, upstream models and sources (with their partition mappings),
        group, description, owners, tags, kinds, code version, partitions, metadata, freshness and
        automation, each from its ``get_*`` method. ``columns`` are the model's columns as
        :func:`.table_metadata.project_columns` found them.

        Override it to change the spec as a whole (tags, group, metadata). Runs find a model's asset by
        :meth:`get_asset_key` and its intervals by :meth:`get_partitions_def`: change those two there."""
        uri = project.settings.table_location(model.name)
        table = self.get_table_metadata(model, uri, columns, self.table_key_of(project))
        return dg.AssetSpec(
            key=self.get_asset_key(model),
            deps=self.get_deps(project, model),
            description=self.get_description(model),
            metadata={**self.get_metadata(model), **table},
            group_name=self.get_group_name(model),
            code_version=self.get_code_version(model),
            automation_condition=self.get_automation_condition(model),
            owners=self.get_owners(model),
            tags=self.get_tags(model),
            kinds=self.get_kinds(model),
            partitions_def=self.get_partitions_def(model),
            freshness_policy=self.get_freshness_policy(model),
        )

    def get_source_spec(self, source: Source) -> dg.AssetSpec:
        """A source's asset spec: a table no model writes, in the group ``sources``."""
        key = self.get_source_key(source)
        return dg.AssetSpec(key=key, group_name="sources", metadata=source_metadata(source), kinds={source.format})

    def get_deps(self, project: Project, model: SqlModel) -> list[dg.AssetDep]:
        """Upstream models (with partition mappings that include the lookback) and sources."""
        deps = []
        for name in model.depends_on:
            if name == model.name:
                continue
            if name in project.models:
                upstream = project.models[name]
                mapping = self.get_partition_mapping(model, upstream, input_bound(project, model.name, name))
                deps.append(dg.AssetDep(self.get_asset_key(upstream), partition_mapping=mapping))
            else:
                deps.append(dg.AssetDep(self.get_source_key(project.sources[name])))
        return deps

    def get_check_specs(self, project: Project, model: SqlModel, key: dg.AssetKey) -> list[dg.AssetCheckSpec]:
        """The checks of the model's asset ``key``: its audits and assertions, and ``definition_current``
        (see :mod:`.checks`)."""
        from incremental_assets.orchestration.checks import check_specs  # runs audits with Spark: imported when used

        return check_specs(project, model, key)

    def table_key_of(self, project: Project) -> Any:
        """A table name's asset key (None: not an asset of the project), for column lineage."""

        def key_of(table: str) -> dg.AssetKey | None:
            if table in project.models:
                return self.get_asset_key(project.models[table])
            return self.get_source_key(project.sources[table]) if table in project.sources else None

        return key_of

    def get_asset_key(self, model: SqlModel) -> dg.AssetKey:
        return dg.AssetKey([*self.key_prefix, *model.name.split(".")])

    def get_source_key(self, source: Source) -> dg.AssetKey:
        return dg.AssetKey([*self.key_prefix, *source.name.split(".")])

    def get_group_name(self, model: SqlModel) -> str:
        return self.group_name or re.sub(r"[^A-Za-z0-9_]", "_", model.schema)

    def get_description(self, model: SqlModel) -> str | None:
        return model.description

    def get_owners(self, model: SqlModel) -> list[str]:
        if not model.owner:
            return []
        owners = []
        for owner in re.split(r"[,\s]+", model.owner.strip()):
            if not owner:
                continue
            owners.append(owner if "@" in owner or owner.startswith("team:") else f"team:{_TAG_CHARS.sub('_', owner)}")
        return owners

    def get_tags(self, model: SqlModel) -> dict[str, str]:
        return {**{_TAG_CHARS.sub("_", tag)[:63]: "" for tag in model.tags}, **self.extra_tags}

    def get_automation_condition(self, model: SqlModel) -> dg.AutomationCondition | None:
        if self.automation_condition == "eager":
            return dg.AutomationCondition.eager()
        if self.automation_condition == "on_missing":
            return dg.AutomationCondition.on_missing()
        if self.automation_condition != "on_cron":
            return None
        cron = (
            expand_cron(model.cron) if model.cron else (model.unit.cron if model.is_incremental else None)
        )  # as the model's schedule
        return dg.AutomationCondition.on_cron(cron, cron_timezone="UTC") if cron else None

    def get_freshness_policy(self, model: SqlModel) -> dg.FreshnessPolicy | None:
        """From the model's cron, or its header's ``freshness`` (see :mod:`.freshness`)."""
        return freshness_policy(model)

    def get_kinds(self, model: SqlModel) -> set[str]:
        return {"spark", "sql"} if isinstance(model.kind, View) and not model.kind.materialized else {"spark", "delta"}

    def get_code_version(self, model: SqlModel) -> str:
        return model.fingerprint

    def get_partitions_def(self, model: SqlModel) -> dg.PartitionsDefinition | None:
        if not isinstance(model.kind, IncrementalByTimeRange):
            return None
        assert model.start is not None
        return partitions_for(model.unit, model.start, model.end)

    def get_backfill_policy(self, model: SqlModel, run_size: int | None = None) -> dg.BackfillPolicy | None:
        """The execution class as a backfill policy: FullyBatchSafe runs any range as one Spark job
        (single run), BoundedSafe(n) and batch_size cut it in runs of n intervals (``run_size``, from
        :func:`incremental_assets.plan.analyses.run_size`), PerPartitionOnly runs one interval at a time."""
        if not isinstance(model.kind, IncrementalByTimeRange):
            return None
        return dg.BackfillPolicy.multi_run(run_size) if run_size else dg.BackfillPolicy.single_run()

    def get_partition_mapping(
        self, model: SqlModel, upstream: SqlModel, bound: SourceBound | None = None
    ) -> dg.PartitionMapping | None:
        """Time-to-time dependencies widened by the derived lookback, in the downstream's intervals:
        a daily model that reads yesterday's upstream rows depends on yesterday's upstream partition."""
        if not (isinstance(model.kind, IncrementalByTimeRange) and isinstance(upstream.kind, IncrementalByTimeRange)):
            return None
        if bound is None:
            return dg.TimeWindowPartitionMapping()
        length = model.unit.nominal
        before = -(-bound.before // length)  # ceil division of timedeltas
        after = -(-bound.after // length)
        return dg.TimeWindowPartitionMapping(start_offset=-int(before), end_offset=int(after))

    def get_column_schema(self, model: SqlModel, columns: ModelColumns | None = None) -> dg.TableSchema | None:
        """Typed columns: ``columns`` as :func:`.table_metadata.project_columns` found them (header,
        table, inference), else the header's types and the query's column names."""
        from incremental_assets.load.query import output_columns

        if columns is not None and columns.types:
            return table_metadata.column_schema(columns.types, model.column_descriptions)
        names = list(model.columns) or output_columns(model.query) or []
        if not names:
            return None
        return table_metadata.column_schema(
            {n: model.columns.get(n, table_metadata.UNKNOWN_TYPE) for n in names}, model.column_descriptions
        )

    def get_table_name(self, model: SqlModel) -> str:
        """``dagster/table_name``: the model's ``schema.table``, as its SQL readers write it."""
        return model.name

    def get_code_references(self, model: SqlModel) -> dg.CodeReferencesMetadataValue:
        return table_metadata.code_references(model)

    def get_table_metadata(
        self, model: SqlModel, uri: str, columns: ModelColumns | None, key_of: Any
    ) -> dict[str, object]:
        """Dagster's table metadata of a model's spec: name, location, typed columns, column lineage,
        code references. ``key_of`` maps a table name to its asset key (None: not an asset)."""
        meta: dict[str, object] = {
            "dagster/table_name": self.get_table_name(model),
            "dagster/code_references": self.get_code_references(model),
        }
        if model.has_table:
            meta["dagster/uri"] = uri
        schema = self.get_column_schema(model, columns)
        if schema is not None:
            meta["dagster/column_schema"] = schema
        lineage = table_metadata.column_lineage(columns.lineage, key_of) if columns is not None else None
        if lineage is not None:
            meta["dagster/column_lineage"] = lineage
        return meta

    def get_metadata(self, model: SqlModel) -> dict[str, object]:
        meta: dict[str, object] = {
            "kind": model.kind.name,
            "model_file": dg.MetadataValue.path(str(model.path)),
            "dialect": model.dialect,
        }
        if isinstance(model.kind, IncrementalByTimeRange):
            meta["time_column"] = model.kind.time_column
            meta["interval_unit"] = model.unit.value
            if model.kind.batch_size:
                meta["batch_size"] = model.kind.batch_size
        if model.forward_only:
            meta["forward_only"] = True
        if isinstance(model.kind, Seed):
            meta["seed_file"] = dg.MetadataValue.path(model.kind.location)
        if model.embeds:
            meta["embeds"] = ", ".join(model.embeds)
        if model.grains:
            meta["grain"] = ", ".join(model.grains)
        if model.cron:
            meta["cron"] = model.cron
        if isinstance(model.kind, IncrementalByTimeRange):
            meta["partition_expr"] = model.kind.time_column  # how dagster-deltalake's IO managers read one partition
        schema = self.get_column_schema(model)
        if schema is not None:
            meta["dagster/column_schema"] = schema
        for key, value in sorted(model.metadata.items()):
            meta[f"property/{key}"] = value
        return meta


def source_metadata(source: Source) -> dict[str, Any]:
    """A source's metadata: format, location, table name and, when declared, time column and columns."""
    meta: dict[str, Any] = {
        "format": source.format,
        "location": dg.MetadataValue.path(source.location),
        "dagster/table_name": source.name,
        "dagster/uri": source.location,
    }
    if source.time_column:
        meta["time_column"] = source.time_column
        meta["interval_unit"] = source.interval_unit
    if source.columns:
        columns = [dg.TableColumn(name, type_) for name, type_ in source.columns.items()]
        meta["dagster/column_schema"] = dg.TableSchema(columns=columns)
    return meta
