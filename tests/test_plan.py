"""`incremental-assets plan`: each change's category and what it would recompute, from the definition
kept with each table, against a small project built with real Spark and Delta; plan changes nothing."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from deltalake import DeltaTable

from incremental_assets import cli, delta
from incremental_assets.load.project import load_project
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.orchestration.runner import Runner

from helpers import DAILY_KEYS_MODEL, DAILY_TOTALS_MODEL, EVENTS_SOURCE, utc, write_events

DAILY = """
MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01', description '{description}');
SELECT CAST(ts AS DATE) AS ds, k, {measure} AS n{extra} FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt{filter}
  GROUP BY 1, 2
"""
# Reads s.daily's n: breaks when n changes.
TOTALS = DAILY_TOTALS_MODEL
# Reads s.daily's ds and k only.
KEYS = DAILY_KEYS_MODEL


def daily(measure="COUNT(*)", extra="", filter="", description="per day") -> str:
    return DAILY.format(measure=measure, extra=extra, filter=filter, description=description)


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory):
    """The project built for three days (one Spark build shared by the module's tests)."""
    from conftest import write_project

    base = tmp_path_factory.mktemp("plan")
    root = write_project(
        base / "project",
        {
            "sources.yaml": EVENTS_SOURCE,
            "models/daily.sql": daily(),
            "models/totals.sql": TOTALS,
            "models/keys.sql": KEYS,
        },
    )
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 3)
    os.environ["DAGSTER_HOME"] = str(base / "home")
    project = load_project(root)
    instance = open_instance(project.settings.dagster_home)
    runner = Runner(project, instance, build_definitions(project))
    assert runner.run(project.ordered(), start=utc(2024, 1, 1), end=utc(2024, 1, 4)).success
    return root, base / "home"


@pytest.fixture
def project(built, monkeypatch):
    root, home = built
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    files = {p: p.read_text() for p in (root / "models").glob("*.sql")}
    yield root
    for p in (root / "models").glob("*.sql"):
        p.unlink()
    for p, text in files.items():
        p.write_text(text)


def plan(root, capsys, *extra) -> dict[str, dict]:
    assert cli.main(["plan", "--json", "--project", str(root), *extra]) == 0
    return {m["name"]: m for m in json.loads(capsys.readouterr().out)["models"]}


def test_the_definition_is_kept_with_the_table_once(project):
    uri = delta.table_uri(load_project(project).settings.warehouse, "s.daily")
    files = os.listdir(os.path.join(uri, delta.definition.DEFINITION_DIR))
    assert files == [f"definition-{delta.built_with(uri)}.json"]
    stored = delta.stored_definition(uri, delta.built_with(uri))
    assert stored["columns"]["n"] == {"type": "bigint", "sql": "COUNT(*)", "reads": []}
    assert stored["columns"]["ds"]["reads"] == [["raw.events", "ts"]]
    assert ["raw.events", "ts"] in stored["filters"] and stored["metadata"]["description"] == "per day"


def test_an_added_column_is_non_breaking_and_its_downstream_recomputes_nothing(project, capsys):
    (project / "models" / "daily.sql").write_text(daily(extra=", MAX(v) AS top"))
    models = plan(project, capsys)
    assert models["s.daily"]["category"] == "non-breaking"
    assert models["s.daily"]["columns"] == {"added": ["top"]}
    # Its own table needs the column: its three built days, 9 rows (3 keys a day), from the Delta statistics.
    assert models["s.daily"]["recompute"] == [["2024-01-01", "2024-01-04"]]
    assert (models["s.daily"]["partitions"], models["s.daily"]["rows"]) == (3, 9)
    for name in ("s.totals", "s.keys"):
        assert (models[name]["category"], models[name]["recompute"]) == ("indirect-non-breaking", [])


def test_a_changed_column_breaks_only_the_models_reading_it(project, capsys):
    (project / "models" / "daily.sql").write_text(daily(measure="COUNT(*) * 10"))
    models = plan(project, capsys)
    assert models["s.daily"]["category"] == "breaking" and models["s.daily"]["columns"] == {"changed": ["n"]}
    assert "-  COUNT(*) AS n" in models["s.daily"]["diff"] and "+  COUNT(*) * 10 AS n" in models["s.daily"]["diff"]
    assert models["s.totals"]["category"] == "indirect-breaking"
    assert models["s.totals"]["recompute"] == [["2024-01-01", "2024-01-04"]] and models["s.totals"]["rows"] == 3
    assert (models["s.keys"]["category"], models["s.keys"]["recompute"]) == ("indirect-non-breaking", [])
    # Forward-only: nothing already built is recomputed, here or downstream.
    models = plan(project, capsys, "--forward-only")
    assert {n: (m["category"], m["recompute"]) for n, m in models.items()} == {
        "s.daily": ("forward-only", []),
        "s.totals": ("forward-only", []),
        "s.keys": ("indirect-non-breaking", []),
    }


def test_a_changed_filter_breaks_every_downstream_model(project, capsys):
    (project / "models" / "daily.sql").write_text(daily(filter=" AND v > 0"))
    models = plan(project, capsys)
    assert models["s.daily"]["category"] == "breaking" and models["s.daily"]["partitions"] == 3
    assert models["s.keys"]["category"] == "indirect-breaking" and models["s.keys"]["rows"] == 9


def test_description_only_is_metadata(project, capsys):
    (project / "models" / "daily.sql").write_text(daily(description="rows per day"))
    models = plan(project, capsys)
    assert (models["s.daily"]["category"], models["s.daily"]["recompute"]) == ("metadata", [])
    assert (models["s.totals"]["change"], models["s.totals"]["category"], models["s.totals"]["recompute"]) == (
        "indirectly modified",
        "metadata",
        [],
    )


def test_added_and_removed_models(project, capsys):
    (project / "models" / "keys.sql").unlink()
    (project / "models" / "fresh.sql").write_text("MODEL (name s.fresh, kind FULL); SELECT k FROM s.daily GROUP BY k")
    models = plan(project, capsys)
    assert (models["s.keys"]["change"], models["s.keys"]["recompute"]) == ("removed", [])
    assert (models["s.fresh"]["change"], models["s.fresh"]["category"]) == ("added", "breaking")
    assert models["s.daily"]["category"] == "unchanged"


def test_plan_changes_nothing(project, capsys):
    settings = load_project(project).settings
    instance = open_instance(settings.dagster_home)

    def snapshot():
        files = sorted(os.path.join(d, f) for d, _, fs in os.walk(settings.warehouse) for f in fs)
        versions = {
            n: DeltaTable(delta.table_uri(settings.warehouse, n)).version() for n in ("s.daily", "s.totals", "s.keys")
        }
        return files, versions, instance.get_runs_count()

    before = snapshot()
    (project / "models" / "daily.sql").write_text(daily(measure="COUNT(*) * 10"))
    plan(project, capsys)
    assert cli.main(["plan", "--project", str(project), "--env", "dev"]) == 0
    out = capsys.readouterr().out
    assert (
        "environment dev: the plan compares the project with production" in out and "s.daily: modified, breaking" in out
    )
    assert "in dev: not built with the current definition yet" in out
    assert "[2024-01-01, 2024-01-04): 3 partition(s), ~9 rows" in out
    assert snapshot() == before


def test_a_table_built_before_definitions_were_kept_is_treated_as_breaking(project, capsys, tmp_path):
    uri = delta.table_uri(load_project(project).settings.warehouse, "s.daily")
    folder = os.path.join(uri, delta.definition.DEFINITION_DIR)
    shutil.copytree(folder, tmp_path / "kept")
    shutil.rmtree(folder)
    try:
        (project / "models" / "daily.sql").write_text(daily(extra=", MAX(v) AS top"))
        models = plan(project, capsys)
        assert models["s.daily"]["category"] == "breaking"
        assert any("built before definitions were kept" in r for r in models["s.daily"]["reasons"])
        assert models["s.keys"]["category"] == "indirect-breaking"
    finally:
        shutil.copytree(tmp_path / "kept", folder)


def test_a_changed_start_is_metadata_as_in_sqlmesh(spark, tmp_path, monkeypatch, capsys):
    """As SQLMesh: a start is metadata. Moved earlier, the model and the models whose start follows it compute
    the intervals before the old start and recompute nothing built; moved later, nothing is recomputed and
    the rows built before the new start stay."""
    from conftest import write_project

    later = daily().replace("start '2024-01-01'", "start '2024-01-03'")
    totals = TOTALS.replace(", start '2024-01-01'", "")  # its start follows s.daily's
    root = write_project(
        tmp_path / "project", {"sources.yaml": EVENTS_SOURCE, "models/daily.sql": later, "models/totals.sql": totals}
    )
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 5, per_hour=2)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    warehouse = load_project(root).settings.warehouse
    daily_uri, totals_uri = (delta.table_uri(warehouse, name) for name in ("s.daily", "s.totals"))

    def run_auto() -> str:
        capsys.readouterr()
        assert cli.main(["run", "--auto", "--end", "2024-01-06", "--project", str(root)]) == 0
        return capsys.readouterr().out

    def days(uri: str) -> list[str]:
        return sorted({str(r["ds"]) for r in DeltaTable(uri).to_pyarrow_table().to_pylist()})

    def built_files(uri: str) -> set[str]:
        return {f for f in DeltaTable(uri).file_uris() if "2024-01-03" in f or "2024-01-04" in f}

    run_auto()
    assert days(daily_uri) == days(totals_uri) == ["2024-01-03", "2024-01-04", "2024-01-05"]
    kept = {uri: built_files(uri) for uri in (daily_uri, totals_uri)}
    assert all(kept.values())

    (root / "models" / "daily.sql").write_text(daily())  # start '2024-01-01'
    planned = plan(root, capsys)
    assert planned["s.daily"]["category"] == "metadata" and planned["s.daily"]["recompute"] == []
    assert planned["s.totals"]["category"] == "metadata" and planned["s.totals"]["recompute"] == []
    out = run_auto()
    assert "FAILED" not in out, out
    every_day = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05"]
    assert days(daily_uri) == days(totals_uri) == every_day
    assert {uri: built_files(uri) for uri in kept} == kept  # the days built before were not recomputed
    totals_rows = {str(r["ds"]): r["n"] for r in DeltaTable(totals_uri).to_pyarrow_table().to_pylist()}
    assert totals_rows == {day: 48 for day in every_day}  # two events an hour
    assert all(m["category"] == "unchanged" for m in plan(root, capsys).values())

    (root / "models" / "daily.sql").write_text(daily().replace("start '2024-01-01'", "start '2024-01-04'"))
    planned = plan(root, capsys)
    assert planned["s.daily"]["category"] == "metadata" and planned["s.daily"]["recompute"] == []
    versions = {uri: DeltaTable(uri).version() for uri in kept}
    run_auto()
    assert days(daily_uri) == days(totals_uri) == every_day  # the rows before the new start stay
    assert {uri: DeltaTable(uri).version() for uri in kept} == versions
    assert all(m["category"] == "unchanged" for m in plan(root, capsys).values())
    assert cli.main(["status", "--project", str(root)]) == 0
    status = capsys.readouterr().out
    assert "STALE" not in status and "CHANGED" not in status and "missing" not in status.lower(), status


FORWARD_MODELS = {
    "models/a.sql": """
MODEL (name s.a, kind INCREMENTAL_BY_TIME_RANGE (time_column ds, forward_only true), start '2024-01-01');
SELECT CAST(ts AS DATE) AS ds, k, {measure} AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1, 2
""",
    "models/b.sql": """
MODEL (name s.b, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
SELECT CAST(ts AS DATE) AS ds, k, {measure} AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt GROUP BY 1, 2
""",
    "models/c.sql": """
MODEL (name s.c, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
SELECT a.ds, a.k, a.n + b.n AS n FROM s.a AS a JOIN s.b AS b ON a.ds = b.ds AND a.k = b.k
WHERE a.ds BETWEEN @start_ds AND @end_ds AND b.ds BETWEEN @start_ds AND @end_ds
""",
    "models/v.sql": "MODEL (name s.v, kind VIEW);\nSELECT ds, k, n FROM s.a\n",
    "models/d.sql": """
MODEL (name s.d, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
SELECT ds, SUM(n) AS n FROM s.v WHERE ds BETWEEN @start_ds AND @end_ds GROUP BY ds
""",
}


def test_a_change_from_upstream_applies_forward_only_when_every_changed_upstream_does_as_in_sqlmesh(
    spark, tmp_path, monkeypatch, capsys
):
    """s.c reads s.a (forward-only) and s.b; s.d reads s.a through a view. With only s.a changed, both apply
    it forward; with s.b changed too (breaking), s.c recomputes its built intervals, reading s.a's kept rows
    and s.b's new ones, while s.d still applies s.a's change forward."""
    from conftest import write_project

    files = {path: text.replace("{measure}", "COUNT(*)") for path, text in FORWARD_MODELS.items()}
    root = write_project(tmp_path / "project", {"sources.yaml": EVENTS_SOURCE, **files})
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 2)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    assert cli.main(["run", "--auto", "--end", "2024-01-03", "--project", str(root)]) == 0
    capsys.readouterr()

    def categories() -> list[str]:
        planned = plan(root, capsys)
        return [planned[m]["category"] for m in ("s.a", "s.b", "s.c", "s.d")]

    (root / "models" / "a.sql").write_text(FORWARD_MODELS["models/a.sql"].replace("{measure}", "SUM(v)"))
    assert categories() == ["forward-only", "unchanged", "forward-only", "forward-only"]
    (root / "models" / "b.sql").write_text(FORWARD_MODELS["models/b.sql"].replace("{measure}", "SUM(v)"))
    assert categories() == ["forward-only", "breaking", "indirect-breaking", "forward-only"]
    planned = plan(root, capsys)
    assert planned["s.c"]["recompute"] == [["2024-01-01", "2024-01-03"]]
    capsys.readouterr()
    assert cli.main(["run", "--auto", "--end", "2024-01-03", "--project", str(root)]) == 0
    warehouse = load_project(root).settings.warehouse

    def rows(name: str) -> dict[tuple, int]:
        table = DeltaTable(delta.table_uri(warehouse, name)).to_pyarrow_table().to_pylist()
        return {(str(r["ds"]), r.get("k")): r["n"] for r in table}

    a, b, c = rows("s.a"), rows("s.b"), rows("s.c")
    assert set(a.values()) == {8}  # COUNT(*) as built: kept
    assert c == {key: a[key] + b[key] for key in a} and c != {key: 2 * a[key] for key in a}
    assert set(rows("s.d").values()) == {24}  # as built: s.a's change applies forward
