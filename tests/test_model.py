"""Model files: SQLMesh headers load as they are; every mistake names the file, the line and the fix."""

import textwrap

import pytest
from sqlglot import exp

from incremental_assets.errors import ModelFileError, ProjectError
from incremental_assets.load.model_file import parse_model_file
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import utc
from incremental_assets.model.kinds import Full, IncrementalByTimeRange, View

FULL_HEADER = """\
MODEL (
  name sushi.orders,
  kind INCREMENTAL_BY_TIME_RANGE (
    time_column (ds, '%Y-%m-%d'),
    batch_size 7,
  ),
  start '2024-01-01',
  end '2025-01-01',
  cron '@daily',
  owner jen,
  tags [sales, core],
  grain [id, ds],
  description 'Orders by day',
  column_descriptions (id = 'The order id', ds = 'Order day'),
  columns (id INT, ds TEXT, amount DECIMAL(18, 2)),
  audits (not_null(columns := [id])),
  physical_properties (retention = 30),
  enabled true
);
-- the query
SELECT id, ds, amount
FROM raw.orders
WHERE ds BETWEEN @start_ds AND @end_ds
"""


def write(tmp_path, text, name="m.sql"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_full_sqlmesh_header_loads(tmp_path):
    m = parse_model_file(write(tmp_path, FULL_HEADER))
    assert m.name == "sushi.orders" and m.schema == "sushi"
    assert m.kind == IncrementalByTimeRange(time_column="ds", time_format="%Y-%m-%d", batch_size=7)
    assert (m.start, m.end, m.cron, m.interval_unit) == (
        utc(2024, 1, 1),
        utc(2025, 1, 2),
        "@daily",
        "day",
    )  # the end date is inclusive
    assert m.owner == "jen" and m.tags == ("sales", "core") and m.grains == ("id", "ds")
    assert m.column_descriptions == {"id": "The order id", "ds": "Order day"}
    assert m.columns == {"id": "INT", "ds": "STRING", "amount": "DECIMAL(18, 2)"}
    # Audits are typed; unknown properties are kept, not dropped:
    assert [(a.name, a.line, a.blocking) for a in m.audits] == [("not_null", 16, None)]
    assert m.metadata["physical_properties"] == "(retention = 30)"
    assert m.depends_on == ("raw.orders",)
    assert m.references[0].line == 22


def test_a_doubled_quote_in_a_header_string_is_one_quote_as_in_sqlmesh(tmp_path):
    m = parse_model_file(
        write(
            tmp_path,
            "MODEL (name a.b, kind FULL, description 'The site''s readings',\n"
            "  column_descriptions (id = 'the reading''s id', at = 'when ''it'' was read'));\nSELECT 1 AS id",
        )
    )
    assert m.description == "The site's readings"
    assert m.column_descriptions == {"id": "the reading's id", "at": "when 'it' was read"}


def test_kinds_full_and_view(tmp_path):
    assert isinstance(parse_model_file(write(tmp_path, "MODEL (name a.b, kind FULL); SELECT 1 AS x")).kind, Full)
    v = parse_model_file(write(tmp_path, "MODEL (name a.b, kind VIEW (materialized true)); SELECT 1 AS x"))
    assert v.kind == View(materialized=True)


def test_interval_unit_derived_from_cron(tmp_path):
    m = parse_model_file(
        write(
            tmp_path,
            """
        MODEL (name a.b, kind INCREMENTAL_BY_TIME_RANGE (time_column h), start '2024-01-01', cron '@hourly');
        SELECT h FROM c""",
        )
    )
    assert m.interval_unit == "hour"


def test_other_dialect_is_transpiled_to_spark(tmp_path):
    m = parse_model_file(
        write(
            tmp_path,
            """
        MODEL (name a.b, kind FULL, dialect duckdb);
        SELECT epoch_ms(ts) AS ms, list_value(1, 2) AS l, x::VARCHAR AS s FROM raw.t WHERE ts >= @start_dt""",
        )
    )
    sql = m.query.sql("spark")
    assert "CAST(x AS STRING)" in sql and "ARRAY(1, 2)" in sql
    assert m.query.find(exp.Parameter).name == "start_dt"


def test_fingerprint_ignores_formatting_and_metadata_but_not_logic(tmp_path):
    a = parse_model_file(write(tmp_path, "MODEL (name a.b, kind FULL, owner x); SELECT  a , b FROM t -- c", "a.sql"))
    b = parse_model_file(
        write(tmp_path, "MODEL (name a.b, kind FULL, owner y, description 'd');\nselect a, b\nfrom t", "b.sql")
    )
    c = parse_model_file(write(tmp_path, "MODEL (name a.b, kind FULL); SELECT a, b + 1 AS b FROM t", "c.sql"))
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint != c.fingerprint
    assert len(a.fingerprint) == 64


@pytest.mark.parametrize(
    "text, line, message, hint",
    [
        ("SELECT 1", 1, "does not start with a MODEL", "begin the file with MODEL"),
        ("MODEL (\n  name a.b,\n  kind FULL\n SELECT 1", 1, "not closed", "balance the parentheses"),
        ("MODEL (\n  name a.b\n  kind FULL\n);\nSELECT 1", 3, "expected ',' or ')'", "separate properties with commas"),
        ("MODEL (\n  name a.b,\n  kind FULL\n)\nSELECT 1", 4, "must end with ';'", "add ';'"),
        (
            "MODEL (\n  name a.b,\n  kind INCREMENTAL_BY_KEY (x y)\n);\nSELECT 1",
            3,
            "unknown kind",
            "use one of EMBEDDED, FULL",
        ),
        (
            "MODEL (\n  name a.b,\n  kind INCREMENTAL_BY_TIME_RANGE (batch_size 2),\n  start "
            "'2024-01-01'\n);\nSELECT 1 AS x",
            3,
            "needs a time_column",
            "add `time_column <column>`",
        ),
        (
            "MODEL (\n  name a.b,\n  kind INCREMENTAL_BY_TIME_RANGE (time_column ds),\n  start "
            "'2024-01-01'\n);\nSELECT 1 AS x",
            3,
            "time_column 'ds' is not an output column",
            "select the time column",
        ),
        (
            "MODEL (\n  name a.b,\n  kind INCREMENTAL_BY_TIME_RANGE (time_column ds),\n  start "
            "'2024-01-03',\n  interval_unit week\n);\nSELECT ds FROM t",
            4,
            "not on a week boundary",
            "use 2023-12-31",
        ),
        (
            "MODEL (\n  name a.b,\n  kind FULL,\n  interval_unit fortnight\n);\nSELECT 1",
            4,
            "unknown interval_unit",
            "use one of hour",
        ),
        (
            "MODEL (\n  name a.b,\n  kind FULL\n);\nSELECT 1\nFROM t WHERE",
            6,
            "cannot parse the query",
            "fix the SQL syntax",
        ),
        ("MODEL (\n  name a.b,\n  kind FULL\n);\nSELECT @nope AS x", 5, "unknown macro @nope", "use one of"),
        ("MODEL (\n  name a.b,\n  kind FULL\n);\nSELECT 1;\nSELECT 2", 6, "2 queries", "own model files"),
        ("MODEL (\n  kind FULL\n);\nSELECT 1", 1, "has no name", "add `name schema.table`"),
        ("MODEL (\n  name a.b,\n  name c.d,\n  kind FULL\n);\nSELECT 1", 3, "given twice", None),
    ],
)
def test_header_and_query_errors_name_file_line_and_fix(tmp_path, text, line, message, hint):
    path = write(tmp_path, text)
    with pytest.raises(ModelFileError) as err:
        parse_model_file(path)
    e = err.value
    assert e.path == str(path)
    assert e.line == line, e.render()
    assert message in e.message, e.render()
    if hint:
        assert hint in (e.hint or ""), e.render()
    assert e.render().startswith(f"{path}:{line}: ")


def project_errors(make_project, files):
    root = make_project(files)
    with pytest.raises(ProjectError) as err:
        load_project(root)
    return root, err.value.errors


def test_duplicate_model_names(make_project):
    root, errors = project_errors(
        make_project,
        {
            "models/a.sql": "MODEL (name s.x, kind FULL); SELECT 1 AS a",
            "models/sub/b.sql": "MODEL (\n  name s.x,\n  kind FULL\n); SELECT 2 AS a",
        },
    )
    (e,) = errors
    assert e.path.endswith("models/sub/b.sql") and e.line == 2
    assert "also defined in" in e.message and "a.sql:1" in e.message and "unique name" in e.hint


def test_an_inline_audit_defined_twice_is_refused_unless_the_same(make_project):
    def model(name, limit):
        audit = f"AUDIT (name few);\nSELECT * FROM @this_model WHERE a > {limit};\n"
        return f"MODEL (name s.{name}, kind FULL, audits (few));\nSELECT 1 AS a;\n{audit}"

    root, errors = project_errors(make_project, {"models/a.sql": model("a", 1), "models/b.sql": model("b", 2)})
    (e,) = errors
    assert e.path.endswith("models/b.sql") and "audit few is also defined in" in e.message and "a.sql" in e.message
    same = make_project({"models/a.sql": model("a", 1), "models/b.sql": model("b", 1)})
    assert [a.name for a in load_project(same).model("s.b").audits] == ["few"]


def test_unknown_table_reference(make_project):
    root, errors = project_errors(
        make_project,
        {
            "models/a.sql": "MODEL (name s.x, kind FULL);\nSELECT a\nFROM s.y\nJOIN raw.nope ON TRUE",
            "models/b.sql": "MODEL (name s.y, kind FULL); SELECT 1 AS a",
        },
    )
    (e,) = errors
    assert e.path.endswith("a.sql") and e.line == 4
    assert "unknown table 'raw.nope' in model s.x" in e.message and "sources.yaml" in e.hint


def test_dependency_cycle(make_project):
    root, errors = project_errors(
        make_project,
        {
            "models/a.sql": "MODEL (name s.a, kind FULL);\nSELECT x FROM s.b",
            "models/b.sql": "MODEL (name s.b, kind FULL);\nSELECT x FROM s.c",
            "models/c.sql": "MODEL (name s.c, kind FULL);\nSELECT x FROM s.a",
        },
    )
    (e,) = errors
    assert "dependency cycle: s.a -> s.b -> s.c -> s.a" in e.message
    assert e.line == 2 and "break the cycle" in e.hint


def test_all_file_errors_are_reported_together(make_project):
    root, errors = project_errors(
        make_project,
        {
            "models/a.sql": "MODEL (name s.a, kind NOPE); SELECT 1",
            "models/b.sql": "SELECT 1",
            "models/c.sql": "MODEL (name s.c, kind FULL); SELECT 1 AS x",
        },
    )
    assert sorted(e.path.rsplit("/", 1)[-1] for e in errors) == ["a.sql", "b.sql"]


def test_disabled_models_are_skipped(make_project):
    root = make_project({"models/a.sql": "MODEL (name s.a, kind FULL, enabled false); SELECT 1 AS x"})
    assert load_project(root).models == {}


def test_safety_overrides_in_physical_properties(tmp_path):
    header = (
        "MODEL (name a.b, kind INCREMENTAL_BY_TIME_RANGE (time_column ts, allow_limit true),\n  "
        "physical_properties ({}));\nSELECT ts FROM t"
    )
    m = parse_model_file(write(tmp_path, header.format("allow_distinct = true, allow_having = false, retention = 30")))
    assert m.kind.safety_overrides == {"allow_distinct", "allow_limit"}
    with pytest.raises(ModelFileError) as err:
        parse_model_file(write(tmp_path, header.format("allow_distinct = 'maybe'")))
    assert err.value.line == 2 and "allow_distinct must be true or false" in str(err.value)


@pytest.mark.parametrize("kind", ["INCREMENTAL_BY_PARTITION", "INCREMENTAL_UNMANAGED", "MANAGED"])
def test_a_kind_not_supported_is_refused_naming_its_line(tmp_path, kind):
    path = write(tmp_path, f"MODEL (\n  name a.b,\n  kind {kind}\n);\nSELECT 1 AS x")
    with pytest.raises(ModelFileError) as raised:
        parse_model_file(path)
    assert str(raised.value) == (
        f"{path}:3: kind {kind} is not supported yet (fix: use INCREMENTAL_BY_TIME_RANGE, FULL or VIEW)"
    )
