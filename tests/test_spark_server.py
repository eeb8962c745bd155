"""The project's long-lived Spark Connect server: ``incremental-assets spark start|stop|status``, and the CLI
and Dagster runs using it while it is up, with no JVM of their own.

The runs are subprocesses whose ``SPARK_HOME`` points at an empty folder: a local session could not start,
so a run that succeeds ran on the server. The server is stopped by its PID when the module ends, also when
a test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from incremental_assets.cli import command_server
from incremental_assets.cli import commands as cli
from incremental_assets.delta import table_uri
from incremental_assets.load.settings import load_settings
from incremental_assets.spark import connect_server as server

from helpers import EVENTS_SOURCE, table_rows, utc, write_events

pytestmark = pytest.mark.cluster

MODELS = {
    "models/hourly.sql": """
        MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly');
        SELECT date_trunc('HOUR', ts) AS h, COUNT(*) AS n, SUM(v) AS v FROM raw.events WHERE ts BETWEEN @start_dt
          AND @end_dt GROUP BY 1
    """,
    "models/daily.sql": """
        MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT CAST(h AS DATE) AS ds, SUM(n) AS n, SUM(v) AS v FROM s.hourly WHERE h BETWEEN @start_dt AND @end_dt
          GROUP BY 1
    """,
}
TIMEOUT = 600


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("INCREMENTAL_ASSETS_", "DAGSTER_", "SPARK_", "PYSPARK_"))
    }
    env.update(TZ="UTC", **extra)
    return env


def run_cli(project: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "incremental_assets.cli", *args, "--project", str(project)],
        cwd=project,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def no_local_spark(tmp: Path) -> dict[str, str]:
    """An environment in which a process cannot start a JVM of its own: SPARK_HOME is an empty folder."""
    (tmp / "no-spark-here").mkdir(exist_ok=True)
    return clean_env(SPARK_HOME=str(tmp / "no-spark-here"))


def gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def server_project(root: Path, hours: int) -> Path:
    """The two-model project at ``root``, its source holding ``hours`` hours of events from 2024-01-01."""
    (root / "models").mkdir(parents=True)
    (root / "sources.yaml").write_text(EVENTS_SOURCE)
    for rel, text in MODELS.items():
        (root / rel).write_text("\n".join(line.strip() for line in text.strip().splitlines()) + "\n")
    write_events(root / "data" / "events", utc(2024, 1, 1), hours, per_hour=3)
    return root


@contextlib.contextmanager
def stopped_at_end(root: Path):
    """The project's settings; its Spark Connect server and command server stopped at the end, by PID if need be."""
    settings = load_settings(root, environ={})
    try:
        yield settings
    finally:
        record = server.read_record(settings)
        commands = command_server.read_record(server.state_dir(settings))
        with contextlib.suppress(Exception):
            server.stop_server(settings, timeout=30)
        if record and not gone(record.pid):  # never leave it behind, whatever happened above
            with contextlib.suppress(ProcessLookupError):
                os.killpg(record.pid, signal.SIGKILL)
        if commands and not gone(int(commands["pid"])):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(commands["pid"]), signal.SIGKILL)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A two-model project with its Spark Connect server started by the CLI; stopped by PID at the end."""
    root = server_project(tmp_path_factory.mktemp("spark-server") / "project", 24 * 4)
    with stopped_at_end(root):
        yield root


def test_start_run_through_the_server_and_stop(project, tmp_path):
    settings = load_settings(project, environ={})
    down = run_cli(project, "spark", "status")
    assert down.returncode == 1 and down.stdout.startswith("down"), down.stdout + down.stderr

    secret = "not-on-the-command-line-" + os.urandom(4).hex()
    conf = json.dumps({"spark.hadoop.fs.s3a.secret.key": secret})
    started = run_cli(project, "spark", "start", env=clean_env(INCREMENTAL_ASSETS_SPARK_CONF=conf))
    assert started.returncode == 0, started.stdout + started.stderr
    record = server.read_record(settings)
    assert record is not None and f"started: {record.url} (pid {record.pid}" in started.stdout
    command_line = Path(f"/proc/{record.pid}/cmdline").read_bytes().decode(errors="replace")
    assert server.SERVER_CLASS in command_line and secret not in command_line
    # The server's settings (a credential among them) are in a file only its owner can read.
    conf_file = server.state_dir(settings) / server.CONF_FILE
    assert conf_file.stat().st_mode & 0o777 == 0o600 and secret in conf_file.read_text()
    assert f"spark.connect.grpc.binding.address {server.LOOPBACK}" in conf_file.read_text()
    again = run_cli(project, "spark", "start")
    assert again.returncode == 0 and f"already running: {record.url} (pid {record.pid}" in again.stdout
    status = run_cli(project, "spark", "status", "--json")
    assert status.returncode == 0 and json.loads(status.stdout) == {
        "up": True,
        "url": record.url,
        "pid": record.pid,
        "configured_remote": None,
    }
    assert server.spark_remote(settings) == record.url
    # An explicit remote wins over the project's server.
    assert (
        server.spark_remote(load_settings(project, environ={"INCREMENTAL_ASSETS_SPARK_REMOTE": "sc://elsewhere:15002"}))
        == "sc://elsewhere:15002"
    )

    # The CLI: two days of both models, with no Spark of its own.
    ran = run_cli(
        project,
        "run",
        "s.hourly",
        "s.daily",
        "--start",
        "2024-01-01",
        "--end",
        "2024-01-03",
        env=no_local_spark(tmp_path),
    )
    assert ran.returncode == 0 and "2 run(s) succeeded, 0 failed" in ran.stdout, ran.stdout[-3000:] + ran.stderr[-3000:]
    # Three events an hour, v = i % 7 over the event index i: the oracle recomputes the sums.
    values = [i % 7 for i in range(24 * 4 * 3)]
    daily = table_rows(table_uri(settings.warehouse, "s.daily"))
    assert [(row[0].isoformat(), row[1], row[2]) for row in daily] == [
        (f"2024-01-0{d + 1}", 72, sum(values[d * 72 : (d + 1) * 72])) for d in range(2)
    ]

    # A Dagster run in a fresh process (what the daemon and `dagster dev` launch): the resource finds the server.
    dagster = Path(sys.executable).parent / "dagster"
    env = no_local_spark(tmp_path) | {
        "INCREMENTAL_ASSETS_PROJECT": str(project),
        "DAGSTER_HOME": str(project / ".dagster"),
    }
    materialized = subprocess.run(
        [
            str(dagster),
            "asset",
            "materialize",
            "-m",
            "incremental_assets.definitions",
            "--select",
            "s/hourly",
            "--partition",
            "2024-01-03-05:00",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert materialized.returncode == 0, materialized.stdout[-3000:] + materialized.stderr[-3000:]
    hours = {row[0]: row[1:] for row in table_rows(table_uri(settings.warehouse, "s.hourly"))}
    assert hours[utc(2024, 1, 3, 5).replace(tzinfo=None)] == (3, sum(values[(48 + 5) * 3 : (48 + 6) * 3]))
    assert len(hours) == 49

    # A query that fails on the server: one line naming the model, not the Connect client's log of the error.
    (project / "models" / "bad.sql").write_text(
        "MODEL (name s.bad, kind FULL);\nSELECT CAST(CONCAT('x', CAST(n AS STRING)) AS INT) AS n FROM s.daily\n"
    )
    try:
        bad = run_cli(project, "run", "s.bad", env=no_local_spark(tmp_path))
    finally:
        (project / "models" / "bad.sql").unlink()
    said = bad.stdout + bad.stderr
    assert bad.returncode == 1 and re.search(r"s\.bad\b.*FAILED", said) and "CAST_INVALID_INPUT" in said, said[-3000:]
    assert "GRPC Error" not in said and "stacktrace" not in said and "Traceback" not in said, said[-3000:]

    stopped = run_cli(project, "spark", "stop")
    assert stopped.returncode == 0 and f"stopped (pid {record.pid})" in stopped.stdout, stopped.stdout + stopped.stderr
    assert gone(record.pid)
    assert server.read_record(settings) is None and server.spark_remote(settings) is None
    assert "Successfully stopped SparkContext" in Path(record.log).read_text(
        errors="replace"
    )  # a clean shutdown, not a kill
    after = run_cli(project, "spark", "status")
    assert after.returncode == 1 and after.stdout.startswith("down")


def test_a_command_starting_its_own_spark_prints_its_progress_and_no_spark_notices(tmp_path):
    """Without the server, a command starts a JVM of its own: Spark's start-up notices (its default logging
    profile, the log level, warnings about the host name or native libraries) are not printed; a failed
    query's message still is."""
    root = server_project(tmp_path / "project", 48)
    (root / "models" / "bad.sql").write_text(
        "MODEL (name s.bad, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');\n"
        "SELECT CAST(ts AS DATE) AS ds, CAST('x' || v AS INT) AS n FROM raw.events WHERE ts BETWEEN @start_dt "
        "AND @end_dt\n"
    )
    env = clean_env(DAGSTER_HOME=str(tmp_path / "home"))
    done = run_cli(root, "run", "--start", "2024-01-01", "--end", "2024-01-02", env=env)
    said = done.stdout + done.stderr
    assert done.returncode == 1 and re.search(r"s\.daily \[2024-01-01, 2024-01-02\): ok", said), said
    assert re.search(r"s\.bad\b.*FAILED", said) and "CAST_INVALID_INPUT" in said, said
    notices = ("log4j", "Setting default log level", "sc.setLogLevel", " WARN ", "NativeCodeLoader", "Traceback")
    assert not [line for line in said.splitlines() if any(n in line for n in notices)], said


def test_a_record_whose_process_is_not_the_server_is_never_signalled(tmp_path, capsys):
    """A PID reused by another process (here: this test's own) is not the server: down, and never killed."""
    settings = load_settings(tmp_path, environ={})
    home = server.state_dir(settings)
    home.mkdir(parents=True)
    record = server.ServerRecord(
        os.getpid(), 1, str(tmp_path), "local[2]", "2026-01-01T00:00:00+00:00", str(home / server.LOG_FILE)
    )
    (home / server.RECORD_FILE).write_text(json.dumps(record.__dict__))
    status = server.server_status(settings)
    assert not status.up and status.stale
    assert server.spark_remote(settings) is None
    assert cli.main(["spark", "status", "--project", str(tmp_path)]) == 1
    assert f"pid {os.getpid()}, is no longer running" in capsys.readouterr().out
    assert cli.main(["spark", "stop", "--project", str(tmp_path)]) == 0
    assert "no Spark Connect server running" in capsys.readouterr().out
    assert not (home / server.RECORD_FILE).exists()  # the stale record is cleared; this process lives on


INPUT_MODELS = {
    "seeds/keys.csv": "k,label\nk0,zero\nk1,one\nk2,two\n",
    "models/keys.sql": "MODEL (name s.keys, kind SEED (path '../seeds/keys.csv'));",
    "models/hourly_k.sql": """
        MODEL (name s.hourly_k, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly');
        SELECT date_trunc('HOUR', ts) AS h, k, SUM(v) AS v FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
          GROUP BY 1, 2
    """,
    "models/labelled.sql": "MODEL (name s.labelled, kind VIEW);\nSELECT h, k, v FROM s.hourly_k WHERE v > 0",
    "models/daily_labels.sql": """
        MODEL (name s.daily_labels, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
        SELECT CAST(l.h AS DATE) AS ds, s.label, SUM(l.v) AS v FROM s.labelled AS l JOIN s.keys AS s ON l.k = s.k
          WHERE l.h BETWEEN @start_dt AND @end_dt GROUP BY 1, 2
    """,
    "models/with_statements.sql": """
        MODEL (name s.with_statements, kind FULL);
        SET TIME ZONE 'America/New_York';
        SELECT label, SUM(v) AS v, current_timezone() AS tz FROM s.daily_labels GROUP BY 1, 3;
        SET TIME ZONE 'UTC';
    """,
}


def test_every_kind_of_input_reads_the_same_through_the_server(tmp_path):
    """On the server a query is sent with its inputs bound to it (no temporary view per input): a source, an
    upstream table, a plain view over it and a seed read as they do in a JVM of the command's own; a model with
    statements still reads its inputs as views; a column no input has is still one line naming the file."""
    root = server_project(tmp_path / "project", 48)
    for rel, text in INPUT_MODELS.items():
        (root / rel).parent.mkdir(exist_ok=True)
        (root / rel).write_text("\n".join(line.strip() for line in text.strip().splitlines()) + "\n")
    with stopped_at_end(root) as settings:
        started = run_cli(root, "spark", "start", "--no-warm-up")
        assert started.returncode == 0, started.stdout + started.stderr
        env = no_local_spark(tmp_path)
        ran = run_cli(root, "run", "--start", "2024-01-01", "--end", "2024-01-03", env=env)
        assert ran.returncode == 0 and ", 0 failed" in ran.stdout, ran.stdout[-3000:] + ran.stderr[-3000:]
        labels = {"k0": "zero", "k1": "one", "k2": "two"}
        expected: dict[tuple[str, str], int] = {}
        for i in range(48 * 3):  # three events an hour, k = k{i % 3}, v = i % 7; the view keeps hours with v > 0
            day = f"2024-01-0{i // 72 + 1}"
            expected[(day, labels[f"k{i % 3}"])] = expected.get((day, labels[f"k{i % 3}"]), 0) + i % 7
        daily = table_rows(table_uri(settings.warehouse, "s.daily_labels"))
        assert [(row[0].isoformat(), row[1], row[2]) for row in daily] == sorted(
            (day, label, v) for (day, label), v in expected.items()
        )
        totals = table_rows(table_uri(settings.warehouse, "s.with_statements"))
        by_label: dict[str, int] = {}
        for (_, label), v in expected.items():
            by_label[label] = by_label.get(label, 0) + v
        assert totals == sorted((label, v, "America/New_York") for label, v in by_label.items())

        (root / "models" / "bad.sql").write_text("MODEL (name s.bad, kind FULL);\nSELECT label,\n  nope FROM s.keys\n")
        bad = run_cli(root, "run", "s.bad", env=env)
        said = bad.stdout + bad.stderr
        assert bad.returncode == 2 and "bad.sql:3" in said and "nope" in said, said[-3000:]
        assert "Traceback" not in said and "GRPC" not in said, said[-3000:]
