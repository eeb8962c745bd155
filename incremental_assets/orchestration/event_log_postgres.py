"""The event log on Postgres (dagster-postgres): a batch of events, planned materializations included, in
one transaction.

dagster-postgres batches a run's materializations but stores planned materializations (one per partition
of a ranged run) one at a time, each in its own autocommitted statements. Configured as the instance's
``event_log_storage`` (with the ``postgres_url`` / ``postgres_db`` settings of dagster-postgres), this class
writes every batch Dagster hands it as one transaction: the events, their asset event tags, the asset keys
rows and asset check executions, exactly the rows dagster-postgres writes. Needs ``dagster-postgres``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dagster._core.events import ASSET_CHECK_EVENTS, ASSET_EVENTS
from dagster._core.events.log import EventLogEntry
from dagster._serdes import ConfigurableClassData
from dagster_postgres.event_log import PostgresEventLogStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

from incremental_assets.orchestration.event_log import (
    enable_event_batches,
    insert_returning_ids,
    last_per_asset_and_type,
)


class BatchedPostgresEventLogStorage(PostgresEventLogStorage):
    """dagster-postgres's event log whose batch write is one transaction. In dagster.yaml::

    event_log_storage:
      module: incremental_assets.orchestration.event_log_postgres
      class: BatchedPostgresEventLogStorage
      config:
        postgres_url: {env: DAGSTER_PG_URL}
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        enable_event_batches()

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData | None, config_value: Any
    ) -> "BatchedPostgresEventLogStorage":
        return cls(
            inst_data=inst_data,
            postgres_url=pg_url_from_config(config_value),
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            token_provider=get_token_provider_from_config(config_value),
        )

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        events = [
            e for e in events if not (e.dagster_event is not None and e.dagster_event.is_asset_failed_to_materialize)
        ]
        if not events:
            return
        rows = [self._event_to_row(event) for event in events]
        with self._connect() as autocommit:
            # The engine autocommits every statement; this connection runs the batch as one transaction.
            conn = autocommit.execution_options(isolation_level="READ COMMITTED")
            with conn.begin():
                ids = insert_returning_ids(conn, rows)
                assets = [
                    i
                    for i, e in enumerate(events)
                    if e.dagster_event_type in ASSET_EVENTS
                    and e.dagster_event is not None
                    and e.dagster_event.asset_key
                ]
                if assets:
                    self._store_asset_event_tags(conn, [events[i] for i in assets], [ids[i] for i in assets])
                for i in last_per_asset_and_type(events, assets):
                    self._store_asset_event(conn, events[i], ids[i])
        for i, event in enumerate(events):
            if event.dagster_event_type in ASSET_CHECK_EVENTS:
                self.store_asset_check_event(event, ids[i])
