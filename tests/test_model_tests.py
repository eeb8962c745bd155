"""`incremental-assets test`: SQLMesh-format model unit tests on Spark, with readable diffs."""

from __future__ import annotations

from incremental_assets import cli

from conftest import REPO

BROKEN = """
test_wrong_expectation:
  model: s.daily
  vars: {start: '2024-01-02', end: '2024-01-02'}
  inputs:
    s.hourly: [{h: '2024-01-02 05:00:00', n: 2}, {h: '2024-01-02 06:00:00', n: 3}, {h: '2024-01-03 00:00:00', n: 100}]
  outputs:
    query: [{ds: '2024-01-02', n: 6}]
"""


def test_example_project_model_tests_pass(spark, capsys):
    assert cli.main(["test", "--project", str(REPO)]) == 0
    out = capsys.readouterr().out
    assert "ok   test_customers_are_cleaned (shop.customers" in out
    assert "ok   test_daily_channel_orders_rolls_up_hours_of_the_window_only" in out and "2 passed, 0 failed" in out


def test_failing_model_test_prints_a_row_diff(spark, make_project, capsys):
    from test_dagster import MODELS, SOURCES

    root = make_project({"sources.yaml": SOURCES, **MODELS, "tests/daily.yaml": BROKEN})
    assert cli.main(["test", "--project", str(root)]) == 1
    out = capsys.readouterr().out
    # The hour of the next day is outside the window: the model gives 5, the test expected 6.
    assert "FAIL test_wrong_expectation (s.daily, daily.yaml)" in out
    assert "-ds=2024-01-02  n=6.0" in out and "+ds=2024-01-02  n=5.0" in out
    assert "1 passed" not in out and "0 passed, 1 failed" in out


HOURLY = """
MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column hour_ts), interval_unit hour);
SELECT DATE_TRUNC('hour', ts) AS hour_ts, COUNT(*) AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
GROUP BY 1
"""
EVENTS = (
    "- {name: raw.events, location: data/events, format: parquet, time_column: ts, columns: {id: int, ts: timestamp}}\n"
)
ROWS = """
    raw.events:
      - {id: 1, ts: '2024-01-01 10:05:00'}
      - {id: 2, ts: '2024-01-01 11:59:59'}
      - {id: 3, ts: '2024-01-01 12:00:00'}
      - {id: 4, ts: '2024-01-02 00:00:00'}
"""


def _hours_test(name: str, hours: list[int], start: str, end: str) -> str:
    """A unit test of s.hourly over ROWS expecting one row in each of ``hours`` of 2024-01-01."""
    expected = "".join(f"      - {{hour_ts: '2024-01-01 {h:02d}:00:00', n: 1}}\n" for h in hours)
    return (
        f"{name}:\n  model: s.hourly\n  inputs:{ROWS}  outputs:\n    query:\n{expected}"
        f"  vars: {{start: '{start}', end: '{end}'}}\n"
    )


ENDS = (
    _hours_test("end_with_a_time_is_exclusive", [10, 11], "2024-01-01 10:00:00", "2024-01-01 12:00:00")
    + _hours_test("end_inside_an_interval_ends_after_it", [10, 11], "2024-01-01 10:00:00", "2024-01-01 11:59:59.999999")
    + _hours_test("end_as_a_date_names_its_last_day", [10, 11, 12], "2024-01-01", "2024-01-01")
)


def test_vars_end_is_read_as_sqlmesh_reads_it(spark, make_project, capsys):
    """A date names the last day (inclusive); a time of day is exclusive, or ends after the interval it is in."""
    root = make_project({"sources.yaml": EVENTS, "models/hourly.sql": HOURLY, "tests/ends.yaml": ENDS})
    code = cli.main(["test", "--project", str(root)])
    out = capsys.readouterr().out
    assert code == 0 and "3 passed, 0 failed" in out, out


EMBEDDED = {
    "models/raw.sql": "MODEL (name s.raw, kind FULL);\nSELECT 1 AS id, 10 AS amount",
    "models/doubled.sql": "MODEL (name s.doubled, kind EMBEDDED);\nSELECT id, amount * 2 AS doubled FROM s.raw",
    "models/plus_one.sql": "MODEL (name s.plus_one, kind FULL);\nSELECT id, doubled + 1 AS x FROM s.doubled",
}
EMBEDDED_TESTS = """
test_rows_of_the_embedded_model:
  model: s.plus_one
  inputs:
    s.doubled: [{id: 1, doubled: 100}]
  outputs:
    query: [{id: 1, x: 101}]
test_rows_of_what_it_reads:
  model: s.plus_one
  inputs:
    s.raw: [{id: 2, amount: 5}]
  outputs:
    query: [{id: 2, x: 11}]
"""


def test_an_embedded_model_s_rows_can_be_given_as_sqlmesh_gives_them(spark, make_project, capsys):
    """SQLMesh reads an EMBEDDED model a test gives rows for as one of the tested model's inputs; without them,
    its query runs on its own inputs' rows."""
    root = make_project({**EMBEDDED, "tests/embedded.yaml": EMBEDDED_TESTS})
    code = cli.main(["test", "--project", str(root)])
    out = capsys.readouterr().out
    assert code == 0 and "2 passed, 0 failed" in out, out


COUNTS = {
    "sources.yaml": EVENTS,
    "models/counts.sql": "MODEL (name s.counts, kind FULL);\nSELECT COUNT(*) AS n, SUM(id) AS ids FROM raw.events",
}


def _run_tests(make_project, capsys, files: dict[str, str]) -> tuple[int, str]:
    root = make_project(files)
    code = cli.main(["test", "--project", str(root)])
    return code, capsys.readouterr().out


def test_an_input_given_as_a_query_is_its_rows(spark, make_project, capsys):
    """SQLMesh runs an input's `query` (a column it leaves out is NULL in the declared type)."""
    tests = """
    test_input_as_query:
      model: s.counts
      inputs:
        raw.events:
          query: SELECT 1 AS id UNION ALL SELECT 2 AS id
      outputs:
        query: [{n: 2, ids: 3}]
    """
    code, out = _run_tests(make_project, capsys, {**COUNTS, "tests/q.yaml": tests})
    assert code == 0 and "ok   test_input_as_query" in out and "1 passed, 0 failed" in out, out


def test_an_input_given_as_csv_text_is_read_with_its_settings(spark, make_project, capsys):
    tests = """
    test_input_as_csv:
      model: s.counts
      inputs:
        raw.events:
          format: csv
          csv_settings: {sep: ';'}
          rows: |
            id;ts
            1;2024-01-01 10:05:00
            2;
      outputs:
        query: [{n: 2, ids: 3}]
    """
    code, out = _run_tests(make_project, capsys, {**COUNTS, "tests/csv.yaml": tests})
    assert code == 0 and "ok   test_input_as_csv" in out and "1 passed, 0 failed" in out, out


PARTIAL = """
test_left_out_column_is_null:
  model: s.counts
  inputs: {raw.events: [{id: 1}, {id: 2}]}
  outputs:
    query: [{n: 2}]
test_partial_outputs:
  model: s.counts
  inputs: {raw.events: [{id: 1}, {id: 2}]}
  outputs:
    partial: true
    query: [{n: 2}]
test_partial_query:
  model: s.counts
  inputs: {raw.events: [{id: 1}, {id: 2}]}
  outputs:
    query: {partial: true, rows: [{n: 2}]}
"""


def test_expected_rows_compare_every_column_unless_partial(spark, make_project, capsys):
    """As SQLMesh: a column the expected rows leave out is expected NULL; `partial: true` compares only theirs."""
    code, out = _run_tests(make_project, capsys, {**COUNTS, "tests/partial.yaml": PARTIAL})
    assert code == 1 and "2 passed, 1 failed" in out, out
    assert "FAIL test_left_out_column_is_null" in out and "leave out ids: compared as NULL" in out
    assert "-n=2.0  ids=None" in out and "+n=2.0  ids=3.0" in out
    assert "ok   test_partial_outputs" in out and "ok   test_partial_query" in out


VARS_MODELS = {
    "sources.yaml": EVENTS,
    "config.yaml": "variables: {min_id: 1}\n",
    "models/big.sql": (
        "MODEL (name s.big, kind FULL);\n"
        "SELECT COUNT(*) AS n, @execution_ds AS run_day, CURRENT_DATE AS today FROM raw.events\n"
        "WHERE id >= @VAR('min_id') AND id >= @min_id"
    ),
}
VARS_TESTS = """
test_vars_override_variables_and_the_clock:
  model: s.big
  vars: {min_id: 2, execution_time: '2024-05-09 12:00:00'}
  inputs: {raw.events: [{id: 1}, {id: 2}, {id: 3}]}
  outputs:
    query: [{n: 2, run_day: '2024-05-09', today: 2024-05-09}]
test_config_variables_without_vars:
  model: s.big
  vars: {execution_time: '2024-05-10'}
  inputs: {raw.events: [{id: 1}, {id: 2}, {id: 3}]}
  outputs:
    query: [{n: 3, run_day: '2024-05-10', today: 2024-05-10}]
"""


def test_vars_are_the_test_s_variables_and_execution_time(spark, make_project, capsys):
    """SQLMesh applies a test's `vars` (a variable override, `execution_time` for the date macros and CURRENT_*)."""
    code, out = _run_tests(make_project, capsys, {**VARS_MODELS, "tests/vars.yaml": VARS_TESTS})
    assert code == 0 and "2 passed, 0 failed" in out, out


BAD_TESTS = """
test_no_such_model:
  model: s.nothing
  outputs: {query: []}
test_rows_as_text:
  model: s.counts
  inputs: {raw.events: "1,2"}
  outputs: {query: [{n: 0}]}
test_bad_start:
  model: s.counts
  vars: {start: 'not a date'}
  inputs: {raw.events: []}
  outputs: {query: [{n: 0}]}
test_good:
  model: s.counts
  inputs: {raw.events: [{id: 4}]}
  outputs: {query: [{n: 1, ids: 4}]}
"""


def test_a_test_that_cannot_be_read_fails_alone_in_one_line(spark, make_project, capsys):
    files = {**COUNTS, "tests/bad.yaml": BAD_TESTS, "tests/broken.yaml": "test_x:\n  model: [s.counts\n"}
    code, out = _run_tests(make_project, capsys, files)
    assert code == 1 and "1 passed, 4 failed" in out and "ok   test_good (s.counts, bad.yaml)" in out, out
    failures = [line for line in out.splitlines() if line.startswith("    ")]
    assert len(failures) == 4 and all(line.startswith("    invalid test: ") for line in failures), out
    assert "bad.yaml:1: test test_no_such_model: no model named s.nothing" in out
    assert "test test_rows_as_text: input raw.events must be a list of rows" in out
    assert "test test_bad_start: vars.start:" in out and "FAIL broken.yaml (broken.yaml)" in out
