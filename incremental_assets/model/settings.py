"""Project settings as a value, how credentials among them are kept out of sight, and the one read of the
environment variables the product acts on.

Project settings are read from ``incremental_assets.yaml`` and the environment by
:mod:`incremental_assets.load.settings`; every environment variable is read here, by :func:`read_env_settings`
(the README's settings tables list them all).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import tzinfo
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

from incremental_assets.errors import ModelFileError
from incremental_assets.model.environment import table_location
from incremental_assets.model.source_time import zone

DEFAULT_SPARK_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    # Delta readers expect INT64 microsecond timestamps, not Spark's legacy INT96.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # Spark reads no Parquet timestamp in nanoseconds (pandas writes them so by default) unless as a number of
    # nanoseconds; a source's reader turns such a column back into times (spark/inputs.py).
    "spark.sql.legacy.parquet.nanosAsLong": "true",
    "spark.sql.sources.partitionOverwriteMode": "static",
    "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    # Spark keeps every read's file listing in one cache for the whole process (250 MB by default) under a key
    # no later read uses: on a long-lived Spark reading the same tables every hour it only fills the driver's
    # heap. Off; a read still lists its files once.
    "spark.sql.hive.filesourcePartitionFileCacheSize": "0",
}

LISTING_JOB_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"

SECRET_KEY = re.compile(
    r"secret|password|passwd|token|credential|private|(^|[._-])(access|api|account|sas)?[._-]?key($|[._-])",
    re.IGNORECASE,
)

REDACTED = "<redacted>"


def is_local(uri: str) -> bool:
    """Whether a location is on this machine's file system (a path or a ``file://`` URI), not an object store."""
    return "://" not in uri or uri.startswith("file://")


def is_secret(key: str) -> bool:
    """Whether a setting's name says it holds a credential: its value is never shown or stored.

    >>> names = ("spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.access.key", "spark.sql.shuffle.partitions")
    >>> [is_secret(k) for k in names]
    [True, True, False]
    """
    return bool(SECRET_KEY.search(key))


def redact(conf: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``conf`` safe to print or record: credential values replaced by ``<redacted>``."""
    return {k: REDACTED if is_secret(k) else v for k, v in conf.items()}


def redact_url(url: str | None) -> str | None:
    """A Spark Connect URL without its token: ``sc://h:15002/;token=abc`` -> ``sc://h:15002/;token=<redacted>``."""
    return re.sub(r"(?i)((?:token|password|secret)=)[^;&]*", r"\1" + REDACTED, url) if url else url


CATALOG_DIR_KEY = "spark.sql.warehouse.dir"
CATALOG_DIR = "_spark_catalog"


@dataclass(frozen=True)
class Maintenance:
    """When Dagster runs the maintenance jobs (five-field crons, UTC; None: no schedule) and what they keep."""

    compact: str | None = "15 * * * *"  # compaction: hourly, after the hour's runs
    vacuum: str | None = "0 3 * * *"  # deletion of replaced files and dead runs' staging folders: nightly
    purge_runs: str | None = None  # deletion of old runs and their events from Dagster's storage: off by default
    retention_hours: int = 168  # replaced data files stay readable (time travel) this long
    run_retention_days: int = 30  # runs older than this are purged, except those holding a partition's latest record
    target_file_mb: int = 64  # files smaller than this are compacted, into files of at most about this size


@dataclass(frozen=True)
class Settings:
    project_dir: Path
    warehouse: str
    dialect: str = "spark"
    timezone: str = "UTC"
    spark_master: str = "local[2]"
    spark_remote: str | None = None
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    dagster_home: Path | None = None
    max_concurrent_runs: int = 1
    max_concurrent_runs_on_server: int = 2  # runs at once while the long-lived Spark is up (they share it)
    hourly_files: str = "day"  # how new tables of hourly models are cut into files: "day" or "hour"
    environment: str | None = None  # the environment in effect (None: production)
    environment_models: frozenset[str] = frozenset()  # the models whose tables are the environment's
    environments: tuple[str, ...] = ()  # environments whose assets Dagster shows beside production's
    maintenance: Maintenance = Maintenance()

    def table_location(self, model_name: str) -> str:
        """Where a model's table is read and written: the environment's table for a model the environment
        builds, production's otherwise (the one place every reader and writer asks)."""
        in_env = self.environment is not None and model_name.lower() in self.environment_models
        return table_location(self.warehouse, model_name, self.environment if in_env else None)

    @property
    def zone(self) -> tzinfo:
        """The project's time zone: its intervals are the days and hours of this zone."""
        return zone(self.timezone)

    def spark_config(self) -> dict[str, str]:
        conf = dict(DEFAULT_SPARK_CONF)
        conf["spark.sql.session.timeZone"] = self.timezone
        conf.update(self.spark_conf)
        if not self.spark_remote:
            conf.setdefault("spark.master", self.spark_master)
            # Tables and schemas that before_all or pre-statements create in Spark's catalog live under
            # the warehouse, never in a `spark-warehouse/` folder of the current directory.
            conf.setdefault(CATALOG_DIR_KEY, self.warehouse.rstrip("/") + "/" + CATALOG_DIR)
        if conf.get("spark.master", "").startswith("local") and is_local(self.warehouse):
            # A read names its files (a year's backfill hundreds); past this many Spark lists them with a
            # job, which on one local JVM costs ~1.4 s a read against ~0.1 s listed by the driver.
            conf.setdefault(LISTING_JOB_THRESHOLD, "100000")
        return conf


# Variables that override a setting of incremental_assets.yaml, by the setting they override: their text is
# judged by incremental_assets.load.settings together with the file's value.
SETTING_VARIABLES: dict[str, str] = {
    "warehouse": "INCREMENTAL_ASSETS_WAREHOUSE",
    "dialect": "INCREMENTAL_ASSETS_DIALECT",
    "timezone": "INCREMENTAL_ASSETS_TIMEZONE",
    "spark.master": "INCREMENTAL_ASSETS_SPARK_MASTER",
    "spark.remote": "INCREMENTAL_ASSETS_SPARK_REMOTE",
    "spark.conf": "INCREMENTAL_ASSETS_SPARK_CONF",
    "dagster_home": "DAGSTER_HOME",
    "max_concurrent_runs": "INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS",
    "max_concurrent_runs_on_server": "INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS_ON_SERVER",
    "hourly_files": "INCREMENTAL_ASSETS_HOURLY_FILES",
    "environments": "INCREMENTAL_ASSETS_ENVIRONMENTS",
}
PROJECT_ENV = "INCREMENTAL_ASSETS_PROJECT"
CACHE_DIR_ENV = "INCREMENTAL_ASSETS_CACHE_DIR"
LOCK_TIMEOUT_ENV = "INCREMENTAL_ASSETS_LOCK_TIMEOUT"
UPSTREAM_WAIT_RETRIES_ENV = "INCREMENTAL_ASSETS_UPSTREAM_WAIT_RETRIES"
UPSTREAM_WAIT_SECONDS_ENV = "INCREMENTAL_ASSETS_UPSTREAM_WAIT_SECONDS"
CLOCK_ENV = "INCREMENTAL_ASSETS_CLOCK"
KILL_AT_ENV = "INCREMENTAL_ASSETS_KILL_AT"
DEBUG_ENV = "INCREMENTAL_ASSETS_DEBUG"
COMMAND_SERVER_ENV = "INCREMENTAL_ASSETS_COMMAND_SERVER"
JVM_ARCHIVE_ENV = "INCREMENTAL_ASSETS_JVM_ARCHIVE"
SENSOR_WATCH_ENV = "INCREMENTAL_ASSETS_SENSOR_WATCH"
JAVA_HOME_ENV = "JAVA_HOME"
# What the S3 credential check looks at (AWS_ACCESS_KEY_ID, AWS_PROFILE, ...; HOME for ~/.aws).
CREDENTIAL_PREFIX = "AWS_"

_Number = TypeVar("_Number", int, float)


@dataclass(frozen=True)
class EnvSettings:
    """Every environment variable the product acts on, read at once by :func:`read_env_settings`.

    >>> env = read_env_settings({LOCK_TIMEOUT_ENV: "5", KILL_AT_ENV: "staged,recording"})
    >>> env.lock_timeout_seconds, env.kill_at, env.upstream_wait_retries
    (5.0, ('staged', 'recording'), 240)
    """

    setting_overrides: Mapping[str, str] = field(default_factory=dict)  # by variable name, see SETTING_VARIABLES
    project: str | None = None  # the project folder the code location serves (default: the current folder)
    cache_dir: str | None = None  # where analyses are cached; "off": not cached (default: <project>/.cache/...)
    lock_timeout_seconds: float = 300.0  # how long a write waits for another writer of its table
    upstream_wait_retries: int = 240  # how often a run's step is tried again while its upstreams are being built
    upstream_wait_seconds: float = 15.0  # how long each try waits for them
    clock: str | None = None  # the automation sensor's instant (ISO, or "@PATH": the instant in that file)
    kill_at: tuple[str, ...] = ()  # write stages at which the process kills itself (crash tests)
    debug: bool = False  # the CLI prints a traceback under its error messages
    command_server: bool = True  # a command is handed to the project's command server when one runs
    jvm_archive: str | None = None  # the folder of the JVM class archives; "off": none (see spark.class_archive)
    java_home: str | None = None  # the Java Spark's launcher starts (else the `java` on the path)
    sensor_watch_seconds: float = 4.0  # how long a daemon's tick of the automation sensor watches for new data
    connect_logging: bool = False  # SPARK_CONNECT_LOG_LEVEL set: PySpark's Connect client logs as asked
    credentials: Mapping[str, str] = field(default_factory=dict)  # AWS_* variables and HOME


def child_environment(overrides: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with ``overrides`` over it: what a child process of the product is given."""
    return {**os.environ, **overrides}


def adopt_environment(environ: Mapping[str, str]) -> None:
    """Make ``environ`` this process's whole environment (a command server's copy taking its caller's)."""
    os.environ.clear()
    os.environ.update(environ)


def read_env_settings(environ: Mapping[str, str] | None = None) -> EnvSettings:
    """Read :class:`EnvSettings` from ``environ`` (default: this process's environment, read now)."""
    env = os.environ if environ is None else environ
    return EnvSettings(
        setting_overrides={v: env[v] for v in SETTING_VARIABLES.values() if v in env},
        project=env.get(PROJECT_ENV) or None,
        cache_dir=env.get(CACHE_DIR_ENV) or None,
        lock_timeout_seconds=_number(env, LOCK_TIMEOUT_ENV, float, 300.0),
        upstream_wait_retries=_number(env, UPSTREAM_WAIT_RETRIES_ENV, int, 240),
        upstream_wait_seconds=_number(env, UPSTREAM_WAIT_SECONDS_ENV, float, 15.0),
        clock=env.get(CLOCK_ENV, "").strip() or None,
        kill_at=tuple(env[KILL_AT_ENV].split(",")) if env.get(KILL_AT_ENV) else (),
        debug=bool(env.get(DEBUG_ENV)),
        command_server=env.get(COMMAND_SERVER_ENV, "").strip().lower() not in ("0", "false", "no", "off"),
        jvm_archive=env.get(JVM_ARCHIVE_ENV, "").strip() or None,
        java_home=env.get(JAVA_HOME_ENV) or None,
        sensor_watch_seconds=_number(env, SENSOR_WATCH_ENV, float, 4.0),
        connect_logging="SPARK_CONNECT_LOG_LEVEL" in env,
        credentials={k: v for k, v in env.items() if k.startswith(CREDENTIAL_PREFIX) or k == "HOME"},
    )


def user_variable(name: str, default: Any = None) -> Any:
    """A variable a user's own file asks for by name (a SQLMesh config's Jinja ``env_var``)."""
    return os.environ.get(name, default)


def _number(env: Mapping[str, str], name: str, kind: Callable[[str], _Number], default: _Number) -> _Number:
    text = env.get(name)
    if text is None:
        return default
    try:
        return kind(text)
    except ValueError:
        raise ModelFileError(name, None, f"must be a number, not '{text}'", hint=f"e.g. {name}={default}") from None
