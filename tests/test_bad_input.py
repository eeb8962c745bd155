"""Bad input a hostile or careless user gives: each gets one clear line naming the file and line (or the
setting, or the table) and the fix, exit code 2 from the CLI, no traceback, nothing written. No Spark."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from incremental_assets import delta
from incremental_assets.cli.commands import main
from incremental_assets.errors import ModelFileError
from incremental_assets.load.model_file import parse_model_file
from incremental_assets.model.intervals import IntervalUnit, TimeWindow, to_utc

HEADER = "MODEL (name s.m, kind FULL);\n"
DAILY = "MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), start '2024-01-01');\n"


def cli(capsys, *argv: str) -> tuple[int, list[str]]:
    """Run the command; its exit code and the lines it wrote to stderr."""
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if line.strip()]


def one_error(capsys, *argv: str) -> str:
    code, lines = cli(capsys, *argv)
    errors = [line for line in lines if line.startswith("error: ")]
    assert code == 2 and len(errors) == 1, lines
    return errors[0]


def project(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "models").mkdir(exist_ok=True)
    return tmp_path


# -- queries and headers nested too deeply for a recursive parser ---------------------------------------


@pytest.mark.parametrize("command", [["validate"], ["status"], ["run", "--auto"], ["explain"]])
def test_a_thousand_nested_parentheses_are_one_line_naming_file_and_line(tmp_path, capsys, command):
    root = project(tmp_path, {"models/deep.sql": HEADER + "\nSELECT " + "(" * 1000 + "1" + ")" * 1000 + " AS x\n"})
    line = one_error(capsys, *command, "--project", str(root))
    assert line.startswith(f"error: {root}/models/deep.sql:3: the query nests 1000 parentheses deep; at most 200")
    assert "(fix: name inner parts in CTEs" in line
    assert not (root / ".dagster").exists() or command != ["validate"]


@pytest.mark.parametrize(
    "query",
    [
        "SELECT " + "CASE WHEN 1 = 1 THEN 1 ELSE " * 1000 + "0" + " END" * 1000 + " AS x",  # no parentheses at all
        "SELECT " + "CASE WHEN 1 = 1 THEN 1 ELSE " * 300 + "0" + " END" * 300 + " AS x",
        "SELECT 1 AS x WHERE " + " AND ".join(["1 = 1"] * 1000),
        "SELECT 1 AS x " + " ".join(["UNION ALL SELECT 1"] * 1000),
    ],
)
def test_queries_nested_past_the_limit_without_parentheses_are_refused_at_load(tmp_path, query):
    path = tmp_path / "m.sql"
    path.write_text(HEADER + query)
    with pytest.raises(ModelFileError, match=r"the query nests (too deeply to be parsed|\d+ levels deep); at most 200"):
        parse_model_file(path)


def test_a_long_but_shallow_query_still_loads(tmp_path):
    path = tmp_path / "m.sql"
    path.write_text(HEADER + "SELECT " + "(" * 150 + "1" + ")" * 150 + " AS x WHERE " + " AND ".join(["1 = 1"] * 300))
    assert parse_model_file(path).name == "s.m"


def test_deeply_nested_brackets_in_a_header_are_one_line(tmp_path, capsys):
    root = project(
        tmp_path,
        {"models/m.sql": "MODEL (name s.m, kind FULL,\n tags " + "(" * 5000 + "x" + ")" * 5000 + ");\nSELECT 1 AS x"},
    )
    line = one_error(capsys, "validate", "--project", str(root))
    assert "models/m.sql:2: brackets nest more than 32 deep in the MODEL header" in line


def test_a_deeply_nested_audit_file_is_one_line(tmp_path, capsys):
    audit = "AUDIT (name deep);\nSELECT * FROM @this_model WHERE " + "(" * 1000 + "x IS NULL" + ")" * 1000
    root = project(tmp_path, {"models/m.sql": HEADER + "SELECT 1 AS x", "audits/deep.sql": audit})
    line = one_error(capsys, "validate", "--project", str(root))
    assert "audits/deep.sql:" in line and "1000 parentheses deep" in line


# -- settings -------------------------------------------------------------------------------------------


def test_an_unknown_dialect_setting_names_the_variable_and_the_valid_dialects(tmp_path, capsys, monkeypatch):
    root = project(tmp_path, {"models/m.sql": HEADER + "SELECT 1 AS x"})
    monkeypatch.setenv("INCREMENTAL_ASSETS_DIALECT", "notadialect")
    for command in (["validate"], ["status"], ["run", "--auto"]):
        line = one_error(capsys, *command, "--project", str(root))
        assert line.startswith(
            "error: INCREMENTAL_ASSETS_DIALECT: unknown SQL dialect 'notadialect' (fix: use one of athena, "
        )
        assert ", duckdb, " in line and ", spark, " in line
    monkeypatch.delenv("INCREMENTAL_ASSETS_DIALECT")
    (root / "incremental_assets.yaml").write_text("warehouse: wh\ndialect: sparkk\n")
    line = one_error(capsys, "validate", "--project", str(root))
    assert line.startswith(f"error: {root}/incremental_assets.yaml:2: unknown SQL dialect 'sparkk' (fix: use one of")


def test_an_unknown_time_zone_setting_names_where_it_came_from(tmp_path, capsys, monkeypatch):
    root = project(
        tmp_path, {"models/m.sql": HEADER + "SELECT 1 AS x", "incremental_assets.yaml": "timezone: Europe/Nowhere\n"}
    )
    line = one_error(capsys, "validate", "--project", str(root))
    assert line == (
        f"error: {root}/incremental_assets.yaml:1: unknown time zone 'Europe/Nowhere' "
        "(fix: use an IANA zone such as UTC or Europe/Berlin, or an offset such as +01:00)"
    )
    monkeypatch.setenv("INCREMENTAL_ASSETS_TIMEZONE", "Mars/Olympus")
    assert one_error(capsys, "status", "--project", str(root)).startswith(
        "error: INCREMENTAL_ASSETS_TIMEZONE: unknown time zone 'Mars/Olympus'"
    )
    for good in ("Europe/Berlin", "+05:30", "UTC"):
        monkeypatch.setenv("INCREMENTAL_ASSETS_TIMEZONE", good)
        assert cli(capsys, "validate", "--project", str(root))[0] == 0


def test_an_s3_warehouse_without_credentials_is_one_line_before_any_sdk_looks_for_them(tmp_path, capsys, monkeypatch):
    root = project(tmp_path, {"models/m.sql": HEADER + "SELECT 1 AS x"})
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws either
    monkeypatch.setenv("INCREMENTAL_ASSETS_WAREHOUSE", "s3://bucket/warehouse")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # never reached: nothing listens there
    for command in (["status"], ["run", "--auto"]):
        began = time.monotonic()
        line = one_error(capsys, *command, "--project", str(root))
        assert time.monotonic() - began < 20  # no instance-metadata retries
        assert line.startswith(
            "error: s3://bucket/warehouse/s/m is on S3, but no AWS credentials are configured: set AWS_ACCESS_KEY_ID"
        )
        assert "AWS_EC2_METADATA_DISABLED=false" in line


# -- a damaged Delta log --------------------------------------------------------------------------------


def committed_table(root: Path, days: int = 3) -> str:
    """The table of s.daily with one commit per day, made without Spark."""
    uri = delta.table_uri(str(root / "warehouse"), "s.daily")
    schema = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("v", pa.int64())])
    for day in range(days):
        start = to_utc("2024-01-01") + timedelta(days=day)
        staging = delta.new_staging_dir(uri)
        folder = Path(staging) / f"{delta.PARTITION_COLUMN}={start.date()}"
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"ts": [start], "v": [day]}, schema=schema), folder / "part-0.parquet")
        window = TimeWindow(start, start + timedelta(days=1))
        delta.commit_staged(
            uri, staging, schema, delta.ReplaceWindow(window, IntervalUnit.DAY), metadata={"model": "s.daily"}
        )
    return uri


@pytest.mark.parametrize("damage", ["truncate newest", "truncate oldest", "garble middle"])
def test_a_damaged_delta_log_names_the_table_the_file_and_what_to_do(tmp_path, capsys, damage):
    root = project(tmp_path, {"models/daily.sql": DAILY + "SELECT CAST('2024-01-01' AS TIMESTAMP) AS ts, 1 AS v"})
    uri = committed_table(root)
    log = sorted((Path(uri) / "_delta_log").glob("*.json"))
    victim = {"truncate newest": log[-1], "truncate oldest": log[0], "garble middle": log[1]}[damage]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2] if damage.startswith("truncate") else b"{not json" + data)
    before = {p.name: p.read_bytes() for p in Path(uri).rglob("*") if p.is_file()}
    for command in (["status"], ["run", "--auto"], ["run", "s.daily", "--start", "2024-01-04", "--end", "2024-01-05"]):
        line = one_error(capsys, *command, "--project", str(root))
        assert line.startswith(
            f"error: table {uri} (model s.daily): its Delta log is damaged: _delta_log/{victim.name}: line "
        )
        assert "is not complete JSON (the file was cut off or overwritten). Nothing was read or written." in line
        fix = (
            f"Restore that file from a backup, or move {uri} aside and rebuild it with `incremental-assets run "
            "s.daily --full-refresh`"
        )
        if damage == "truncate newest":  # only the newest commit can simply be dropped
            fix += (
                "; or delete that file: the table falls back to the version before it, and "
                "`incremental-assets run --auto` computes again the intervals that commit held"
            )
        assert line.endswith(fix)
    assert {p.name: p.read_bytes() for p in Path(uri).rglob("*") if p.is_file()} == before  # nothing written


def test_status_reports_a_damaged_table_and_goes_on_with_the_others(tmp_path, capsys):
    root = project(
        tmp_path,
        {
            "models/daily.sql": DAILY + "SELECT CAST('2024-01-01' AS TIMESTAMP) AS ts, 1 AS v",
            "models/other.sql": "MODEL (name s.other, kind FULL);\nSELECT 1 AS x",
        },
    )
    uri = committed_table(root, days=1)
    (Path(uri) / "_delta_log" / f"{0:020d}.json").write_text("")
    code = main(["status", "--project", str(root)])
    out = capsys.readouterr()
    assert code == 2
    assert f"_delta_log/{0:020d}.json: empty" in out.err
    assert "s.other (FULL): last materialized never" in out.out


# -- accepted nonsense ----------------------------------------------------------------------------------


def refused(tmp_path: Path, text: str) -> str:
    path = tmp_path / "m.sql"
    path.write_text(text)
    with pytest.raises(ModelFileError) as caught:
        parse_model_file(path)
    return caught.value.render().replace(str(path), "m.sql")


def test_a_cron_more_frequent_than_the_interval_unit_is_refused(tmp_path):
    text = (
        "MODEL (\n  name s.m,\n  kind INCREMENTAL_BY_TIME_RANGE (time_column ts),\n  start '2024-01-01',\n"
        "  interval_unit month,\n  cron '@hourly'\n);\nSELECT ts FROM raw.e"
    )
    assert refused(tmp_path, text) == (
        "m.sql:6: cron '@hourly' fires every hour, more often than the model's month intervals complete "
        "(fix: use a cron at most as frequent as the intervals, e.g. cron '@monthly', or interval_unit "
        "hour to cut hour intervals)"
    )
    for ok in ("'@monthly'", "'@yearly'", "'0 0 1 * *'"):  # as often as, or less often than, the intervals
        (tmp_path / "ok.sql").write_text(text.replace("'@hourly'", ok))
        assert parse_model_file(tmp_path / "ok.sql").interval_unit == "month"


def test_an_end_before_start_is_refused(tmp_path):
    text = "MODEL (\n  name s.m,\n  kind FULL,\n  start '2024-01-01',\n  end '2023-06-01'\n);\nSELECT 1 AS x"
    assert refused(tmp_path, text).startswith(
        "m.sql:5: end 2023-06-01T00:00:00+00:00 is not after start 2024-01-01T00:00:00+00:00: the model "
        "would have no interval (fix: "
    )


def test_a_model_file_over_the_size_limit_is_refused_before_it_is_parsed(tmp_path, capsys):
    body = "SELECT 1 AS x\n" + "-- padding\n" * 100_000  # 1.1 MB
    root = project(tmp_path, {"models/big.sql": HEADER + body})
    began = time.monotonic()
    line = one_error(capsys, "validate", "--project", str(root))
    assert time.monotonic() - began < 10
    size = (root / "models" / "big.sql").stat().st_size
    assert line.startswith(
        f"error: {root}/models/big.sql: the file is {size:,} bytes; a model or audit file may be at most "
        "1,000,000 (fix: "
    )


NANOS = "'2024-01-01T00:00:00.000000001' is more precise than a microsecond; write at most six fractional digits"


def test_a_time_with_nanoseconds_gets_one_consistent_message(tmp_path, capsys):
    root = project(tmp_path, {"models/daily.sql": DAILY + "SELECT CAST('2024-01-01' AS TIMESTAMP) AS ts, 1 AS v"})
    for command in (["render", "s.daily", "--end", "2024-01-02"], ["run", "s.daily", "--end", "2024-01-02"]):
        line = one_error(capsys, *command, "--start", "2024-01-01T00:00:00.000000001", "--project", str(root))
        assert line.startswith(f"error: --start: {NANOS}")
    text = DAILY.replace("'2024-01-01'", "'2024-01-01T00:00:00.000000001'") + "SELECT ts FROM raw.e"
    assert refused(tmp_path, text).startswith(f"m.sql:1: start {NANOS}")


# -- cron: checked when the model loads, never first by Dagster ------------------------------------------


CRON_MODEL = (
    "MODEL (\n  name s.m,\n  kind {kind},\n  start '2024-01-01',\n  cron '{cron}'\n);\nSELECT "
    "CAST('2024-01-01' AS TIMESTAMP) AS ts, 1 AS x\n"
)
OTHER = "MODEL (name s.other, kind FULL);\nSELECT 1 AS y\n"


@pytest.mark.parametrize("kind", ["FULL", "INCREMENTAL_BY_TIME_RANGE (time_column ts)"])
@pytest.mark.parametrize(
    "cron, problem",
    [
        ("61 25 * * *", "minute 61 is out of range 0-59"),
        ("0 0 31 2 *", "it never fires: no month it names (feb) has a day 31"),
        ("banana", "a cron has 5 fields (minute hour day-of-month month day-of-week), this has 1"),
        ("0 0 * * 1-9", "day of week 9 is out of range 0-7"),
        ("*/0 * * * *", "minute step '/0' must be a whole number of at least 1"),
        ("@fortnightly", "unknown cron alias '@fortnightly'"),
    ],
)
def test_an_invalid_cron_is_one_line_naming_its_line_and_never_reaches_dagster(tmp_path, capsys, kind, cron, problem):
    root = project(tmp_path, {"models/m.sql": CRON_MODEL.format(kind=kind, cron=cron), "models/other.sql": OTHER})
    for command in (["validate"], ["run", "s.other"], ["run", "--auto"]):
        line = one_error(capsys, *command, "--project", str(root))
        assert line.startswith(f"error: {root}/models/m.sql:5: invalid cron '{cron}': {problem}"), line
        assert line.endswith(
            "(fix: write five fields, minute hour day-of-month month day-of-week, e.g. cron '0 6 * * *' "
            "(06:00 every day), or @hourly, @daily, @weekly, @monthly, @yearly)"
        )
    assert not (root / ".dagster").exists()  # refused before any Dagster instance or definition
    from incremental_assets.errors import ProjectError
    from incremental_assets.orchestration.build_definitions import build_definitions

    with pytest.raises(ProjectError, match=r"m.sql:5: invalid cron"):  # the code location: the same one line
        build_definitions(root)


CRON_ATOMS = [
    "*",
    "0",
    "7",
    "29",
    "30",
    "31",
    "59",
    "60",
    "*/5",
    "*/100",
    "1-5",
    "5-1",
    "5/15",
    "0-59/7",
    "jan",
    "feb",
    "apr",
    "mon-fri",
    "sun",
    "7",
    "1,15",
    "2,3",
    "L",
    "?",
    "-1",
    "*/0",
    "1-31/2",
    "12",
    "24",
    "13",
]


def test_every_cron_the_loader_accepts_dagster_accepts():
    from dagster._utils.schedules import is_valid_cron_string
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from incremental_assets.model.cron import ALIASES, CronError, expand_cron

    accepted = []

    @settings(max_examples=3000, deadline=None, database=None)
    @given(st.lists(st.sampled_from(CRON_ATOMS), min_size=5, max_size=5))
    def check(fields):
        try:
            cron = expand_cron(" ".join(fields))
        except CronError:
            return
        accepted.append(cron)
        assert is_valid_cron_string(cron), cron

    check()
    assert len(accepted) > 50  # the property saw valid crons, not only refusals
    for alias in ALIASES:
        assert is_valid_cron_string(expand_cron(alias))
    for valid in (
        "0 0 29 2 *",
        "0 0 30 1-2 *",
        "*/15 9-17 * jan-mar mon-fri",
        "0 0 * * 7",
        "5/15 * * * *",
        "0 6 * * MON",
    ):
        assert is_valid_cron_string(expand_cron(valid))


def test_a_cron_alias_dagster_has_no_name_for_is_scheduled_in_five_fields(tmp_path):
    from incremental_assets.load.project import load_project
    from incremental_assets.orchestration.schedules import build_schedules

    root = project(
        tmp_path,
        {
            "models/q.sql": "MODEL (name s.q, kind FULL, cron '@quarterly');\nSELECT 1 AS x",
            "models/w.sql": "MODEL (name s.w, kind FULL, cron '*/30 9-17 * JAN-MAR Mon-Fri');\nSELECT 1 AS x",
        },
    )
    crons = {s.name: s.cron_schedule for s in build_schedules(load_project(root))}
    assert crons == {"s__q_schedule": "0 0 1 */3 *", "s__w_schedule": "*/30 9-17 * jan-mar mon-fri"}


# -- time zones out of range -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "zone, problem",
    [
        ("+99:99", "time zone offset '+99:99' has minutes or seconds past 59"),
        (
            "+25:00",
            "time zone offset '+25:00' is out of range: an offset lies within 18 hours of UTC (-18:00 to +18:00)",
        ),
        ("-18:30", "time zone offset '-18:30' is out of range"),
        ("Europe/Atlantis", "unknown time zone 'Europe/Atlantis'"),
    ],
)
def test_a_time_zone_spark_would_refuse_is_one_line_naming_the_setting(tmp_path, capsys, monkeypatch, zone, problem):
    root = project(tmp_path, {"models/m.sql": HEADER + "SELECT 1 AS x"})
    monkeypatch.setenv("INCREMENTAL_ASSETS_TIMEZONE", zone)
    for command in (["validate"], ["run", "--auto"], ["status"]):
        line = one_error(capsys, *command, "--project", str(root))
        assert line.startswith(f"error: INCREMENTAL_ASSETS_TIMEZONE: {problem}"), line
        assert line.endswith("(fix: use an IANA zone such as UTC or Europe/Berlin, or an offset such as +01:00)")
    monkeypatch.delenv("INCREMENTAL_ASSETS_TIMEZONE")
    (root / "incremental_assets.yaml").write_text(f"warehouse: wh\ntimezone: '{zone}'\n")
    assert one_error(capsys, "validate", "--project", str(root)).startswith(
        f"error: {root}/incremental_assets.yaml:2: {problem}"
    )


def test_an_unquoted_offset_yaml_reads_as_a_number_is_named(tmp_path, capsys):
    root = project(
        tmp_path, {"models/m.sql": HEADER + "SELECT 1 AS x", "incremental_assets.yaml": "timezone: +25:00\n"}
    )
    assert one_error(capsys, "validate", "--project", str(root)) == (
        f"error: {root}/incremental_assets.yaml:1: timezone is the number 1500: YAML reads an unquoted "
        "offset such as +1:00 "
        "as a number (fix: quote it, e.g. `timezone: '+01:00'`)"
    )


# -- ranges that hold no time ----------------------------------------------------------------------------


def test_a_range_ending_before_it_starts_is_refused(tmp_path, capsys):
    root = project(tmp_path, {"models/daily.sql": DAILY + "SELECT CAST('2024-01-01' AS TIMESTAMP) AS ts, 1 AS v"})
    assert one_error(capsys, "status", "--since", "2024-01-05", "--until", "2024-01-01", "--project", str(root)) == (
        "error: --until 2024-01-01 is not after --since 2024-01-05: the range holds no time "
        "(fix: give --since the earlier instant, e.g. --since 2024-01-01 --until 2024-01-05)"
    )
    assert one_error(
        capsys, "history", "--since", "2024-01-05", "--until", "2024-01-05", "--project", str(root)
    ).startswith("error: --until 2024-01-05 is not after --since 2024-01-05")
    assert one_error(capsys, "run", "--start", "2024-01-05", "--end", "2024-01-01", "--project", str(root)).startswith(
        "error: --end 2024-01-01 is not after --start 2024-01-05: the range holds no time"
    )


# -- one invalid model does not hide the others ----------------------------------------------------------


def test_status_shows_every_valid_model_and_the_invalid_ones_lines(tmp_path, capsys):
    root = project(
        tmp_path,
        {
            "models/bad.sql": "MODEL (name s.bad, kind FULL);\nSELECT x FROM raw.nowhere",
            "models/down.sql": "MODEL (name s.down, kind FULL);\nSELECT x FROM s.bad",
            "models/cron.sql": "MODEL (name s.cron, kind FULL, cron 'banana');\nSELECT 1 AS x",
            "models/daily.sql": DAILY + "SELECT CAST('2024-01-01' AS TIMESTAMP) AS ts, 1 AS v",
            "models/other.sql": OTHER,
        },
    )
    code = main(["status", "--until", "2024-01-03", "--project", str(root)])
    out = capsys.readouterr()
    assert code == 2 and "Traceback" not in out.err
    assert sorted(out.err.splitlines()) == [
        f"error: {root}/models/bad.sql:2: unknown table 'raw.nowhere' in model s.bad (fix: declare it in "
        "sources.yaml or create a model with that name)",
        f"error: {root}/models/cron.sql:1: invalid cron 'banana': a cron has 5 fields (minute hour "
        "day-of-month month day-of-week), this has 1 "
        "(fix: write five fields, minute hour day-of-month month day-of-week, e.g. cron '0 6 * * *' (06:00 "
        "every day), or @hourly, @daily, @weekly, @monthly, @yearly)",
        f"error: {root}/models/down.sql:2: model s.down is left out: it reads s.bad, which is invalid "
        "(fix: fix s.bad first)",
    ]
    assert "s.daily (day): 0/2 intervals up to 2024-01-03" in out.out
    assert "s.other (FULL): last materialized never" in out.out
    assert "s.bad" not in out.out and "s.down" not in out.out
    # validate and run still refuse the whole project, with the same lines
    code, lines = cli(capsys, "validate", "--project", str(root))
    assert code == 2 and lines[-1] == "2 error(s)"


def test_a_query_that_does_not_parse_is_the_only_error(tmp_path, capsys):
    """As SQLMesh: a model whose query has a syntax error is one error; the model reading it is not also
    told it reads an unknown table (the broken model is known by its header's name), and status leaves it out."""
    root = project(
        tmp_path,
        {
            "models/bad.sql": "MODEL (name s.bad, kind FULL);\nSELECT SUM(1 AS x",
            "models/down.sql": "MODEL (name s.down, kind FULL);\nSELECT x FROM s.bad",
            "models/other.sql": OTHER,
        },
    )
    code, lines = cli(capsys, "validate", "--project", str(root))
    assert code == 2 and lines[-1] == "1 error(s)", lines
    assert len(lines) == 2 and lines[0].startswith(f"error: {root}/models/bad.sql:2: cannot parse the query"), lines
    code = main(["status", "--project", str(root)])
    err = capsys.readouterr().err
    assert code == 2 and "unknown table" not in err
    assert f"error: {root}/models/down.sql:2: model s.down is left out: it reads s.bad, which is invalid" in err


# -- a window outside a model's range, a window given to a model without time intervals -------------------


def test_a_window_outside_every_selected_model_is_refused_before_anything_runs(tmp_path, capsys):
    ended = DAILY.replace("start '2024-01-01'", "start '2024-01-01', end '2024-01-31'").replace("s.daily", "s.ended")
    root = project(
        tmp_path,
        {
            "models/daily.sql": DAILY + "SELECT CAST('2024-01-01' AS TIMESTAMP) AS ts, 1 AS v",
            "models/ended.sql": ended + "SELECT CAST('2024-01-01' AS TIMESTAMP) AS ts, 1 AS v",
        },
    )
    line = one_error(capsys, "run", "s.daily", "--start", "1900-01-01", "--end", "1900-01-05", "--project", str(root))
    assert line == (
        "error: the window [1900-01-01, 1900-01-05) lies outside every selected model's range (s.daily "
        "starts 2024-01-01): "
        "nothing would run (fix: give --start/--end inside a model's range, or --auto to fill its missing intervals)"
    )
    line = one_error(capsys, "run", "s.ended", "--start", "2024-03-01", "--end", "2024-03-02", "--project", str(root))
    assert "(s.ended starts 2024-01-01 and ends 2024-02-01)" in line
    assert not (root / ".dagster").exists()


def test_a_clipped_window_and_a_window_without_effect_are_said_per_model(tmp_path):
    from incremental_assets.cli.window_notes import window_notes
    from incremental_assets.load.project import load_project

    root = project(
        tmp_path,
        {
            "models/daily.sql": DAILY + "SELECT CAST('2024-01-01' AS TIMESTAMP) AS ts, 1 AS v",
            "models/other.sql": OTHER,
            "models/v.sql": "MODEL (name s.v, kind VIEW);\nSELECT 1 AS z",
        },
    )
    models = load_project(root).ordered()
    notes, empty = window_notes(models, to_utc("2023-12-30"), to_utc("2024-01-03"))
    assert sorted(notes) == [
        "s.daily: runs [2024-01-01, 2024-01-03) of the window [2023-12-30, 2024-01-03): the model starts 2024-01-01",
        "s.other is FULL: --start/--end do not apply to it; it is rebuilt whole",
        "s.v is VIEW: --start/--end do not apply to it; its view is replaced",
    ]
    assert empty == []
    assert window_notes([m for m in models if m.name == "s.daily"], to_utc("2024-01-01"), to_utc("2024-01-03")) == (
        [],
        [],
    )


# -- a file in another encoding, a deep unary chain -------------------------------------------------------


def test_a_model_file_not_in_utf8_names_line_and_byte(tmp_path, capsys):
    root = project(tmp_path, {"models/ok.sql": OTHER})
    (root / "models" / "m.sql").write_bytes(
        "MODEL (name s.m, kind FULL);\n-- prix en €\nSELECT 'café' AS x\n".encode("cp1252")
    )
    line = one_error(capsys, "validate", "--project", str(root))
    offset = len("MODEL (name s.m, kind FULL);\n-- prix en ")
    assert line == (
        f"error: {root}/models/m.sql:2: byte 0x80 at offset {offset} (line 2, column 12) is not UTF-8: the file is in "
        "another encoding (fix: save the file as UTF-8 (an editor's Save with Encoding, or `iconv -t utf-8`))"
    )
    (root / "models" / "m.sql").unlink()
    (root / "incremental_assets.yaml").write_bytes(b"warehouse: wh\n# \xff\n")
    assert one_error(capsys, "status", "--project", str(root)).startswith(
        f"error: {root}/incremental_assets.yaml:2: byte 0xff at offset 16 "
    )


def test_a_thousand_unary_minus_signs_are_reported_on_the_query_line(tmp_path, capsys):
    root = project(tmp_path, {"models/m.sql": HEADER + "\n-- the query\nSELECT " + "- " * 1000 + "1 AS x\n"})
    line = one_error(capsys, "validate", "--project", str(root))
    assert line.startswith(f"error: {root}/models/m.sql:4: the query nests too deeply to be parsed; at most 200")


def test_an_invalid_cron_of_a_python_model_is_one_line_too(tmp_path, capsys):
    module = (
        "import pandas as pd\n\nMODEL = {'name': 's.py', 'cursor': 'id', 'cron': '0 0 30 feb *'}\n\n\ndef "
        "fetch(last_value):\n    return pd.DataFrame({'id': [1]})\n"
    )
    root = project(tmp_path, {"models/py.py": module, "models/other.sql": OTHER})
    line = one_error(capsys, "validate", "--project", str(root))
    assert line.startswith(
        f"error: {root}/models/py.py:3: invalid cron '0 0 30 feb *': it never fires: no month it names "
        "(feb) has a day 30"
    )


def test_a_query_failing_on_spark_is_said_as_spark_says_it_blaming_no_source(spark, tmp_path, capsys):
    """A value the query itself cannot cast: Spark's message with its error class, not PySpark's exception
    path, no stack trace, and no source blamed when the model reads none."""
    root = project(
        tmp_path,
        {
            "models/m.sql": HEADER + "SELECT CAST('abc' AS INT) AS x",
            "sources.yaml": "- name: raw.other\n  location: data/other.csv\n  format: csv\n",
            "data/other.csv": "a\n1\n",
        },
    )
    code = main(["run", "--project", str(root)])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code != 0 and "Traceback" not in text and "\tat org.apache" not in text
    failure = next(line for line in text.splitlines() if "[CAST_INVALID_INPUT]" in line)
    assert failure.strip().startswith("[CAST_INVALID_INPUT] The value 'abc'"), failure
    assert "pyspark.errors" not in text and "raw.other" not in text and "source" not in failure


@pytest.mark.parametrize(
    "rel, before",
    [
        ("config.yaml", b"model_defaults:\n  dialect: duckdb # "),
        ("config.py", b"from sqlmesh.core.config import Config\n# "),
        ("sources.yaml", b"- name: raw.x\n  location: d # "),
        ("models/p.py", b"from sqlmesh import model\n# "),
    ],
)
def test_every_project_file_not_in_utf8_names_line_and_byte(tmp_path, capsys, rel, before):
    root = project(tmp_path, {"models/ok.sql": HEADER + "SELECT 1 AS x"})
    after = (
        b'\n@model("s.p", columns={"x": "int"})\ndef execute(context, **kwargs):\n    return None\n'
        if rel.endswith("p.py")
        else b"\n"
    )
    (root / rel).write_bytes(before + b"caf\xe9" + after)
    line = one_error(capsys, "validate", "--project", str(root))
    assert line.startswith(f"error: {root}/{rel}:2: byte 0xe9 at offset {len(before) + 3} "), line
    assert line.endswith("(fix: save the file as UTF-8 (an editor's Save with Encoding, or `iconv -t utf-8`))")


def test_a_failure_nothing_foresaw_is_still_one_line(tmp_path, capsys, monkeypatch):
    import incremental_assets.cli.commands as commands

    def broken(args):
        raise RuntimeError("something inside\nsecond line")

    monkeypatch.setattr(commands, "cmd_validate", broken)
    root = project(tmp_path, {"models/ok.sql": HEADER + "SELECT 1 AS x"})
    code, lines = cli(capsys, "validate", "--project", str(root))
    assert code == 1 and lines == [
        "error: unexpected RuntimeError: something inside (fix: this is a bug of incremental_assets, "
        "please report it with "
        "the command; INCREMENTAL_ASSETS_DEBUG=1 prints the Python trace)"
    ]
    monkeypatch.setenv("INCREMENTAL_ASSETS_DEBUG", "1")
    with pytest.raises(RuntimeError):
        main(["validate", "--project", str(root)])


@pytest.mark.parametrize(
    "query, line, message",
    [
        (
            "SELECT id,\n  fares * 2 AS doubled\nFROM s.up",
            3,
            "model s.m: A column, variable, or function parameter with name `fares` cannot be resolved. Did you mean "
            "one of the following? [`fare`, `id`]. (fix: correct the name, or add the column to what the query reads)",
        ),
        (
            "SELECT id,\n  t.fare,\n  LEN_OF_IT(t.fare) AS n\nFROM s.up AS t",
            4,
            "model s.m: Cannot resolve routine `LEN_OF_IT` on search path",
        ),
    ],
)
def test_a_name_the_query_s_inputs_lack_is_one_line_naming_file_and_line(spark, tmp_path, capsys, query, line, message):
    """A column or function that does not exist: the model's file and the line naming it, Spark's sentence
    (with the names it suggests) and the fix, exit 2; not Spark's plan."""
    root = project(
        tmp_path,
        {
            "models/up.sql": "MODEL (name s.up, kind FULL);\nSELECT 1 AS id, 2.5 AS fare",
            "models/m.sql": "MODEL (name s.m, kind FULL);\n" + query,
        },
    )
    code = main(["run", "--project", str(root)])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 2, text
    failure = next(line for line in text.splitlines() if "model s.m:" in line)
    assert failure.strip().startswith(f"{root / 'models' / 'm.sql'}:{line}: {message}"), failure
    assert "'Project" not in text and "Traceback" not in text
