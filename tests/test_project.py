"""Projects: sources.yaml, settings with environment overrides, selections."""

import pytest

from incremental_assets.errors import ModelFileError, ProjectError, SelectionError
from incremental_assets.load.project import load_project
from incremental_assets.load.settings import load_settings
from incremental_assets.model.settings import LISTING_JOB_THRESHOLD

SOURCES = """\
- name: raw.orders
  location: data/orders
  format: delta
  time_column: order_ts
  interval_unit: hour
  columns:
    order_id: bigint
    order_ts: timestamp
- name: raw.items
  location: /abs/items.csv
  format: csv
"""


def test_sources_yaml(make_project):
    root = make_project(
        {"sources.yaml": SOURCES, "models/a.sql": "MODEL (name s.a, kind FULL); SELECT order_id FROM raw.orders"}
    )
    p = load_project(root)
    orders = p.sources["raw.orders"]
    assert orders.location == str(root / "data" / "orders")
    assert orders.time_column == "order_ts" and orders.interval_unit == "hour" and orders.is_time_series
    assert orders.columns == {"order_id": "bigint", "order_ts": "timestamp"}
    items = p.sources["raw.items"]
    assert items.location == "/abs/items.csv" and not items.is_time_series
    assert p.models["s.a"].depends_on == ("raw.orders",)


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("- name: raw.a\n  location: x\n  format: avro\n", 1, "unknown format 'avro'"),
        ("- name: raw.a\n  format: delta\n", 1, "missing 'location'"),
        (
            "- name: raw.a\n  location: x\n  format: delta\n- name: raw.a\n  location: y\n  format: delta\n",
            4,
            "declared twice",
        ),
        ("- name: raw.a\n  location: x\n  format: delta\n  colour: red\n", 1, "unknown key(s) colour"),
        ("- name: raw.a\n  location: [x\n", 3, "invalid YAML"),
        ("name: raw.a\n", 1, "must be a list"),
    ],
)
def test_sources_yaml_errors(make_project, text, line, message):
    root = make_project({"sources.yaml": text})
    with pytest.raises(ProjectError) as err:
        load_project(root)
    (e,) = err.value.errors
    assert e.path == str(root / "sources.yaml") and e.line == line and message in e.message


def test_settings_defaults_file_and_environment(tmp_path):
    s = load_settings(tmp_path, environ={})
    assert s.warehouse == str(tmp_path.resolve() / "warehouse")
    assert s.spark_config()["spark.master"] == "local[2]" and s.spark_config()["spark.sql.session.timeZone"] == "UTC"
    (tmp_path / "incremental_assets.yaml").write_text(
        "warehouse: lake\nspark:\n  master: local[1]\n  conf:\n    spark.sql.shuffle.partitions: 8\n"
    )
    s = load_settings(tmp_path, environ={})
    assert s.warehouse == str(tmp_path.resolve() / "lake") and s.spark_master == "local[1]"
    assert s.spark_config()["spark.sql.shuffle.partitions"] == "8"
    s = load_settings(
        tmp_path,
        environ={
            "INCREMENTAL_ASSETS_WAREHOUSE": "s3://bucket/wh",
            "INCREMENTAL_ASSETS_SPARK_MASTER": "spark://h:7077",
            "INCREMENTAL_ASSETS_SPARK_CONF": '{"spark.executor.memory": "2g"}',
        },
    )
    assert s.warehouse == "s3://bucket/wh" and s.spark_master == "spark://h:7077"
    assert s.spark_config()["spark.executor.memory"] == "2g" and s.spark_config()["spark.sql.shuffle.partitions"] == "8"


def test_a_local_spark_lists_a_reads_files_on_the_driver(tmp_path):
    """On one local JVM a read's files are listed by the driver, never by a Spark job (~1.4 s a read of a
    year's files); a cluster, a remote server or an object store keeps Spark's default."""
    local = load_settings(tmp_path, environ={})
    assert local.spark_config()[LISTING_JOB_THRESHOLD] == "100000"
    for environ in (
        {"INCREMENTAL_ASSETS_SPARK_MASTER": "spark://h:7077"},
        {"INCREMENTAL_ASSETS_WAREHOUSE": "s3://bucket/wh"},
        {"INCREMENTAL_ASSETS_SPARK_REMOTE": "sc://h:15002"},
    ):
        assert LISTING_JOB_THRESHOLD not in load_settings(tmp_path, environ=environ).spark_config(), environ
    (tmp_path / "incremental_assets.yaml").write_text(f"spark:\n  conf:\n    {LISTING_JOB_THRESHOLD}: 64\n")
    assert (
        load_settings(tmp_path, environ={}).spark_config()[LISTING_JOB_THRESHOLD] == "64"
    )  # the user's own value wins


def test_settings_errors(tmp_path):
    (tmp_path / "incremental_assets.yaml").write_text("warehose: x\n")
    with pytest.raises(ModelFileError, match="unknown setting.*warehose"):
        load_settings(tmp_path, environ={})
    with pytest.raises(ModelFileError, match="JSON object"):
        load_settings(tmp_path.parent, environ={"INCREMENTAL_ASSETS_SPARK_CONF": "nope"})


def test_selection(make_project):
    root = make_project(
        {
            "models/a.sql": "MODEL (name s.a, kind FULL, tags [t1]); SELECT 1 AS x",
            "models/b.sql": "MODEL (name s.b, kind FULL); SELECT x FROM s.a",
            "models/c.sql": "MODEL (name s.c, kind FULL); SELECT x FROM s.b",
            "models/d.sql": "MODEL (name s.d, kind FULL); SELECT 1 AS y",
        }
    )
    p = load_project(root)
    names = lambda sel: [m.name for m in p.select(sel)]  # noqa: E731
    assert names(None) == ["s.a", "s.b", "s.c", "s.d"]
    assert names("s.c") == ["s.c"]
    assert names("+s.c") == ["s.a", "s.b", "s.c"]
    assert names("s.a+") == ["s.a", "s.b", "s.c"]
    assert names("tag:t1,s.d") == ["s.a", "s.d"]
    with pytest.raises(SelectionError, match="no model named 's.zz'"):
        p.select("s.zz")
