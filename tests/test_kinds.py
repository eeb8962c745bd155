"""SEED, EMBEDDED, materialized VIEW and FULL end to end on Spark and Delta, across runs with changing data;
a run failing after its files are staged leaves the previous table whole."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from incremental_assets import delta
from incremental_assets.errors import ModelFileError, ProjectError, SourceDataError
from incremental_assets.load.project import load_project
from incremental_assets.load.seeds import read_seed
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.explain import explain_model
from incremental_assets.plan.analyses import input_bound
from incremental_assets.plan.run_plan import plan_run, plan_window
from incremental_assets.spark.executor import Executor

from helpers import EVENTS_SOURCE, table_rows, table_uri, utc, write_events

SEED_MODEL = """
MODEL (name s.countries, kind SEED (path 'seeds/countries.csv'), columns (code STRING, name STRING, population BIGINT));
"""
INFERRED_SEED = """
MODEL (name s.rates, kind SEED (path 'seeds/rates.csv', csv_settings (delimiter = ';')));
"""
BIG = """
MODEL (name s.big, kind FULL);
SELECT c.code, c.population, r.rate FROM s.countries AS c JOIN s.rates AS r ON r.code = c.code WHERE c.population > 50
"""
MAT_VIEW = """
MODEL (name s.per_key, kind VIEW (materialized true));
SELECT k, COUNT(*) AS n, SUM(v) AS total FROM raw.events GROUP BY k
"""
EMBEDDED = """
MODEL (name s.positive, kind EMBEDDED);
SELECT ts, k, v FROM raw.events WHERE v > 0
"""
ROLLING = """
MODEL (name s.rolling, kind INCREMENTAL_BY_TIME_RANGE (time_column ts), start '2024-01-02');
SELECT r.ts, r.k, SUM(p.v) AS v24
FROM raw.events AS r JOIN s.positive AS p ON p.k = r.k AND p.ts > r.ts - INTERVAL 1 DAY AND p.ts <= r.ts
WHERE r.ts BETWEEN @start_dt AND @end_dt
GROUP BY r.ts, r.k
"""


def run_full(spark, p, name, **kw):
    return Executor(spark, p).execute(plan_run(p, p.model(name), None), **kw)


def write_seeds(root, countries: list[tuple], rates: list[tuple]) -> None:
    (root / "seeds").mkdir(exist_ok=True)
    (root / "seeds" / "countries.csv").write_text(
        "code,name,population\n" + "".join(f"{c},{n},{pop}\n" for c, n, pop in countries)
    )
    (root / "seeds" / "rates.csv").write_text("code;rate;since\n" + "".join(f"{c};{r};{d}\n" for c, r, d in rates))


def test_seed_models_load_csv_files_and_reload_when_they_change(spark, make_project):
    root = make_project({"models/countries.sql": SEED_MODEL, "models/rates.sql": INFERRED_SEED, "models/big.sql": BIG})
    contents = [
        ([("fr", "France", 68), ("lu", "Luxembourg", 1)], [("fr", 1.5, "2024-01-01"), ("lu", 2.0, "2024-01-01")]),
        (
            [("fr", "France", 68), ("lu", "Luxembourg", 1), ("de", "Germany", 84)],
            [("fr", 1.5, "2024-01-01"), ("de", 3.25, "2024-02-01")],
        ),
        ([("de", "Germany", 85)], [("de", 3.5, "2024-03-01")]),
    ]
    fingerprints = set()
    for countries, rates in contents:
        write_seeds(root, countries, rates)
        p = load_project(root)
        fingerprints.add(p.model("s.countries").fingerprint)
        for name in ("s.countries", "s.rates", "s.big"):
            run_full(spark, p, name)
        assert table_rows(table_uri(p, "s.countries")) == sorted(countries)
        assert [(c, r) for c, r, _ in table_rows(table_uri(p, "s.rates"))] == sorted((c, r) for c, r, _ in rates)
        expected = sorted((c, pop, r) for c, _, pop in countries for rc, r, _ in rates if rc == c and pop > 50)
        assert table_rows(table_uri(p, "s.big")) == expected
    assert len(fingerprints) == 3, "a changed CSV must change the seed's fingerprint"
    # Declared types are kept, undeclared ones inferred (a date stays text, as SQLMesh reads it).
    declared = delta.arrow_schema(table_uri(p, "s.countries"))
    assert str(declared.field("population").type) == "int64"
    inferred = {f.name: str(f.type) for f in delta.arrow_schema(table_uri(p, "s.rates"))}
    assert inferred == {"code": "string", "rate": "double", "since": "string"}
    assert p.model("s.rates").columns == {"code": "STRING", "rate": "DOUBLE", "since": "STRING"}
    assert DeltaTable(table_uri(p, "s.countries")).version() == 2


def test_a_bad_seed_value_names_the_csv_file_and_line(make_project):
    root = make_project({"models/countries.sql": SEED_MODEL})
    write_seeds(root, [("fr", "France", 68), ("de", "Germany", "many")], [])
    with pytest.raises(ProjectError) as err:
        load_project(root)
    text = str(err.value)
    assert "countries.csv:3" in text and "value 'many' of column population is not a BIGINT" in text
    (root / "seeds" / "countries.csv").write_text("code,name\nfr,France\n")
    with pytest.raises(ProjectError, match=r"countries.csv:1.*differ from the model's declared columns"):
        load_project(root)
    (root / "models" / "countries.sql").write_text("MODEL (name s.countries, kind SEED (path 'seeds/nope.csv'));")
    with pytest.raises(ProjectError, match=r"countries.sql:1.*seed file 'seeds/nope.csv' does not exist"):
        load_project(root)


@pytest.mark.parametrize(
    "spark_type, good, bad",
    [
        ("INT", "-7", "7.5"),
        ("DOUBLE", "1e3", "x1"),
        ("DECIMAL(10, 2)", "3.14", "pi"),
        ("BOOLEAN", "TRUE", "yes"),
        ("DATE", "2024-02-29", "20240229"),
        ("TIMESTAMP_NTZ", "2024-01-01T10:00:00Z", "2024-01-01 25:00"),
    ],
)
def test_declared_seed_types_check_every_value_and_name_its_line(tmp_path, spark_type, good, bad):
    path = tmp_path / "x.csv"
    path.write_text(f"a\n{good}\n\n{bad}\n")
    with pytest.raises(ModelFileError) as err:
        read_seed(path, declared={"a": spark_type})
    assert str(err.value).startswith(f"{path}:4: value '{bad}' of column a is not a {spark_type.upper()}")
    path.write_text(f"a\n{good}\n")
    assert read_seed(path, declared={"a": spark_type}).columns == {"a": spark_type.upper()}


def test_seed_column_types_are_inferred_narrowest_first(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text(
        "i,f,b,d,t,s,u\n1,1,true,2024-01-01,2024-01-01 10:00:00,2024-01-01,1_000\n"
        "2,2.5,False,2024-01-02,2024-01-02,x,2\n"
    )
    # Dates and times stay text, as pandas reads them for SQLMesh; Python's 1_000 is no number there.
    assert read_seed(path).columns == {
        "i": "BIGINT",
        "f": "DOUBLE",
        "b": "BOOLEAN",
        "d": "STRING",
        "t": "STRING",
        "s": "STRING",
        "u": "STRING",
    }


# SQLMesh's rows for this CSV (repro: pandas' missing-value markers are NULL, seat_limit has a gap).
PLANS_CSV = """plan;display_name;monthly_price;seat_limit;launched;notes
free;Free tier;0.00;1;2020-01-01;
pro;"Pro; monthly";49.90;10;2021-06-15;N/A
enterprise;Enterprise;499.00;;2022-02-01;None
legacy;Legacy;19.99;5;2019-03-10;null
basic;Basic;9.00;2;2019-03-11;NA
"""
PLANS_ROWS = [
    ("basic", "Basic", 9.0, 2, "2019-03-11", None),
    ("enterprise", "Enterprise", 499.0, None, "2022-02-01", None),
    ("free", "Free tier", 0.0, 1, "2020-01-01", None),
    ("legacy", "Legacy", 19.99, 5, "2019-03-10", None),
    ("pro", "Pro; monthly", 49.9, 10, "2021-06-15", None),
]


def test_seed_missing_value_markers_are_null_and_types_are_inferred_around_them(tmp_path):
    path = tmp_path / "plans.csv"
    path.write_text(PLANS_CSV)
    # A column of markers only is DOUBLE, as pandas reads it; an integer column with a gap stays BIGINT.
    assert read_seed(path, {"delimiter": ";"}).columns == {
        "plan": "STRING",
        "display_name": "STRING",
        "monthly_price": "DOUBLE",
        "seat_limit": "BIGINT",
        "launched": "STRING",
        "notes": "DOUBLE",
    }
    path.write_text("a,b\nNA,1\n#N/A,<NA>\n")  # a declared type's markers are NULL too, never a bad value
    assert read_seed(path, declared={"a": "INT", "b": "DOUBLE"}).columns == {"a": "INT", "b": "DOUBLE"}
    path.write_text("a,b\n-,NA\n3,x\n")
    assert read_seed(path, {"na_values": '{"a": ["-"]}', "keep_default_na": "false"}).columns == {
        "a": "BIGINT",
        "b": "STRING",
    }


def test_seed_rows_are_sqlmeshs_markers_null_and_quoted_values_spanning_lines(spark, make_project):
    root = make_project(
        {
            "models/plans.sql": "MODEL (name s.plans, kind SEED (path '../seeds/plans.csv', "
            "csv_settings (delimiter = ';')));",
            "models/notes.sql": "MODEL (name s.notes, kind SEED (path 'seeds/notes.csv', csv_settings "
            "(na_values = ['-'], keep_default_na = false)), columns (id INT, label TEXT, score DOUBLE));",
            "seeds/plans.csv": PLANS_CSV,
            "seeds/notes.csv": 'id,label,score\n1,NA,-\n2,"multi\nline",1.5\n3,"say ""hi"" \\",-\n4,,2\n',
        }
    )
    p = load_project(root)
    run_full(spark, p, "s.plans")
    assert table_rows(table_uri(p, "s.plans")) == PLANS_ROWS
    schema = {f.name: str(f.type) for f in delta.arrow_schema(table_uri(p, "s.plans"))}
    assert schema["launched"] == "string" and schema["seat_limit"] == "int64" and schema["notes"] == "double"
    # A quoted value spans lines, a doubled quote is one quote, a backslash is a character (as pandas reads
    # them); only the kind's na_values are NULL here (keep_default_na false: NA and an empty label are text).
    run_full(spark, p, "s.notes")
    assert table_rows(table_uri(p, "s.notes")) == [
        (1, "NA", None),
        (2, "multi\nline", 1.5),
        (3, 'say "hi" \\', None),
        (4, "", 2.0),
    ]


def test_a_seed_spark_cannot_read_names_the_csv_file_and_line_never_parquet(spark, make_project):
    root = make_project({"models/s.sql": "MODEL (name s.s, kind SEED (path 'seeds/s.csv'));"})
    (root / "seeds").mkdir()
    (root / "seeds" / "s.csv").write_text('id,label\n1,one\n2,"multi\nline\n3,x\n')
    with pytest.raises(ProjectError, match=r"s.csv:3: a quoted value opened on this line is never closed"):
        load_project(root)
    (root / "seeds" / "s.csv").write_text("id,label\n1,one\n2,two\n")
    p = load_project(root)
    (root / "seeds" / "s.csv").write_text("id,label\n1,one\n2,two,three\n")  # changed after the load
    with pytest.raises(SourceDataError) as err:
        run_full(spark, p, "s.s")
    text = str(err.value)
    assert "seed of model s.s" in text and "s.csv:3: the row has 3 values" in text and "Parquet" not in text


@pytest.fixture
def events_project(make_project):
    root = make_project(
        {
            "sources.yaml": EVENTS_SOURCE,
            "models/per_key.sql": MAT_VIEW,
            "models/positive.sql": EMBEDDED,
            "models/rolling.sql": ROLLING,
        }
    )
    return root


def test_materialized_view_is_a_table_refreshed_whole(spark, events_project):
    root = events_project
    for hours in (5, 9, 30):
        write_events(root / "data" / "events", utc(2024, 1, 1), hours)
        p = load_project(root)
        result = run_full(spark, p, "s.per_key")
        assert result.write == "replace_table"
        values = [(f"k{i % 3}", i % 7) for i in range(hours)]
        expected = sorted(
            (k, sum(1 for kk, _ in values if kk == k), sum(v for kk, v in values if kk == k))
            for k in {k for k, _ in values}
        )
        assert table_rows(table_uri(p, "s.per_key")) == expected


def test_embedded_model_is_inlined_and_its_lookback_derived_on_the_source(spark, events_project):
    root = events_project
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 2)
    p = load_project(root)
    rolling = p.model("s.rolling")
    # The consumer depends on what the embedded model reads, and the 1-day lookback through it is derived.
    assert rolling.depends_on == ("raw.events",) and rolling.embeds == ("s.positive",)
    bound = input_bound(p, "s.rolling", "raw.events")
    assert (bound.before, bound.after) == (timedelta(days=1), timedelta(0))
    assert "s.positive" not in [m.name for m in p.ordered()]
    assert explain_model(p, p.model("s.positive")).safety_class == "inlined into s.rolling (analysed there)"
    # No asset of its own; the consumer's asset depends on the source.
    graph = build_definitions(p).resolve_asset_graph()
    assert dg.AssetKey(["s", "positive"]) not in graph.get_all_asset_keys()
    assert graph.get(dg.AssetKey(["s", "rolling"])).parent_keys == {dg.AssetKey(["raw", "events"])}

    def expected(hours: int, start, end):
        events = [(utc(2024, 1, 1) + timedelta(hours=h), f"k{h % 3}", h % 7) for h in range(hours)]
        rows = []
        for ts, k, _ in events:
            if start <= ts < end:
                window = [v for t, kk, v in events if kk == k and ts - timedelta(days=1) < t <= ts and v > 0]
                if window:
                    rows.append((ts.replace(tzinfo=None), k, sum(window)))
        return rows

    ex = Executor(spark, p)
    for hours, window in (
        (48, (utc(2024, 1, 2), utc(2024, 1, 3))),
        (72, (utc(2024, 1, 3), utc(2024, 1, 4))),
        (96, (utc(2024, 1, 2), utc(2024, 1, 5))),
    ):
        write_events(root / "data" / "events", utc(2024, 1, 1), hours)
        for plan in plan_window(p, rolling, TimeWindow(*window)):
            ex.execute(plan)
        assert table_rows(table_uri(p, "s.rolling")) == sorted(expected(hours, utc(2024, 1, 2), window[1]))


class Boom(Exception):
    pass


def fail_before_commit(staging: str) -> None:
    staged = [f for f in map(str, __import__("pathlib").Path(staging).rglob("*")) if f.endswith(".parquet")]
    raise Boom(staging, staged)


@pytest.mark.parametrize("name", ["s.full", "s.seed", "s.mat"])
def test_a_run_failing_after_staging_leaves_the_previous_table_whole(spark, make_project, name):
    root = make_project(
        {
            "sources.yaml": EVENTS_SOURCE,
            "models/full.sql": "MODEL (name s.full, kind FULL); SELECT k, SUM(v) AS total FROM raw.events GROUP BY k",
            "models/seed.sql": "MODEL (name s.seed, kind SEED (path 'seeds/x.csv'));",
            "models/mat.sql": "MODEL (name s.mat, kind VIEW (materialized true)); SELECT k, COUNT(*) AS n FROM "
            "raw.events "
            "GROUP BY k",
        }
    )
    (root / "seeds").mkdir()
    (root / "seeds" / "x.csv").write_text("a,b\n1,x\n2,y\n")
    write_events(root / "data" / "events", utc(2024, 1, 1), 6)
    p = load_project(root)
    run_full(spark, p, name)
    before = table_rows(table_uri(p, name))
    version = DeltaTable(table_uri(p, name)).version()
    (root / "seeds" / "x.csv").write_text("a,b\n3,z\n")
    write_events(root / "data" / "events", utc(2024, 1, 1), 12)
    p = load_project(root)
    with pytest.raises(Boom) as err:
        run_full(spark, p, name, before_commit=fail_before_commit)
    staging, staged = err.value.args
    assert staged, "nothing was staged"
    assert not __import__("pathlib").Path(staging).exists(), "a failed run's staged files are deleted"
    assert DeltaTable(table_uri(p, name)).version() == version
    assert table_rows(table_uri(p, name)) == before
    run_full(spark, p, name)
    assert table_rows(table_uri(p, name)) != before


def test_declared_columns_are_the_table_s_columns_with_their_types(spark, make_project):
    """As SQLMesh writes a model whose columns are declared: those columns, in that order, cast to their types
    (a timestamp declared DATE is a date, a boolean declared TEXT is text, a decimal declared DOUBLE a double),
    in a FULL table and in each window of an incremental one."""
    root = make_project(
        {
            "models/typed.sql": """
            MODEL (name s.typed, kind FULL, columns (id BIGINT, amount DOUBLE, day DATE, flag TEXT));
            SELECT CAST(1.50 AS DECIMAL(10, 2)) AS amount, TIMESTAMP '2024-01-02 10:00:00' AS day, 7 AS id,
              TRUE AS flag, 'dropped' AS extra
            """,
            "models/daily.sql": """
            MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column day), start '2024-01-01',
              columns (day DATE, n INT));
            SELECT CAST(@start_ts AS TIMESTAMP) AS day, 3 AS n
            """,
        }
    )
    project = load_project(root)
    executor = Executor(spark, project)
    executor.execute(plan_run(project, project.model("s.typed"), None))
    for plan in plan_window(project, project.model("s.daily"), TimeWindow(utc(2024, 1, 1), utc(2024, 1, 3))):
        executor.execute(plan)
    typed = pa.schema(DeltaTable(table_uri(project, "s.typed")).schema().to_arrow())
    assert [(f.name, str(f.type)) for f in typed] == [
        ("id", "int64"),
        ("amount", "double"),
        ("day", "date32[day]"),
        ("flag", "string"),
    ]
    assert table_rows(table_uri(project, "s.typed")) == [(7, 1.5, utc(2024, 1, 2).date(), "true")]
    daily = pa.schema(DeltaTable(table_uri(project, "s.daily")).schema().to_arrow())
    assert [(f.name, str(f.type)) for f in daily][:2] == [("day", "date32[day]"), ("n", "int32")]
    assert table_rows(table_uri(project, "s.daily")) == [(utc(2024, 1, 1).date(), 3), (utc(2024, 1, 2).date(), 3)]


def test_select_star_with_qualify_keeps_the_columns_it_selects(spark, make_project):
    """Spark runs QUALIFY itself: the latest row per key, with its columns only (no window column added)."""
    root = make_project(
        {
            "models/pay.sql": "MODEL (name s.pay, kind FULL);\n"
            "SELECT * FROM VALUES (1, 10, 'a'), (1, 20, 'b'), (2, 5, 'c') AS t(account, paid, note)",
            "models/latest.sql": "MODEL (name s.latest, kind FULL, dialect duckdb);\n"
            "SELECT * FROM s.pay QUALIFY ROW_NUMBER() OVER (PARTITION BY account ORDER BY paid DESC) = 1",
        }
    )
    project = load_project(root)
    executor = Executor(spark, project)
    for name in ("s.pay", "s.latest"):
        executor.execute(plan_run(project, project.model(name), None))
    latest = pa.schema(DeltaTable(table_uri(project, "s.latest")).schema().to_arrow())
    assert [f.name for f in latest] == ["account", "paid", "note"]
    assert table_rows(table_uri(project, "s.latest")) == [(1, 20, "b"), (2, 5, "c")]
