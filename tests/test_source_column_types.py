"""A DuckDB model over a Parquet or Delta source that declares no ``columns`` gives DuckDB's own values: the
column types its translation depends on (a DATE less a DATE, a DOUBLE cast to an integer, ``LEN`` of a list, a
text's ``s[i]``, ``SELECT * REPLACE``) are read from the source's files at load. The oracle is real DuckDB (in
SQLMesh's venv) reading the very same files."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from test_spark_semantics import REPLACING_STARS, ROWS, TYPED_COLUMNS, _typed

from incremental_assets import delta
from incremental_assets.load.project import load_project
from incremental_assets.load.source_columns import file_source_columns
from incremental_assets.plan.run_plan import plan_run

from helpers import table_rows
from sqlmesh_venv import sqlmesh_python, text_rows

pytestmark = pytest.mark.sqlmesh

# t3's rows as a file holds them: DuckDB's TIMESTAMP, DATE, INTEGER, TEXT and DECIMAL(10, 2).
SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us")),
        ("d", pa.date32()),
        ("x", pa.int32()),
        ("y", pa.int32()),
        ("s", pa.string()),
        ("dec", pa.decimal128(10, 2)),
    ]
)
QUERIES = {"typed_columns": TYPED_COLUMNS, "replacing_stars": REPLACING_STARS}
SHAPES = ("parquet_file", "parquet_folder", "delta")

DUCKDB_ON_FILES = """
import duckdb, json, sys
files, queries = json.loads(sys.stdin.read())
c = duckdb.connect()
c.execute("CREATE VIEW t3 AS SELECT * FROM read_parquet([" + ", ".join("'" + f + "'" for f in files) + "])")
results = []
for q in queries:
    r = c.execute(q)
    results.append([r.fetchall(), [str(d[1]) for d in r.description]])
print(json.dumps(results, default=str))
"""


def _table() -> pa.Table:
    def cell(value, kind):
        if value is None:
            return None
        if kind == pa.timestamp("us"):
            return datetime.fromisoformat(value)
        if kind == pa.date32():
            return date.fromisoformat(value)
        return Decimal(value) if pa.types.is_decimal(kind) else value

    columns = list(zip(*ROWS))
    return pa.table({f.name: pa.array([cell(v, f.type) for v in c], f.type) for f, c in zip(SCHEMA, columns)})


def _write(shape: str, root: Path) -> tuple[str, list[str]]:
    """The source's location (relative to the project) and its data files, the rows written as ``shape``."""
    table = _table()
    if shape == "parquet_file":
        pq.write_table(table, root / "data" / "t3.parquet")
        return "data/t3.parquet", [str(root / "data" / "t3.parquet")]
    if shape == "parquet_folder":  # two files, a hidden one and a marker Spark skips
        folder = root / "data" / "t3"
        folder.mkdir()
        pq.write_table(table.slice(0, 3), folder / "part-0.parquet")
        pq.write_table(table.slice(3), folder / "part-1.parquet")
        (folder / "_SUCCESS").touch()
        (folder / ".partial.parquet").write_bytes(b"not a footer")
        return "data/t3", [str(folder / "part-0.parquet"), str(folder / "part-1.parquet")]
    write_deltalake(str(root / "data" / "t3_delta"), table)
    return "data/t3_delta", [f.removeprefix("file://") for f in DeltaTable(str(root / "data" / "t3_delta")).file_uris()]


def _project(make_project, shape: str) -> tuple[Path, list[str]]:
    models = {
        f"models/{name}.sql": f"MODEL (name db.{name}, kind FULL);\n\n" + re.sub(r"\bt3\b", "raw.t3", query) + "\n"
        for name, query in QUERIES.items()
    }
    root = make_project({"config.yaml": "model_defaults:\n  dialect: duckdb\n", **models})
    (root / "data").mkdir()
    location, files = _write(shape, root)
    fmt = "delta" if shape == "delta" else "parquet"
    (root / "sources.yaml").write_text(f"- name: raw.t3\n  location: {location}\n  format: {fmt}\n")
    return root, files


def _duckdb(files: list[str]) -> dict:
    done = subprocess.run(
        [str(sqlmesh_python()), "-c", DUCKDB_ON_FILES],
        input=json.dumps([files, list(QUERIES.values())]),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return dict(zip(QUERIES, json.loads(done.stdout)))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_duckdb_model_over_a_source_without_columns_gives_duckdb_s_rows(spark, make_project, shape):
    from incremental_assets.spark.executor import Executor

    root, files = _project(make_project, shape)
    project = load_project(root)
    executor = Executor(spark, project)
    theirs = _duckdb(files)
    for name in QUERIES:
        executor.execute(plan_run(project, project.model(f"db.{name}"), None))
        rows, types = theirs[name]
        ours = table_rows(delta.table_uri(project.settings.warehouse, f"db.{name}"))
        assert text_rows(ours) == text_rows(_typed(rows, types)), name


def test_a_source_s_columns_are_read_from_its_footer_or_its_log(tmp_path):
    (tmp_path / "data").mkdir()
    expected = {"ts": "timestamp", "d": "date", "x": "int", "y": "int", "s": "string", "dec": "decimal(10,2)"}
    for shape in SHAPES:
        location, _ = _write(shape, tmp_path)
        assert file_source_columns(str(tmp_path / location), "delta" if shape == "delta" else "parquet") == expected
    # a column added later is in the newest schema of the log, also once the commits before a checkpoint are gone
    uri = str(tmp_path / "data" / "t3_delta")
    write_deltalake(uri, _table().append_column("n", pa.array([1] * len(ROWS), pa.int64())), mode="append",
                    schema_mode="merge")  # fmt: skip
    DeltaTable(uri).create_checkpoint()
    for commit in (tmp_path / "data" / "t3_delta" / "_delta_log").glob("*.json"):
        commit.unlink()
    assert file_source_columns(uri, "delta") == {**expected, "n": "bigint"}
    assert file_source_columns(str(tmp_path / "data" / "none"), "parquet") is None
    assert file_source_columns(str(tmp_path / "data" / "t3.parquet"), "csv") is None
