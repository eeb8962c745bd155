"""The process's SparkSession: local, a cluster master, or Spark Connect, from the project's settings."""

from __future__ import annotations

import atexit
import logging
import weakref
from pathlib import Path
from typing import Mapping

import sqlglot
from pyspark import SparkContext
from pyspark.sql import SparkSession
from sqlglot import exp
from sqlglot.errors import SqlglotError

from incremental_assets.errors import StorageError
from incremental_assets.model.project import Project
from incremental_assets.model.settings import read_env_settings
from incremental_assets.spark.class_archive import with_class_archive

CONNECT_ERRORS_WITHOUT_STACK_TRACES = {
    "spark.sql.connect.serverStacktrace.enabled": "false",
    "spark.sql.pyspark.jvmStacktrace.enabled": "false",
}


QUIET_LOGGING = Path(__file__).with_name("log4j2.properties")


def _with_quiet_start(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` with the driver JVM logging errors only from its start (not Spark's start-up notices), unless
    the settings choose a logging configuration of their own."""
    options = conf.get("spark.driver.extraJavaOptions", "")
    if "log4j" in options or not QUIET_LOGGING.is_file():
        return dict(conf)
    return {**conf, "spark.driver.extraJavaOptions": f"{options} -Dlog4j2.configurationFile={QUIET_LOGGING}".strip()}


def build_spark_session(
    conf: Mapping[str, str], *, remote: str | None = None, app_name: str = "incremental_assets"
) -> SparkSession:
    """Get or create the process's SparkSession from settings (local, a cluster master, or Spark Connect)."""
    builder = SparkSession.builder.appName(app_name)
    if remote:
        builder = builder.remote(remote)
        # A failed query's error without the server's Java stack trace: the run reports the message alone.
        conf = {**CONNECT_ERRORS_WITHOUT_STACK_TRACES, **conf}
    elif SparkContext._active_spark_context is None:
        conf = with_class_archive(conf)  # a JVM to start: its classes mapped from this machine's archive
        conf = _with_quiet_start(conf)
    for key, value in conf.items():
        if remote and (not key.startswith("spark.sql.") or key == "spark.sql.warehouse.dir"):
            # A Spark Connect session may only change SQL settings; the rest (master, UI, driver and
            # executor options, the catalog's folder) belong to the server, which warns on every attempt to set them.
            continue
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    _quiet_query_context_loggers()
    if not remote:
        # A failed task is reported once, as the run's error; Spark's own ERROR lines would repeat it as a stack trace.
        session.sparkContext.setLogLevel(conf.get("spark.log.level", "FATAL"))
    elif session not in _RELEASED_AT_EXIT:
        # A Connect server keeps a session (its temporary views, cached plans) until it idles out unless
        # the client releases it; a long-lived server serves many short commands.
        _RELEASED_AT_EXIT.append(session)
        atexit.register(session.stop)
    return session


_RELEASED_AT_EXIT: list = []


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (a client of a server), not one with a JVM of its own."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


_STATEMENTS_RUN: "weakref.WeakKeyDictionary[SparkSession, set]" = weakref.WeakKeyDictionary()


def run_project_statements(spark: SparkSession, project: Project, when: str) -> None:
    """The project's ``before_all`` or ``after_all`` statements (SQLMesh's config), in order, on ``spark``.

    ``before_all`` runs once per session and project (the first model a process runs); ``after_all``
    after each model, as the statements are written to be repeatable (``IF NOT EXISTS``, ``DROP ... IF EXISTS``).
    """
    statements = project.before_all if when == "before_all" else project.after_all
    if not statements:
        return
    if when == "before_all":
        done = _STATEMENTS_RUN.setdefault(spark, set())
        key = (str(project.directory), statements)
        if key in done:
            return
        done.add(key)
    for sql in statements:
        try:
            for step in spark_steps(sql):
                spark.sql(step).collect()
        except Exception as exc:  # Spark's error, told with the statement and where it comes from
            if when == "before_all":
                _STATEMENTS_RUN[spark].discard((str(project.directory), statements))
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StorageError(f"the {when} statement `{sql}` of the project config failed: {message}") from exc


_REPLACING = "__ia_replacing"


def spark_steps(statement: exp.Expr | str) -> list[str]:
    """A statement as the Spark SQL statements doing what it means. Spark's session catalog cannot replace
    a table (``CREATE OR REPLACE TABLE``, SQLMesh's everyday statement): the table is dropped, then created;
    created aside and renamed when its query reads the table it replaces.

    >>> spark_steps("CREATE OR REPLACE TABLE ops.t AS SELECT * FROM m")
    ['DROP TABLE IF EXISTS ops.t', 'CREATE TABLE ops.t AS SELECT * FROM m']
    >>> spark_steps("CREATE OR REPLACE TABLE ops.t AS SELECT * FROM ops.t")[0]
    'DROP TABLE IF EXISTS ops.t__ia_replacing'
    >>> spark_steps("SET x = 1")
    ['SET x = 1']
    """
    if isinstance(statement, str):
        try:
            parsed = sqlglot.parse_one(statement, read="spark")
        except SqlglotError:
            return [statement]
        if not (isinstance(parsed, exp.Create) and parsed.args.get("replace")):
            return [statement]  # as written: the parse is only to recognise a replace
        statement = parsed
    if not (isinstance(statement, exp.Create) and statement.args.get("replace") and statement.kind == "TABLE"):
        return [statement.sql(dialect="spark")]
    create = statement.copy()
    create.set("replace", False)
    target = create.this.this if isinstance(create.this, exp.Schema) else create.this
    name, parts = target.sql(dialect="spark"), [p.name.lower() for p in target.parts]
    query = create.expression
    if query is None or not any([p.name.lower() for p in t.parts] == parts for t in query.find_all(exp.Table)):
        return [f"DROP TABLE IF EXISTS {name}", create.sql(dialect="spark")]
    aside = target.copy()
    aside.set("this", exp.to_identifier(target.name + _REPLACING))
    create.set("this", aside)
    return [
        f"DROP TABLE IF EXISTS {aside.sql(dialect='spark')}",
        create.sql(dialect="spark"),
        f"DROP TABLE IF EXISTS {name}",
        f"ALTER TABLE {aside.sql(dialect='spark')} RENAME TO {name}",
    ]


def _quiet_query_context_loggers() -> None:
    """PySpark logs every SQL error with a query context as a JSON line on stderr when it is raised; the
    run reports the error itself, in one line where it is a known one (a bad source value).

    Plain loggers of those names, made before PySpark makes its own: a PySpark logger sets a JSON formatter
    on every handler given to it, which would reach handlers other loggers share."""
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        # Disabled, and a level above every record: a later logging.config (Dagster's) enables loggers again,
        # and PySpark's keyword arguments to these would then make a plain logger raise a TypeError instead.
        logging.getLogger(name).disabled = True
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    # The Connect client's logger is off unless SPARK_CONNECT_LOG_LEVEL is set, but off only by `disabled`,
    # which a later logging.config (Dagster's) turns back on: it then prints every failed query's server
    # error as a JSON line with a Python stack trace. A level above every record keeps it quiet through that.
    if not read_env_settings().connect_logging:
        logging.getLogger("pyspark.sql.connect.logging").setLevel(logging.CRITICAL + 1)
