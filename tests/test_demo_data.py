"""The example shop's source data: deterministic, scalable, consistent, and what sources.yaml says it is."""

from __future__ import annotations

import ast
from datetime import date, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable

from incremental_assets import demo
from incremental_assets.demo import SOURCE_LOCATIONS, append_demo_day, generate_demo_data

REPO = Path(__file__).resolve().parents[1]
START = date(2024, 1, 1)
DAYS = 28
ORDERS_PER_DAY = 40


def read_source(project: Path, name: str) -> pa.Table:
    """A source's rows in a canonical order, so that two reads compare with ``equals``."""
    location = project / SOURCE_LOCATIONS[name]
    if name == "raw.orders":
        return DeltaTable(location).to_pyarrow_table().sort_by("order_id")
    if name == "raw.order_items":
        table = DeltaTable(location).to_pyarrow_table()
        return table.sort_by([("order_id", "ascending"), ("line_no", "ascending")])
    if name == "raw.customers":
        return pq.read_table(location)
    return pa_csv.read_csv(location)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("shop")
    generate_demo_data(directory, start=START, days=DAYS, orders_per_day=ORDERS_PER_DAY)
    return directory


@pytest.fixture(scope="module")
def tables(project: Path) -> dict[str, pa.Table]:
    return {name: read_source(project, name) for name in SOURCE_LOCATIONS}


# --- determinism and scale ----------------------------------------------------------------------------


def test_same_arguments_give_the_same_rows(tmp_path: Path, tables: dict[str, pa.Table]) -> None:
    counts = generate_demo_data(tmp_path, start=START, days=DAYS, orders_per_day=ORDERS_PER_DAY)
    for name, expected in tables.items():
        again = read_source(tmp_path, name)
        assert again.equals(expected), name
        assert counts[name] == expected.num_rows


def test_another_seed_gives_other_rows(tmp_path: Path, tables: dict[str, pa.Table]) -> None:
    generate_demo_data(tmp_path, start=START, days=DAYS, orders_per_day=ORDERS_PER_DAY, seed=8)
    for name in ("raw.orders", "raw.order_items", "raw.customers", "raw.items"):
        assert not read_source(tmp_path, name).equals(tables[name]), name


def test_regenerating_replaces_the_old_data(tmp_path: Path) -> None:
    generate_demo_data(tmp_path, start=START, days=10, orders_per_day=30)
    counts = generate_demo_data(tmp_path, start=date(2024, 6, 1), days=3, orders_per_day=30)
    orders = read_source(tmp_path, "raw.orders")
    assert orders.num_rows == counts["raw.orders"]
    assert set(orders["order_date"].to_pylist()) == {date(2024, 6, 1) + timedelta(days=i) for i in range(3)}


def test_orders_per_day_scales_the_volume_without_changing_its_shape(tmp_path: Path) -> None:
    small = generate_demo_data(tmp_path / "small", start=START, days=14, orders_per_day=100)
    large = generate_demo_data(tmp_path / "large", start=START, days=14, orders_per_day=300)

    def per_day(directory: Path) -> dict[date, int]:
        orders = read_source(directory, "raw.orders")
        counts = orders.group_by("order_date").aggregate([("order_id", "count")])
        return dict(zip(counts["order_date"].to_pylist(), counts["order_id_count"].to_pylist()))

    small_days, large_days = per_day(tmp_path / "small"), per_day(tmp_path / "large")
    assert small_days.keys() == large_days.keys()
    for day, count in small_days.items():
        assert abs(large_days[day] - 3 * count) <= 2, day  # only rounding differs
    assert large["raw.order_items"] == pytest.approx(3 * small["raw.order_items"], rel=0.1)
    assert (small["raw.customers"], large["raw.customers"]) == (1000, 3000)
    assert small["raw.items"] == large["raw.items"] == 100


def test_a_tiny_shop_still_has_fifty_customers(tmp_path: Path) -> None:
    counts = generate_demo_data(tmp_path, start=START, days=2, orders_per_day=1)
    assert counts["raw.customers"] == 50
    assert counts["raw.orders"] >= 2  # at least one order a day


@pytest.mark.parametrize("arguments", [{"days": 0}, {"orders_per_day": 0}])
def test_empty_shops_are_refused(tmp_path: Path, arguments: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        generate_demo_data(tmp_path, **arguments)


# --- schemas ------------------------------------------------------------------------------------------

UTC_MICROS = pa.timestamp("us", tz="UTC")
EXPECTED_SCHEMAS = {
    "raw.orders": pa.schema(
        [("order_id", pa.int64()), ("customer_id", pa.int64()), ("order_ts", UTC_MICROS),
         ("order_date", pa.date32()), ("status", pa.string()), ("channel", pa.string())]
    ),
    "raw.order_items": pa.schema(
        [("order_id", pa.int64()), ("line_no", pa.int32()), ("item_id", pa.int64()),
         ("quantity", pa.int32()), ("order_ts", UTC_MICROS), ("order_date", pa.date32())]
    ),
    "raw.customers": pa.schema(
        [("customer_id", pa.int64()), ("name", pa.string()), ("country", pa.string()),
         ("signup_date", pa.date32()), ("segment", pa.string())]
    ),
}  # fmt: skip
SPARK_TYPE_OF_ARROW = {
    pa.int64(): "bigint",
    pa.int32(): "int",
    pa.string(): "string",
    pa.date32(): "date",
    UTC_MICROS: "timestamp",
}


@pytest.mark.parametrize("name", sorted(EXPECTED_SCHEMAS))
def test_sources_have_the_documented_schema(tables: dict[str, pa.Table], name: str) -> None:
    assert tables[name].schema.remove_metadata() == EXPECTED_SCHEMAS[name]


@pytest.mark.parametrize("name", ["raw.orders", "raw.order_items"])
def test_delta_sources_are_partitioned_by_order_date(project: Path, name: str) -> None:
    table = DeltaTable(project / SOURCE_LOCATIONS[name])
    assert table.metadata().partition_columns == ["order_date"]
    dates = {uri.split("order_date=")[1].split("/")[0] for uri in table.file_uris()}
    assert len(dates) == DAYS


def test_sources_yaml_describes_the_generated_data(tables: dict[str, pa.Table]) -> None:
    entries = {entry["name"]: entry for entry in yaml.safe_load((REPO / "sources.yaml").read_text())}
    assert entries.keys() == SOURCE_LOCATIONS.keys()
    for name, entry in entries.items():
        assert entry["location"] == SOURCE_LOCATIONS[name]
        assert list(entry["columns"]) == tables[name].column_names, name
        if name in EXPECTED_SCHEMAS:
            spark_types = [SPARK_TYPE_OF_ARROW[field.type] for field in EXPECTED_SCHEMAS[name]]
            assert list(entry["columns"].values()) == spark_types, name
    assert entries["raw.items"]["columns"]["unit_price"] == "decimal(10,2)"
    assert {name for name, entry in entries.items() if entry.get("time_column")} == {
        "raw.orders",
        "raw.order_items",
    }
    assert entries["raw.orders"]["time_column"] == entries["raw.order_items"]["time_column"] == "order_ts"


# --- consistency --------------------------------------------------------------------------------------


def test_every_order_ts_lies_in_its_order_date(tables: dict[str, pa.Table]) -> None:
    for name in ("raw.orders", "raw.order_items"):
        table = tables[name]
        day_of_ts = pc.cast(pc.floor_temporal(table["order_ts"], unit="day"), pa.date32())
        assert pc.all(pc.equal(day_of_ts, table["order_date"])).as_py(), name
    first, last = pc.min_max(tables["raw.orders"]["order_date"]).values()
    assert (first.as_py(), last.as_py()) == (START, START + timedelta(days=DAYS - 1))


def test_order_ids_are_unique_and_follow_time(tables: dict[str, pa.Table]) -> None:
    orders = tables["raw.orders"]  # sorted by order_id
    ids = orders["order_id"].to_numpy()
    assert ids[0] == 1 and (ids[1:] - ids[:-1] == 1).all()
    ts = orders["order_ts"].cast(pa.int64()).to_numpy()
    assert (ts[1:] >= ts[:-1]).all()


def test_order_items_belong_to_existing_orders_at_the_same_time(tables: dict[str, pa.Table]) -> None:
    orders, lines = tables["raw.orders"], tables["raw.order_items"]
    joined = lines.join(orders.select(["order_id", "order_ts"]), "order_id", right_suffix="_order")
    assert joined.num_rows == lines.num_rows
    assert joined["order_ts"].equals(joined["order_ts_order"])
    # Every order has lines 1..n, n between 1 and 4, each line a different item.
    per_order = lines.group_by("order_id").aggregate(
        [("line_no", "count"), ("line_no", "max"), ("item_id", "count_distinct")]
    )
    assert per_order.num_rows == orders.num_rows
    assert per_order["line_no_count"].equals(per_order["line_no_max"].cast(pa.int64()))
    assert per_order["item_id_count_distinct"].equals(per_order["line_no_count"])
    assert set(per_order["line_no_count"].to_pylist()) == {1, 2, 3, 4}
    assert set(lines["quantity"].to_pylist()) == {1, 2, 3, 4, 5}


def test_order_items_reference_existing_items(tables: dict[str, pa.Table]) -> None:
    known = tables["raw.items"]["item_id"]
    assert pc.all(pc.is_in(tables["raw.order_items"]["item_id"], value_set=known)).as_py()


def test_customers_order_only_after_signing_up(tables: dict[str, pa.Table]) -> None:
    customers = tables["raw.customers"]
    orders = tables["raw.orders"].join(customers.select(["customer_id", "signup_date"]), "customer_id")
    assert orders.num_rows == tables["raw.orders"].num_rows  # every customer id exists
    assert pc.all(pc.less_equal(orders["signup_date"], orders["order_date"])).as_py()
    assert customers.num_rows == ORDERS_PER_DAY * 10
    assert customers["customer_id"].to_pylist() == list(range(1, customers.num_rows + 1))


def test_customers_raw_countries_need_cleaning_into_ten_codes(tables: dict[str, pa.Table]) -> None:
    raw = tables["raw.customers"]["country"]
    cleaned = pc.utf8_upper(pc.utf8_trim_whitespace(raw))
    assert len(pc.unique(cleaned)) == 10
    assert len(pc.unique(raw)) > 10  # the staging model has real work to do
    assert set(tables["raw.customers"]["segment"].to_pylist()) == {"consumer", "business"}


def test_items_catalogue(project: Path, tables: dict[str, pa.Table]) -> None:
    items = tables["raw.items"]
    assert items.num_rows == 100
    assert len(pc.unique(items["category"])) == 8
    assert len(pc.unique(items["item_id"])) == len(pc.unique(items["name"])) == 100
    lines = (project / SOURCE_LOCATIONS["raw.items"]).read_text().splitlines()
    assert lines[0].replace('"', "") == "item_id,name,category,unit_price"
    prices = [line.rsplit(",", 1)[1] for line in lines[1:]]
    assert all(len(price.split(".")[1]) == 2 and float(price) > 0 for price in prices)


def test_statuses_and_channels(tables: dict[str, pa.Table]) -> None:
    orders = tables["raw.orders"]
    assert set(orders["status"].to_pylist()) == {"placed", "shipped", "cancelled", "returned"}
    assert set(orders["channel"].to_pylist()) == {"web", "app", "store"}
    hours = pc.hour(orders["order_ts"])
    store_hours = pc.filter(hours, pc.equal(orders["channel"], "store")).to_pylist()
    assert 9 <= min(store_hours) and max(store_hours) < 20  # stores are closed at night


def test_volume_follows_the_daily_curve_and_the_week(tables: dict[str, pa.Table]) -> None:
    orders = tables["raw.orders"]
    hours = pc.hour(orders["order_ts"]).to_numpy()
    night, evening = ((hours >= 2) & (hours < 5)).sum(), ((hours >= 18) & (hours < 21)).sum()
    assert evening > 10 * night
    weekday = pc.day_of_week(orders["order_date"]).to_numpy()  # Monday = 0
    assert (weekday == 5).sum() > (weekday == 0).sum()  # Saturdays beat Mondays


# --- appending ----------------------------------------------------------------------------------------


def test_append_demo_day_adds_exactly_the_next_day(tmp_path: Path) -> None:
    generate_demo_data(tmp_path / "grown", start=START, days=9, orders_per_day=ORDERS_PER_DAY)
    before = {name: read_source(tmp_path / "grown", name) for name in ("raw.orders", "raw.order_items")}
    version = DeltaTable(tmp_path / "grown" / SOURCE_LOCATIONS["raw.orders"]).version()

    new_day = START + timedelta(days=9)
    added = append_demo_day(tmp_path / "grown", new_day, orders_per_day=ORDERS_PER_DAY)

    assert DeltaTable(tmp_path / "grown" / SOURCE_LOCATIONS["raw.orders"]).version() == version + 1
    for name, old in before.items():
        now = read_source(tmp_path / "grown", name)
        assert now.num_rows == old.num_rows + added[name] and added[name] > 0
        assert now.slice(0, old.num_rows).equals(old), name  # old rows untouched (sorted by id)
        new_rows = now.slice(old.num_rows)
        assert set(new_rows["order_date"].to_pylist()) == {new_day}, name
    # The same rows as a generation with one more day: "new data arrived", honestly.
    generate_demo_data(tmp_path / "direct", start=START, days=10, orders_per_day=ORDERS_PER_DAY)
    for name in before:
        assert read_source(tmp_path / "grown", name).equals(read_source(tmp_path / "direct", name)), name


def test_append_demo_day_to_a_loaded_day_adds_a_few_late_orders(tmp_path: Path) -> None:
    generate_demo_data(tmp_path, start=START, days=5, orders_per_day=200)
    old = read_source(tmp_path, "raw.orders")
    late_day = START + timedelta(days=2)
    on_time = pc.sum(pc.equal(old["order_date"], pa.scalar(late_day, pa.date32()))).as_py()

    first = append_demo_day(tmp_path, late_day, orders_per_day=200)
    second = append_demo_day(tmp_path, late_day, orders_per_day=200)

    orders = read_source(tmp_path, "raw.orders")
    late = orders.slice(old.num_rows)
    assert set(late["order_date"].to_pylist()) == {late_day}
    assert 0 < first["raw.orders"] < on_time / 5
    assert late["order_id"].to_pylist() == list(range(old.num_rows + 1, orders.num_rows + 1))
    # Two late batches are different orders, not copies of each other.
    first_ts = late["order_ts"].slice(0, first["raw.orders"]).to_pylist()
    second_ts = late["order_ts"].slice(first["raw.orders"]).to_pylist()
    assert len(second_ts) == second["raw.orders"] and first_ts != second_ts


def test_append_demo_day_needs_generated_data(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        append_demo_day(tmp_path, START)


# --- boundaries ---------------------------------------------------------------------------------------


def test_demo_modules_import_no_engine() -> None:
    modules = sorted(Path(demo.__file__).parent.glob("*.py"))
    assert len(modules) > 3
    trees = [ast.parse(path.read_text()) for path in modules]
    imported = {
        alias.name for tree in trees for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {node.module or "" for tree in trees for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    roots = {name.split(".")[0] for name in imported}
    assert not roots & {"dagster", "pyspark"}, roots
