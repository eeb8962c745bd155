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

Every process keeps its connections to the run storage, the schedule storage and the event log's databases
open between uses (:func:`pooled_engine`), where Dagster opens and closes one per query: a one-day command
opened the index 84 times, the run storage 28 times and its run's own database 19 times.

Setting up a new database is serialised by a lock file in the instance folder (:func:`setup_lock`): two
processes creating one database at once would each stamp its schema revision, and every later open would
fail with "Version table 'alembic_version' has more than one head present".
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import os
import threading
from collections import OrderedDict
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
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS, create_db_conn_string
from dagster._serdes import ConfigurableClassData


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
    with pooled_engine(conn_string).connect() as connection:  # the connection the storage goes on to use
        if not MigrationContext.configure(connection).get_current_revision():
            return False
        return not tables or set(tables) <= set(db.inspect(connection).get_table_names())


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


# Databases a process keeps connections to at once (an instance has three; tests open many instances).
OPEN_DATABASES = 8
_engines: OrderedDict[str, tuple[db.Engine, tuple[int, int] | None]] = OrderedDict()
_engines_pid = os.getpid()
_engines_guard = threading.Lock()
_inherited: list[db.Engine] = []  # a parent's engines in a forked copy: never used, never closed here


def pooled_engine(conn_string: str) -> db.Engine:
    """This process's engine for a SQLite database, whose connections stay open between uses (Dagster's
    storage opens a new engine and connection for each query: ~1 ms each).

    A database replaced or deleted since (another file at its path, or none) gets a new engine, so no
    connection reads a file that is no longer the database. Commits in WAL mode wait for the disk only at
    checkpoints (``synchronous=NORMAL``): a killed process loses nothing it committed; a power cut may take
    back the last commits, which the next run records again from the tables' Delta logs."""
    global _engines_pid
    identity = _file_identity(conn_string)
    with _engines_guard:
        if _engines_pid != os.getpid():  # a forked copy: the parent's connections are not this process's
            _inherited.extend(engine for engine, _ in _engines.values())
            _engines.clear()
            _engines_pid = os.getpid()
        cached = _engines.pop(conn_string, None)
        if cached is not None and (cached[1] is None or cached[1] == identity):
            _engines[conn_string] = (cached[0], cached[1] or identity)
            return cached[0]
        if cached is not None:
            cached[0].dispose()
        engine = db.create_engine(
            conn_string, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False}
        )
        db.event.listen(engine, "connect", _commit_without_waiting_for_the_disk)
        _engines[conn_string] = (engine, identity)
        while len(_engines) > OPEN_DATABASES:
            _engines.popitem(last=False)[1][0].dispose()
        return engine


@atexit.register
def close_pooled_engines() -> None:
    """Close this process's connections at its end: the last connection to a database in WAL mode folds the
    log into the database file, so a command leaves no write-ahead log behind."""
    with _engines_guard:
        if _engines_pid == os.getpid():  # a forked copy leaves its parent's alone (see pooled_engine)
            for engine, _ in _engines.values():
                engine.dispose()
            _engines.clear()


def _file_identity(conn_string: str) -> tuple[int, int] | None:
    try:
        info = os.stat(conn_string.removeprefix("sqlite:///"))
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _commit_without_waiting_for_the_disk(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    try:
        if cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
            cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


class _PooledConnections:
    """``connect`` of a Dagster SQLite storage on this process's :func:`pooled_engine`."""

    _conn_string: str

    @contextlib.contextmanager
    def connect(self) -> Iterator[Any]:
        with pooled_engine(self._conn_string).connect() as conn, conn.begin():
            yield conn


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


class ProjectSqliteRunStorage(_OpenedWhenSetUp, _PooledConnections, SqliteRunStorage):
    """Dagster's SQLite run storage in ``<dagster_home>/history/runs.db``."""

    FOLDER, DATABASE, TABLES = ("history", ""), "runs", ("runs", "instance_info")


class ProjectSqliteScheduleStorage(_OpenedWhenSetUp, _PooledConnections, SqliteScheduleStorage):
    """Dagster's SQLite schedule storage in ``<dagster_home>/schedules/schedules.db``."""

    FOLDER, DATABASE = ("schedules",), "schedules"
