"""Safe defaults: credentials reach Spark but never the Dagster instance, the Delta log or CLI output;
every documented way to start the UI binds to 127.0.0.1."""

from __future__ import annotations

import json
import re
from pathlib import Path

from dagster._serdes import serialize_value

from incremental_assets import cli
from incremental_assets.load.project import load_project
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.instance import open_instance

from conftest import REPO
from helpers import EVENTS_SOURCE, utc, write_events

SECRET = "S3CR3T-do-not-log-7f2c"
TOKEN = "TOK-do-not-log-91aa"
MODEL = """
MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01');
SELECT date_trunc('HOUR', ts) AS h, COUNT(*) AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1
"""


def _files_containing(root: Path, needle: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def test_credentials_in_spark_settings_never_reach_records_or_output(
    spark, make_project, tmp_path, monkeypatch, capsys
):
    root = make_project({"sources.yaml": EVENTS_SOURCE, "models/daily.sql": MODEL})
    write_events(root / "data" / "events", utc(2024, 1, 1), 24)
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    conf = {"spark.hadoop.fs.s3a.secret.key": SECRET, "spark.ia.test.token": TOKEN}
    monkeypatch.setenv("INCREMENTAL_ASSETS_SPARK_CONF", json.dumps(conf))
    try:
        args = ["--project", str(root)]
        assert cli.main(["run", "s.daily", "--start", "2024-01-01", "--end", "2024-01-02", *args]) == 0
        # The session got the credential (the run used it) ...
        assert spark.conf.get("spark.ia.test.token") == TOKEN
        for command in (
            ["status"],
            ["history"],
            ["explain"],
            ["explain", "--json"],
            ["validate"],
            ["vacuum", "--dry-run", "-v"],
            ["render", "s.daily", "--start", "2024-01-01", "--end", "2024-01-02"],
        ):
            assert cli.main([*command, *args]) == 0, command
        # ... a failing run's error output too
        assert cli.main(["run", "s.daily", "--start", "2024-01-01T05", "--end", "2024-01-02", *args]) != 0
    finally:
        spark.conf.unset("spark.ia.test.token")
    captured = capsys.readouterr()
    instance = open_instance(home)
    for secret in (SECRET, TOKEN):
        assert secret not in captured.out + captured.err
        assert _files_containing(home, secret) == []  # runs and event logs, as stored
        for run in instance.get_runs():  # snapshots are stored compressed: look inside them
            assert secret not in serialize_value(instance.get_job_snapshot(run.job_snapshot_id))
            assert secret not in json.dumps(run.run_config) + json.dumps(run.tags)
            assert secret not in "".join(
                str(e.dagster_event) + str(e.user_message) for e in instance.all_logs(run.run_id)
            )
        assert _files_containing(root / "warehouse", secret) == []  # Delta log and commit metadata
    spark_config = build_definitions(load_project(root)).resources["spark"].spark_config
    assert "spark.hadoop.fs.s3a.secret.key" not in spark_config and spark_config["spark.sql.session.timeZone"] == "UTC"


UI_COMMAND = re.compile(r"(dagster dev|dagster-webserver|dagster code-server start)[^\n]*")


def test_every_documented_ui_command_binds_to_localhost():
    places = [REPO / "README.md", *REPO.glob("docs/*.md"), *REPO.glob("scripts/*.sh"), *REPO.glob("deploy/*.md")]
    commands = [(p.name, m.group(0)) for p in places if p.exists() for m in UI_COMMAND.finditer(p.read_text())]
    assert commands
    for place, command in commands:
        if "code-server" in command or "0.0.0.0" in command:
            continue  # gRPC code servers and in-container binds are published by compose on 127.0.0.1 (below)
        assert "-h 127.0.0.1" in command or "--host 127.0.0.1" in command, f"{place}: {command}"
    compose = (REPO / "deploy" / "docker-compose.yaml").read_text()
    published = re.findall(r'^\s*-\s*"([^"]+:\d+:\d+)"', compose, re.MULTILINE)
    assert published and all(p.startswith("127.0.0.1:") for p in published), published
