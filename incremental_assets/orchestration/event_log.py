"""The project's Dagster event log on SQLite: Dagster's own storage, with a batch written in one transaction.

A run over a range of partitions records two events per partition (materialization planned, then
materialized). Dagster's ``SqliteEventLogStorage`` writes each event in its own transactions, in the
run's database and in the cross-run index (~30 ms each: 720 hourly partitions spent 30 s there), and its
``store_event_batch`` only loops. :class:`BatchedSqliteEventLogStorage` keeps every table, row and index
Dagster maintains (the run's events, the index's mirrored events, the asset keys table, asset event tags,
asset check executions, mirrored run status events) and writes a whole batch as ONE transaction per
database. Dagster hands a storage batches when ``DAGSTER_EVENT_BATCH_SIZE`` is set; opening this storage
sets it (unless it is set already) in every process that opens the instance: the CLI, ``dagster dev``,
the daemon and its run workers.

A batch recorded whole or not at all also means a run killed while its materializations are written
leaves none of its partitions recorded rather than some; the table's commit it did make is then recorded
from the Delta log by the next run (``reconcile``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Sequence
from typing import Any

import sqlalchemy as db
from alembic.runtime.migration import MigrationContext
from dagster._config import StringSource
from dagster._core.events import ASSET_CHECK_EVENTS, ASSET_EVENTS, EVENT_TYPE_TO_PIPELINE_RUN_STATUS, DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.schema import SqlEventLogStorageMetadata, SqlEventLogStorageTable
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.sql import safe_commit
from dagster._core.storage.sqlite import create_db_conn_string
from dagster._serdes import ConfigurableClassData
from sqlalchemy.pool import NullPool

from incremental_assets.errors import IncrementalAssetsError
from incremental_assets.orchestration.sqlite_storage import is_set_up, migration_scripts, pooled_engine, setup_lock
from incremental_assets.spark import faults

BATCH_SIZE_ENV = "DAGSTER_EVENT_BATCH_SIZE"
# Dagster ends a batch at the last partition of a run's output anyway; this only caps its memory.
DEFAULT_BATCH_SIZE = "10000"
# An empty run database, copied for each new run (in ``history/``, beside ``runs/``: not a ``*.db`` there).
TEMPLATE_NAME = "run-events-template.sqlite"


def enable_event_batches() -> None:
    """Ask Dagster to hand the event log whole batches (a user's own setting, even ``0``, is kept)."""
    os.environ.setdefault(BATCH_SIZE_ENV, DEFAULT_BATCH_SIZE)


def event_logs_directory(dagster_home: str) -> str:
    """Where Dagster's default SQLite storage keeps event logs under an instance folder."""
    return os.path.join(os.path.abspath(dagster_home), "history", "runs", "")


class BatchedSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's SQLite event log (same files, same schema) whose batch write is one transaction per
    database. Configured in the project's ``dagster.yaml`` with the instance folder::

        event_log_storage:
          module: incremental_assets.orchestration.event_log
          class: BatchedSqliteEventLogStorage
          config:
            dagster_home: {env: DAGSTER_HOME}
    """

    def __init__(self, dagster_home: str, inst_data: ConfigurableClassData | None = None):
        self._dagster_home = os.path.abspath(dagster_home)
        if is_set_up(create_db_conn_string(event_logs_directory(dagster_home), "index")):
            super().__init__(event_logs_directory(dagster_home), inst_data=inst_data)
        else:
            with setup_lock(dagster_home):  # one process creates and stamps the index
                super().__init__(event_logs_directory(dagster_home), inst_data=inst_data)
        enable_event_batches()

    def register_instance(self, instance: Any) -> None:
        """Refuse to serve an instance whose folder is not the configured one: its runs would be
        recorded with another instance's events (DAGSTER_HOME names the folder of the dagster.yaml)."""
        root = getattr(instance, "root_directory", None)
        if root is not None and os.path.realpath(root) != os.path.realpath(self._dagster_home):
            raise IncrementalAssetsError(
                f"the Dagster instance in {root} would keep its event log in {self._dagster_home}: "
                f"set DAGSTER_HOME={root} before opening it (its dagster.yaml reads the folder from DAGSTER_HOME)"
            )
        super().register_instance(instance)

    @classmethod
    def config_type(cls) -> Any:
        return {"dagster_home": StringSource}

    @contextlib.contextmanager
    def _connect(self, shard: str) -> Any:
        """Dagster's connection to one of the log's databases, kept open between uses
        (:func:`~.sqlite_storage.pooled_engine`). Dagster's live view of a run watches the run's database
        file, which a connection kept open in WAL mode leaves untouched: a transaction that wrote to a run's
        database touches the file's times once committed."""
        with self._db_lock:
            engine = pooled_engine(self.conn_string_for_shard(shard))
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn:
                raw = conn.connection.dbapi_connection
                changes = raw.total_changes if raw is not None else 0
                with conn.begin():
                    yield conn
                if shard != INDEX_SHARD_NAME and raw is not None and raw.total_changes != changes:
                    with contextlib.suppress(OSError):
                        os.utime(self.path_for_shard(shard))

    def has_table(self, table_name: str) -> bool:
        """Whether the index has a table (Dagster asks once per feature it uses), on the index's open connection."""
        engine = pooled_engine(self.conn_string_for_shard(INDEX_SHARD_NAME))
        with engine.connect() as conn:
            return bool(engine.dialect.has_table(conn, table_name))

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData | None, config_value: Any
    ) -> "BatchedSqliteEventLogStorage":
        return cls(inst_data=inst_data, **config_value)

    def _initdb(self, engine: Any, for_index_shard: bool = False) -> None:
        """Dagster's per-database set-up, with its schema scripts read once per process.

        Dagster reads every one of its ~90 migration scripts to learn the newest schema revision each
        time it opens a database of the log: the index once per process, and each run's new database
        twice (to check, then to stamp it). A database already stamped needs nothing (as in Dagster);
        a new run's database is a copy of an empty one set up once per instance (:func:`copy_of_template`).
        Anything else (the rare index set-up, a concurrent creation) is Dagster's own code path."""
        if not for_index_shard:
            copy_of_template(self._dagster_home, engine.url.database)
        try:
            with engine.connect() as connection:
                if MigrationContext.configure(connection).get_current_revision():
                    return
                if for_index_shard or db.inspect(connection).get_table_names():
                    raise _DagstersPath()
                SqlEventLogStorageMetadata.create_all(connection)
                connection.execute(db.text("PRAGMA journal_mode=WAL;"))
                MigrationContext.configure(connection).stamp(migration_scripts(), "head")
                safe_commit(connection)
        except Exception:  # Dagster's set-up retries concurrent creation and stamps older databases
            super()._initdb(engine, for_index_shard=for_index_shard)

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        runs: dict[str, list[EventLogEntry]] = {}
        for event in events:
            runs.setdefault(event.run_id, []).append(event)
        for run_id, run_events in runs.items():
            self._store_run_batch(run_id, run_events)

    def _store_run_batch(self, run_id: str, events: list[EventLogEntry]) -> None:
        """The run's events in one transaction of its database, then their index rows in one
        transaction of the index. Should the index write fail, the run's rows are taken back, so
        Dagster's fallback (storing the events one by one) does not record them twice."""
        rows = [self._event_to_row(event) for event in events]
        with self.run_connection(run_id) as conn:
            run_ids = insert_returning_ids(conn, rows)
        try:
            ids = self._store_index_batch(events, rows)
        except BaseException:
            with self.run_connection(run_id) as conn:
                conn.execute(SqlEventLogStorageTable.delete().where(SqlEventLogStorageTable.c.id.in_(run_ids)))
            raise
        # Check executions are written on their own connection (the storage's lock is not re-entrant).
        for i, event_id in ids.items():
            if events[i].dagster_event_type in ASSET_CHECK_EVENTS:
                self.store_asset_check_event(events[i], event_id)

    def _store_index_batch(self, events: list[EventLogEntry], rows: list[dict[str, Any]]) -> dict[int, int]:
        """What ``SqliteEventLogStorage.store_event`` mirrors into the index, for every event of the batch,
        in one transaction; the index ids by position in the batch."""
        mirrored = [i for i, event in enumerate(events) if _mirrored(event)]
        if not mirrored:
            return {}
        with self.index_transaction() as conn:
            ids = dict(zip(mirrored, insert_returning_ids(conn, [rows[i] for i in mirrored])))
            if any(events[i].dagster_event_type == DagsterEventType.ASSET_MATERIALIZATION for i in mirrored):
                faults.checkpoint("recording")
            assets = [i for i in mirrored if events[i].dagster_event_type in ASSET_EVENTS]
            if assets:
                self._store_asset_event_tags(conn, [events[i] for i in assets], [ids[i] for i in assets])
            for i in last_per_asset_and_type(events, assets):
                self._store_asset_event(conn, events[i], ids[i])
        return ids


def copy_of_template(dagster_home: str, path: str | None) -> None:
    """A new run's database as a copy of an empty, stamped one (made once per instance folder, kept next to
    the run databases under a name no reader of them lists): creating the ~20 tables and indexes of a run's
    database, each its own write to disk, cost a one-day command ~0.2 s. Nothing is done when the database
    exists (another process made it) or the copy fails: Dagster's set-up then runs as before."""
    if not path or os.path.exists(path):
        return
    template = os.path.join(os.path.abspath(dagster_home), "history", TEMPLATE_NAME)
    partial = f"{path}.{os.getpid()}.partial"
    try:
        if not os.path.exists(template):
            _make_template(template)
        shutil.copyfile(template, partial)
        os.link(partial, path)  # never over a database another process made meanwhile
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            os.unlink(partial)


def _make_template(template: str) -> None:
    partial = f"{template}.{os.getpid()}.partial"
    engine = db.create_engine(f"sqlite:///{partial}", poolclass=NullPool)
    try:
        with engine.connect() as connection:
            SqlEventLogStorageMetadata.create_all(connection)
            connection.execute(db.text("PRAGMA journal_mode=WAL;"))
            MigrationContext.configure(connection).stamp(migration_scripts(), "head")
            safe_commit(connection)
    finally:
        engine.dispose()  # the last connection closed: the log folded into the file, no -wal left
    os.replace(partial, template)


class _DagstersPath(Exception):
    """A database this storage leaves to Dagster's own set-up."""


def _mirrored(event: EventLogEntry) -> bool:
    kind = event.dagster_event_type if event.is_dagster_event else None
    return kind in ASSET_EVENTS or kind in ASSET_CHECK_EVENTS or kind in EVENT_TYPE_TO_PIPELINE_RUN_STATUS


def insert_returning_ids(conn: Any, rows: list[dict[str, Any]]) -> list[int]:
    """Insert event rows in one statement execution; their ids, in the rows' order."""
    statement = SqlEventLogStorageTable.insert().returning(SqlEventLogStorageTable.c.id, sort_by_parameter_order=True)
    return [int(row[0]) for row in conn.execute(statement, rows)]


def last_per_asset_and_type(events: list[EventLogEntry], positions: list[int]) -> list[int]:
    """The events whose asset keys row update survives the batch: per asset and event type the last
    one (an update of the same type sets the same columns), in the order of the batch.

    Applying only these leaves the asset keys table exactly as applying every event in turn would.
    """
    last: dict[tuple[str, str], int] = {}
    for i in positions:
        dagster_event = events[i].dagster_event
        if dagster_event is not None and dagster_event.asset_key is not None:
            last[(dagster_event.asset_key.to_string(), dagster_event.event_type_value)] = i
    return sorted(last.values())
