"""A CSV source written another way than comma-separated UTF-8 with a header: ``csv_settings`` in sources.yaml
(named as a SEED's) says how, and every reader honours it: the run, the automation's watch of new files, and
the one-line error that names a bad record's line and column.
"""

from __future__ import annotations

from datetime import date, datetime, timezone
from pathlib import Path

import pytest

from incremental_assets import delta
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.orchestration.source_watch import source_changes

from helpers import cli_output, table_rows

UTC = timezone.utc
SOURCES = """
- name: raw.sales
  location: data/sales
  format: csv
  columns: {sold_at: timestamp, shop: string, amount: int}
  time_column: sold_at
  csv_settings: {delimiter: ';', encoding: latin-1}
- name: raw.stock
  location: data/stock.tsv
  format: csv
  columns: {day: date, shop: string, units: int}
  time_column: day
  csv_settings: {delimiter: "\\t", header: false, quotechar: "'"}
"""
SALES = """
MODEL (name s.sales, kind INCREMENTAL_BY_TIME_RANGE (time_column day), start '2025-03-01', cron '@daily');
SELECT CAST(sold_at AS DATE) AS day, shop, COUNT(*) AS n, SUM(amount) AS amount FROM raw.sales
GROUP BY CAST(sold_at AS DATE), shop
"""
STOCK = """
MODEL (name s.stock, kind INCREMENTAL_BY_TIME_RANGE (time_column day), start '2025-03-01', cron '@daily');
SELECT day, shop, SUM(units) AS units FROM raw.stock GROUP BY day, shop
"""


def write_sales(folder: Path, name: str, rows: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(("sold_at;shop;amount\n" + "".join(r + "\n" for r in rows)).encode("latin-1"))


@pytest.fixture
def root(spark, make_project, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    root = make_project({"sources.yaml": SOURCES, "models/sales.sql": SALES, "models/stock.sql": STOCK})
    write_sales(
        root / "data" / "sales",
        "day1.csv",
        ['2025-03-01 09:00:00;"Café; Nord";10', "2025-03-01 18:00:00;Süd;5", "2025-03-01 23:00:00;Süd;1"],
    )
    write_sales(root / "data" / "sales", "day2.csv", ['2025-03-02 10:00:00;"Café; Nord";7'])
    (root / "data" / "stock.tsv").write_text(
        "2025-03-01\t'North\tshop'\t4\n2025-03-02\tSouth\t2\n2025-03-02\tSouth\t3\n"
    )
    return root


def test_a_csv_source_s_settings_reach_the_run_the_watch_and_the_error(root, capsys):
    code, out = cli_output(root, capsys, "run", "--start", "2025-03-01", "--end", "2025-03-03")
    assert code == 0, out
    warehouse = load_project(root).settings.warehouse
    assert table_rows(delta.table_uri(warehouse, "s.sales")) == [
        (date(2025, 3, 1), "Café; Nord", 1, 10),
        (date(2025, 3, 1), "Süd", 2, 6),
        (date(2025, 3, 2), "Café; Nord", 1, 7),
    ]
    assert table_rows(delta.table_uri(warehouse, "s.stock")) == [
        (date(2025, 3, 1), "North\tshop", 4),
        (date(2025, 3, 2), "South", 5),
    ]

    # A late file: the watch reads it with the same settings and names its day.
    source = load_project(root).sources["raw.sales"]
    marker = source_changes(source, None)[0]
    write_sales(root / "data" / "sales", "late.csv", ["2025-03-01 12:00:00;Süd;100"])
    _, changed, note = source_changes(source, marker)
    assert note is None and changed == [TimeWindow(datetime(2025, 3, 1, tzinfo=UTC), datetime(2025, 3, 2, tzinfo=UTC))]

    # A bad value: one line naming the file, its line and column.
    write_sales(root / "data" / "sales", "bad.csv", ["2025-03-02 11:00:00;Süd;12", "2025-03-02 12:00:00;Süd;lots"])
    code, out = cli_output(root, capsys, "run", "s.sales", "--start", "2025-03-02", "--end", "2025-03-03")
    assert code == 2, out
    assert "bad.csv line 3: column amount holds 'lots'" in out, out
    assert "Traceback" not in out


@pytest.mark.parametrize(
    "settings, message",
    [
        ("{separator: ';'}", "unknown csv_settings key 'separator' (fix: use delimiter, quotechar"),
        ("{delimiter: ';;'}", "csv_settings delimiter is ';;' (fix: delimiter must be one character"),
        ("{header: 'no'}", "csv_settings header is 'no' (fix: header must be true or false)"),
        ("{encoding: cp1252}", "csv_settings encoding is 'cp1252' (fix: encoding must be one of utf-8, iso-8859-1"),
    ],
)
def test_a_wrong_csv_setting_is_one_line_naming_file_line_and_fix(make_project, capsys, settings, message):
    root = make_project(
        {"sources.yaml": f"- name: raw.a\n  location: data/a.csv\n  format: csv\n  csv_settings: {settings}\n"}
    )
    code, out = cli_output(root, capsys, "validate")
    assert code == 2, out
    assert "sources.yaml:1:" in out and message in out, out
