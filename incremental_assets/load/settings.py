"""Project settings: ``incremental_assets.yaml`` at the project root, each value overridable by environment.

| setting           | default                      | environment variable                   |
| ----------------- | ---------------------------- | -------------------------------------- |
| warehouse         | ``<project>/warehouse``      | ``INCREMENTAL_ASSETS_WAREHOUSE``       |
| dialect           | ``spark``                    | ``INCREMENTAL_ASSETS_DIALECT``         |
| timezone          | ``UTC``                      | ``INCREMENTAL_ASSETS_TIMEZONE``        |
| spark.master      | ``local[2]``                 | ``INCREMENTAL_ASSETS_SPARK_MASTER``    |
| spark.remote      | none (Spark Connect URL)     | ``INCREMENTAL_ASSETS_SPARK_REMOTE``    |
| spark.conf        | a few small-machine defaults | ``INCREMENTAL_ASSETS_SPARK_CONF`` (JSON object, merged) |
| dagster_home      | ``<project>/.dagster``       | ``DAGSTER_HOME``                       |
| max_concurrent_runs | CPU cores / cores per run, at least 1 (see below) | ``INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS`` |
| max_concurrent_runs_on_server | cores, at least 2 | ``INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS_ON_SERVER`` |
| hourly_files      | ``day``                      | ``INCREMENTAL_ASSETS_HOURLY_FILES``    |
| environments      | none                         | ``INCREMENTAL_ASSETS_ENVIRONMENTS`` (names, comma-separated) |
| maintenance       | see below                    | none                                   |

``max_concurrent_runs`` is how many runs the project's Dagster instance lets run at once (its run queue).
Each run is a Spark driver that, on the embedded default, computes with ``local[N]``'s N threads: the
default gives each run N cores (N = 2 for the default ``local[2]``, all cores for ``local[*]``, 2 for a
cluster or Spark Connect, where the driver still plans, collects and commits): 1 run on 2 cores, 2 on 4.
More runs than that only make every run slower and can exhaust memory (a JVM each).

``max_concurrent_runs_on_server`` is how many runs the queue starts at once while the project's long-lived
Spark is up (``incremental-assets spark start``): such a run starts no Spark of its own, it sends its queries
to the one server, and spends much of its time waiting for them, so two runs at once overlap one's Dagster
bookkeeping with the other's Spark work. The queue tells the two kinds apart by a tag each run gets when it
is submitted (``incremental_assets/spark``: ``server`` or ``own``); runs of the second kind stay within
``max_concurrent_runs``. The automation's runs that wait in their run for upstream runs requested with them
have as many slots again, of their own (see :mod:`incremental_assets.orchestration.run_coordinator`).

``hourly_files`` is how the table of an hourly model created from now on is cut into files: ``day`` (one
file per backfilled day, partitioned by ``ia_day``; replacing an hour of such a file rewrites it in the
same commit, its other hours copied) or ``hour`` (one per hour, partitioned by ``ia_interval``: each hour
replaced alone, but a 90-day backfill writes and commits 2,160 files instead of 90). An existing table
keeps the layout it has.

``environments`` names the environments (``run --auto --env NAME``) whose assets the project's Dagster
definitions show beside production's, keyed ``env/NAME/...`` in a group ``env_NAME``.

``maintenance`` sets when Dagster runs the maintenance jobs (crons, UTC; ``null`` switches one off) and what
they keep: ``{compact: "15 * * * *", vacuum: "0 3 * * *", purge_runs: null, retention_hours: 168,
run_retention_days: 30, target_file_mb: 64}`` by default (see :mod:`incremental_assets.orchestration.maintenance`).

>>> import tempfile
>>> s = load_settings(tempfile.mkdtemp(), environ={"INCREMENTAL_ASSETS_SPARK_MASTER": "local[1]"})
>>> s.spark_master, s.timezone
('local[1]', 'UTC')
"""

from __future__ import annotations

import json
import os
import re
import zoneinfo
from pathlib import Path
from typing import Mapping

from sqlglot.dialects.dialect import Dialect, Dialects

from incremental_assets.errors import ModelFileError
from incremental_assets.load.text import read_utf8, yaml_mapping
from incremental_assets.model.cron import cron_problem
from incremental_assets.model.environment import is_name
from incremental_assets.model.settings import Maintenance, Settings, read_env_settings

SETTINGS_FILE = "incremental_assets.yaml"


def _resolve(project_dir: Path, location: str) -> str:
    if "://" in location:
        return location
    path = Path(location).expanduser()
    return str(path if path.is_absolute() else (project_dir / path).resolve())


def available_cores() -> int:
    """CPU cores this process may use (its affinity, e.g. a container's share), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_max_concurrent_runs(spark_master: str | None, cores: int | None = None) -> int:
    """Runs that fit the machine: its cores divided by the cores one run's Spark uses, at least 1.

    >>> [default_max_concurrent_runs(m, 2) for m in ("local[2]", "local[*]", "local", "spark://h:7077")]
    [1, 1, 2, 1]
    >>> [default_max_concurrent_runs("local[2]", n) for n in (1, 4, 16)]
    [1, 2, 8]
    """
    cores = cores or available_cores()
    per_run = 2
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", (spark_master or "").strip())
    if match:
        threads = match.group(1)
        per_run = cores if threads == "*" else int(threads or 1)
    return max(1, cores // max(1, per_run))


def _run_limit(value: object, where: Path | None, source: str) -> int:
    try:
        limit = int(str(value).strip())
    except ValueError:
        limit = 0
    if limit < 1 or isinstance(value, bool):
        raise ModelFileError(
            where,
            None,
            f"{source} must be a whole number of runs, at least 1, not {value!r}",
            hint="e.g. `max_concurrent_runs: 2`",
        )
    return limit


DIALECTS = tuple(sorted(d.value for d in Dialects if d.value))

# What Spark's spark.sql.session.timeZone takes as an offset (java.time.ZoneOffset, after Spark widens `+5:30`).
_OFFSET = re.compile(
    r"(?:UTC|GMT|UT)?([+-])(\d{1,2})(?::(\d{2})(?::(\d{2}))?)?|(?:UTC|GMT|UT)?([+-])(\d{2})(\d{2})(\d{2})?"
)
_ZONE_HINT = "use an IANA zone such as UTC or Europe/Berlin, or an offset such as +01:00"


def timezone_problem(name: str) -> str | None:
    """Why Spark's ``spark.sql.session.timeZone`` would refuse ``name`` (an IANA zone or a UTC offset
    within 18 hours), or None when it takes it.

    >>> [timezone_problem(z) for z in ("UTC", "Europe/Berlin", "+01:00", "-18:00", "GMT+5:30")]
    [None, None, None, None, None]
    >>> timezone_problem("+25:00")
    "time zone offset '+25:00' is out of range: an offset lies within 18 hours of UTC (-18:00 to +18:00)"
    >>> timezone_problem("+99:99"), timezone_problem("Mars/Olympus")
    ("time zone offset '+99:99' has minutes or seconds past 59", "unknown time zone 'Mars/Olympus'")
    """
    if name in ("Z", "UTC", "GMT", "UT"):
        return None
    match = _OFFSET.fullmatch(name)
    if match:
        hours, minutes, seconds = (
            int(g or 0) for g in (match.groups()[1:4] if match.group(1) else match.groups()[5:8])
        )
        if minutes > 59 or seconds > 59:
            return f"time zone offset '{name}' has minutes or seconds past 59"
        if hours * 3600 + minutes * 60 + seconds > 18 * 3600:
            return (
                f"time zone offset '{name}' is out of range: an offset lies within 18 hours of UTC (-18:00 to +18:00)"
            )
        return None
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        if zoneinfo.available_timezones():  # else no zone database here: Spark will judge
            return f"unknown time zone '{name}'"
    return None


def _known_dialect(name: str) -> bool:
    try:
        Dialect.get_or_raise(name)  # also takes a dialect with settings: "duckdb, normalization_strategy = ..."
    except ValueError:
        return False
    return True


def _origin(key: str, variable: str, env: Mapping[str, str], path: Path, text: str) -> tuple[str | Path, int | None]:
    """Where a setting's value came from: the environment variable, or its line in the settings file."""
    if env.get(variable):
        return variable, None
    match = re.search(rf"^\s*{re.escape(key)}\s*:", text, flags=re.MULTILINE)
    return path, text.count("\n", 0, match.start()) + 1 if match else None


_EXAMPLES = {"warehouse": "s3://bucket/warehouse", "dialect": "spark", "timezone": "UTC", "dagster_home": ".dagster"}


_KNOWN = (
    "warehouse",
    "dialect",
    "timezone",
    "spark",
    "dagster_home",
    "max_concurrent_runs",
    "max_concurrent_runs_on_server",
    "hourly_files",
    "environments",
    "maintenance",
)


def _check_top_level(raw: dict, path: Path) -> None:
    """Raise on a setting we do not know, or a setting meant to be one value that is not."""
    unknown = {str(k) for k in raw} - set(_KNOWN)
    if unknown:
        raise ModelFileError(
            path, None, f"unknown setting(s): {', '.join(sorted(unknown))}", hint="use " + ", ".join(sorted(_KNOWN))
        )
    for key in ("warehouse", "dialect", "timezone", "dagster_home"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, (str, int, float)) or "\x00" in str(value)):
            raise ModelFileError(path, None, f"{key} must be a single value, e.g. `{key}: {_EXAMPLES[key]}`")


def _spark_section(raw: dict, path: Path) -> dict:
    """The ``spark`` mapping of the settings file, checked: text master and remote, a mapping conf."""
    spark = raw.get("spark") or {}
    if not isinstance(spark, dict):
        raise ModelFileError(path, None, "spark must be a mapping with master, remote and conf")
    for key in ("master", "remote"):
        if spark.get(key) is not None and not isinstance(spark.get(key), str):
            raise ModelFileError(
                path,
                None,
                f"spark.{key} must be text, e.g. `{key}: local[2]`"
                if key == "master"
                else f"spark.{key} must be a Spark Connect URL",
            )
    if not isinstance(spark.get("conf") or {}, dict):
        raise ModelFileError(
            path,
            None,
            "spark.conf must be a mapping of Spark settings to values",
            hint="write `conf: {spark.sql.shuffle.partitions: 8}`",
        )
    return spark


def _spark_conf(spark: dict, env: Mapping[str, str]) -> dict[str, str]:
    """The file's Spark settings, with those of ``INCREMENTAL_ASSETS_SPARK_CONF`` (a JSON object) over them."""
    conf = {str(k): str(v) for k, v in (spark.get("conf") or {}).items()}
    if env.get("INCREMENTAL_ASSETS_SPARK_CONF"):
        try:
            extra = json.loads(env["INCREMENTAL_ASSETS_SPARK_CONF"])
            if not isinstance(extra, dict):
                raise ValueError
        except ValueError:
            raise ModelFileError(
                "INCREMENTAL_ASSETS_SPARK_CONF",
                None,
                "must be a JSON object of Spark settings",
                hint='e.g. {"spark.sql.shuffle.partitions": "8"}',
            ) from None
        conf.update({str(k): str(v) for k, v in extra.items()})
    return conf


def _max_concurrent_runs(raw: dict, env: Mapping[str, str], path: Path, local_master: str | None) -> int:
    """The run limit: the environment's, else the file's, else the default for ``local_master`` (None:
    Spark Connect)."""
    if env.get("INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS"):
        return _run_limit(env["INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS"], None, "INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS")
    if raw.get("max_concurrent_runs") is not None:
        return _run_limit(raw["max_concurrent_runs"], path, "max_concurrent_runs")
    return default_max_concurrent_runs(local_master)


def default_runs_on_server(cores: int | None = None) -> int:
    """Runs at once on the long-lived Spark: one per core, at least 2.

    >>> [default_runs_on_server(n) for n in (1, 2, 8)]
    [2, 2, 8]
    """
    return max(2, cores or available_cores())


def _runs_on_server(raw: dict, env: Mapping[str, str], path: Path) -> int:
    """The run limit while the long-lived Spark is up: the environment's, else the file's, else the default."""
    variable = "INCREMENTAL_ASSETS_MAX_CONCURRENT_RUNS_ON_SERVER"
    if env.get(variable):
        return _run_limit(env[variable], None, variable)
    if raw.get("max_concurrent_runs_on_server") is not None:
        return _run_limit(raw["max_concurrent_runs_on_server"], path, "max_concurrent_runs_on_server")
    return default_runs_on_server()


def load_settings(project_dir: str | Path, *, environ: Mapping[str, str] | None = None) -> Settings:
    """Read the settings file (optional) and apply environment overrides."""
    env = read_env_settings(environ).setting_overrides
    project_dir = Path(project_dir).resolve()
    path = project_dir / SETTINGS_FILE
    raw: dict = {}
    text = ""
    if path.exists():
        text = read_utf8(path)
        raw = yaml_mapping(text, path, "settings")
    _check_top_level(raw, path)
    spark = _spark_section(raw, path)
    conf = _spark_conf(spark, env)
    warehouse = env.get("INCREMENTAL_ASSETS_WAREHOUSE") or raw.get("warehouse") or "warehouse"
    home = env.get("DAGSTER_HOME") or raw.get("dagster_home") or ".dagster"
    spark_master = str(env.get("INCREMENTAL_ASSETS_SPARK_MASTER") or spark.get("master") or "local[2]")
    remote = env.get("INCREMENTAL_ASSETS_SPARK_REMOTE") or spark.get("remote") or None
    max_runs = _max_concurrent_runs(raw, env, path, None if remote else spark_master)
    dialect = str(env.get("INCREMENTAL_ASSETS_DIALECT") or raw.get("dialect") or "spark").lower()
    if not _known_dialect(dialect):
        where, line = _origin("dialect", "INCREMENTAL_ASSETS_DIALECT", env, path, text)
        raise ModelFileError(where, line, f"unknown SQL dialect '{dialect}'", hint="use one of " + ", ".join(DIALECTS))
    timezone = _timezone(raw, env, path, text)
    return Settings(
        project_dir=project_dir,
        warehouse=_resolve(project_dir, str(warehouse)),
        dialect=dialect,
        timezone=timezone,
        spark_master=spark_master,
        spark_remote=remote,
        spark_conf=conf,
        dagster_home=Path(_resolve(project_dir, str(home))),
        max_concurrent_runs=max_runs,
        max_concurrent_runs_on_server=_runs_on_server(raw, env, path),
        hourly_files=_hourly_files(raw, env, path, text),
        environments=_environments(raw, env, path, text),
        maintenance=_maintenance(raw, path, text),
    )


def _environments(raw: dict, env: Mapping[str, str], path: Path, text: str) -> tuple[str, ...]:
    value = env.get("INCREMENTAL_ASSETS_ENVIRONMENTS")
    names = value.split(",") if value is not None else raw.get("environments") or []
    if isinstance(names, str):
        names = names.split(",")
    out = tuple(str(n).strip() for n in names if str(n).strip())
    for name in out:
        if not is_name(name):
            where, line = _origin("environments", "INCREMENTAL_ASSETS_ENVIRONMENTS", env, path, text)
            raise ModelFileError(
                where,
                line,
                f"environment name '{name}' is not valid: it must match [a-z][a-z0-9_]* and not be 'prod'",
                hint="e.g. `environments: [dev]` or INCREMENTAL_ASSETS_ENVIRONMENTS=dev",
            )
    return out


def _timezone(raw: dict, env: Mapping[str, str], path: Path, text: str) -> str:
    if not env.get("INCREMENTAL_ASSETS_TIMEZONE") and isinstance(raw.get("timezone"), (int, float)):
        _, line = _origin("timezone", "INCREMENTAL_ASSETS_TIMEZONE", env, path, text)
        raise ModelFileError(
            path,
            line,
            f"timezone is the number {raw['timezone']}: YAML reads an unquoted offset such as +1:00 as a number",
            hint="quote it, e.g. `timezone: '+01:00'`",
        )
    timezone = str(env.get("INCREMENTAL_ASSETS_TIMEZONE") or raw.get("timezone") or "UTC")
    problem = timezone_problem(timezone)
    if problem:
        where, line = _origin("timezone", "INCREMENTAL_ASSETS_TIMEZONE", env, path, text)
        raise ModelFileError(where, line, problem, hint=_ZONE_HINT)
    return timezone


HOURLY_FILES = ("day", "hour")


def _hourly_files(raw: dict, env: Mapping[str, str], path: Path, text: str) -> str:
    value = str(env.get("INCREMENTAL_ASSETS_HOURLY_FILES") or raw.get("hourly_files") or "day").strip().lower()
    if value not in HOURLY_FILES:
        where, line = _origin("hourly_files", "INCREMENTAL_ASSETS_HOURLY_FILES", env, path, text)
        raise ModelFileError(
            where,
            line,
            f"hourly_files must be day or hour, not {value!r}",
            hint="`hourly_files: day` (one file per day of an hourly table, the default) or `hourly_files: hour`",
        )
    return value


_MAINTENANCE_EXAMPLE = '`maintenance: {compact: "15 * * * *", vacuum: "0 3 * * *", retention_hours: 168}`'


def _maintenance(raw: dict, path: Path, text: str) -> Maintenance:
    value = raw.get("maintenance")
    if value is None:
        return Maintenance()
    _, line = _origin("maintenance", "", {}, path, text)
    if not isinstance(value, dict):
        raise ModelFileError(path, line, "maintenance must be a mapping", hint=_MAINTENANCE_EXAMPLE)
    known = Maintenance.__dataclass_fields__
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        raise ModelFileError(
            path, line, f"unknown maintenance setting(s): {', '.join(unknown)}", hint="use " + ", ".join(known)
        )
    out = {}
    for key, given in value.items():
        if key in ("compact", "vacuum", "purge_runs"):
            problem = (
                None if given is None else cron_problem(str(given)) if isinstance(given, str) else "it is not text"
            )
            if problem:
                raise ModelFileError(
                    path,
                    line,
                    f"maintenance.{key} must be a cron or null: {problem}",
                    hint=f'e.g. `{key}: "0 3 * * *"`',
                )
            out[key] = given
        else:
            if isinstance(given, bool) or not isinstance(given, int) or given < 1:
                raise ModelFileError(
                    path,
                    line,
                    f"maintenance.{key} must be a whole number, at least 1, not {given!r}",
                    hint=f"e.g. `{key}: {getattr(Maintenance, key)}`",
                )
            out[key] = given
    return Maintenance(**out)
