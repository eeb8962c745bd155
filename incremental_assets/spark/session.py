"""The process's SparkSession: local, a cluster master, or Spark Connect, from the project's settings."""

from __future__ import annotations

import atexit
from typing import Mapping

from pyspark.sql import SparkSession


def build_spark_session(conf: Mapping[str, str], *, remote: str | None = None, app_name: str = "incremental_assets") -> SparkSession:
    """Get or create the process's SparkSession from settings (local, a cluster master, or Spark Connect)."""
    builder = SparkSession.builder.appName(app_name)
    if remote:
        builder = builder.remote(remote)
    for key, value in conf.items():
        if remote and not key.startswith("spark.sql."):
            # A Spark Connect session may only change SQL settings; the rest (master, UI, driver and
            # executor options) belong to the server, which warns on every attempt to set them.
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


def _quiet_query_context_loggers() -> None:
    """PySpark logs every SQL error with a query context as a JSON line on stderr when it is raised; the
    run reports the error itself, in one line where it is a known one (a bad source value)."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # PySpark before 4.0 has no such loggers
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True
