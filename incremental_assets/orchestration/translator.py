"""How a model looks in Dagster: key, group, owners, tags, partitions, policies, metadata.

Subclass :class:`ModelTranslator` and override any ``get_*`` method to change one aspect, as with
dagster-dbt's translator:

>>> class Prefixed(ModelTranslator):
...     def get_asset_key(self, model):
...         return super().get_asset_key(model).with_prefix("lake")
"""

from __future__ import annotations

import re
from datetime import datetime

import dagster as dg

from incremental_assets.analysis import SourceBound
from incremental_assets.model.intervals import IntervalUnit
from incremental_assets.model.kinds import IncrementalByTimeRange, Seed, View
from incremental_assets.model.project import Source
from incremental_assets.model.sql_model import SqlModel

_TAG_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def partitions_for(unit: IntervalUnit | str, start: datetime, end: datetime | None = None) -> dg.TimeWindowPartitionsDefinition:
    """Dagster partitions whose keys are the model's intervals, in UTC.

    >>> from incremental_assets.model.intervals import utc
    >>> partitions_for("week", utc(2023, 12, 31)).get_first_partition_key()
    '2023-12-31'
    """
    unit = IntervalUnit.of(unit)
    return dg.TimeWindowPartitionsDefinition(
        start=start.replace(tzinfo=None),
        end=end.replace(tzinfo=None) if end else None,
        cron_schedule=unit.cron,
        fmt=unit.partition_format,
        timezone="UTC",
    )


class ModelTranslator:
    """Maps models and sources to Dagster concepts; every method can be overridden."""

    def get_asset_key(self, model: SqlModel) -> dg.AssetKey:
        return dg.AssetKey(model.name.split("."))

    def get_source_key(self, source: Source) -> dg.AssetKey:
        return dg.AssetKey(source.name.split("."))

    def get_group_name(self, model: SqlModel) -> str:
        return re.sub(r"[^A-Za-z0-9_]", "_", model.schema)

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
        return {_TAG_CHARS.sub("_", tag)[:63]: "" for tag in model.tags}

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
        :func:`incremental_assets.plan.compile.run_size`), PerPartitionOnly runs one interval at a time."""
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

    def get_column_schema(self, model: SqlModel) -> dg.TableSchema | None:
        from incremental_assets.load.query import output_columns

        names = list(model.columns) or output_columns(model.query) or []
        if not names:
            return None
        return dg.TableSchema(
            columns=[
                dg.TableColumn(name=n, type=model.columns.get(n, "unknown"), description=model.column_descriptions.get(n))
                for n in names
            ]
        )

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
        schema = self.get_column_schema(model)
        if schema is not None:
            meta["dagster/column_schema"] = schema
        for key, value in sorted(model.metadata.items()):
            meta[f"property/{key}"] = value
        return meta
