"""Dagster's SQLite run and schedule storage (same files, same schema), opened without reading its schema
scripts when the database is already set up.

Opening Dagster's SQLite run storage or schedule storage reads every one of Dagster's ~90 schema
migration scripts to learn the newest revision, and does something only when the database has no
revision at all (a new database, or one created before Dagster stamped them). These classes look at the
database's revision (one query) and leave every other case to Dagster's own set-up, so an instance opens
in a fraction of the time (the CLI opens it once per command, ``dagster dev`` and the daemon once per
run worker). Configured in the project's ``dagster.yaml`` with the instance folder::

    run_storage:
      module: incremental_assets.orchestration.sqlite_storage
      class: ProjectSqliteRunStorage
      config:
        dagster_home: {env: DAGSTER_HOME}

Setting up a new database is serialised by a lock file in the instance folder (:func:`setup_lock`): two
processes creating one database at once would each stamp its schema revision, and every later open would
fail with "Version table 'alembic_version' has more than one head present".
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import threading
from collections.abc import Iterator
from typing import Any

import sqlalchemy as db
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from dagster._config import StringSource
from dagster._core.storage.runs.sqlite import sqlite_run_storage
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.sql import get_alembic_config
from dagster._core.storage.sqlite import create_db_conn_string
from dagster._serdes import ConfigurableClassData
from sqlalchemy.pool import NullPool


@functools.lru_cache(maxsize=1)
def migration_scripts() -> ScriptDirectory:
    """Dagster's schema migration scripts (one set for every database of its storage), read once per process."""
    script = ScriptDirectory.from_config(get_alembic_config(sqlite_run_storage.__file__))
    script.as_revision_number("head")  # reads the scripts now, once
    return script


def is_set_up(conn_string: str, *tables: str) -> bool:
    """Whether the SQLite database exists, carries a schema revision and holds ``tables``: then Dagster's
    set-up would find nothing to do."""
    path = conn_string.removeprefix("sqlite:///")
    if not os.path.exists(path):
        return False
    engine = db.create_engine(conn_string, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            if not MigrationContext.configure(connection).get_current_revision():
                return False
            return not tables or set(tables) <= set(db.inspect(connection).get_table_names())
    finally:
        engine.dispose()


LOCK_FILE = ".setup.lock"
_held: dict[str, int] = {}  # lock file -> how deep this process holds it (the lock is re-entrant per process)
_held_guard = threading.RLock()


@contextlib.contextmanager
def setup_lock(dagster_home: str) -> Iterator[None]:
    """Hold the instance folder's set-up lock (an advisory ``flock`` on ``<home>/.setup.lock``): only one
    process at a time creates or stamps the instance's databases. Re-entrant within a process, so the
    whole instance and each storage it opens can take it."""
    os.makedirs(dagster_home, exist_ok=True)
    path = os.path.join(os.path.abspath(dagster_home), LOCK_FILE)
    with _held_guard:
        if _held.get(path):
            _held[path] += 1
            try:
                yield
            finally:
                _held[path] -= 1
            return
        with open(path, "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            _held[path] = 1
            try:
                yield
            finally:
                _held[path] = 0
                fcntl.flock(handle, fcntl.LOCK_UN)


class _OpenedWhenSetUp:
    """``from_config_value`` of a Dagster SQLite storage in ``<dagster_home>/<FOLDER>/<DATABASE>.db``, where
    Dagster's default puts it: the storage straight away when the database is set up, else Dagster's set-up."""

    FOLDER: tuple[str, ...] = ()
    DATABASE = ""
    TABLES: tuple[str, ...] = ()

    @classmethod
    def config_type(cls) -> Any:
        return {"dagster_home": StringSource}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None, config_value: Any) -> Any:
        base = os.path.join(os.path.abspath(config_value["dagster_home"]), *cls.FOLDER)
        conn_string = create_db_conn_string(base, cls.DATABASE)
        if is_set_up(conn_string, *cls.TABLES):
            return cls(conn_string, inst_data)  # type: ignore[call-arg]  # reason: a mixin; cls is the Dagster storage it is mixed into
        with setup_lock(config_value["dagster_home"]):
            if is_set_up(conn_string, *cls.TABLES):  # another process set it up while this one waited
                return cls(conn_string, inst_data)  # type: ignore[call-arg]  # reason: a mixin; cls is the Dagster storage it is mixed into
            return cls.from_local(base, inst_data=inst_data)  # type: ignore[attr-defined]  # reason: a mixin; cls is the Dagster storage


class ProjectSqliteRunStorage(_OpenedWhenSetUp, SqliteRunStorage):
    """Dagster's SQLite run storage in ``<dagster_home>/history/runs.db``."""

    FOLDER, DATABASE, TABLES = ("history", ""), "runs", ("runs", "instance_info")


class ProjectSqliteScheduleStorage(_OpenedWhenSetUp, SqliteScheduleStorage):
    """Dagster's SQLite schedule storage in ``<dagster_home>/schedules/schedules.db``."""

    FOLDER, DATABASE = ("schedules",), "schedules"
