"""Environments: `run --auto --env dev` builds a change apart from production (real Spark, Delta and a Dagster
instance), reading unchanged upstream models from production in place; production stays byte for byte."""

from __future__ import annotations

import json
import os

import dagster as dg
import pytest

from incremental_assets import cli, delta
from incremental_assets.load.project import load_project
from incremental_assets.model.environment import env_root
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.orchestration.runner import Runner

from helpers import DAILY_KEYS_MODEL, DAILY_TOTALS_MODEL, EVENTS_SOURCE, table_rows, utc, write_events

CLEAN = """
MODEL (name s.clean, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
SELECT CAST(ts AS DATE) AS ds, k, v FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt
"""
DAILY = """
MODEL (name s.daily, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01');
SELECT ds, k, {measure} AS n FROM s.clean WHERE ds BETWEEN @start_ds AND @end_ds GROUP BY 1, 2
"""
TOTALS = DAILY_TOTALS_MODEL
KEYS = DAILY_KEYS_MODEL
MODELS = ("s.clean", "s.daily", "s.totals", "s.keys")


def files(measure: str) -> dict[str, str]:
    return {
        "sources.yaml": EVENTS_SOURCE,
        "models/clean.sql": CLEAN,
        "models/daily.sql": DAILY.format(measure=measure),
        "models/totals.sql": TOTALS,
        "models/keys.sql": KEYS,
    }


def build(root, home, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    write_events(root / "data" / "events", utc(2024, 1, 1), 24 * 3, per_hour=2)
    project = load_project(root)
    runner = Runner(project, open_instance(project.settings.dagster_home), build_definitions(project))
    assert runner.run(project.ordered(), start=utc(2024, 1, 1), end=utc(2024, 1, 4)).success
    return project


def production(project) -> dict:
    """Every production table's Delta version and files, and Dagster's materializations of production keys."""
    instance = dg.DagsterInstance.get()
    state = {}
    for name in MODELS:
        uri = delta.table_uri(project.settings.warehouse, name)
        key = dg.AssetKey(name.split("."))
        state[name] = (
            delta.version(uri),
            sorted(os.listdir(uri)),
            len(instance.fetch_materializations(key, limit=1000).records),
        )
    return state


def run(root, *args) -> int:
    return cli.main(["run", "--auto", "--env", "dev", "--project", str(root), *args])


@pytest.fixture(scope="module")
def projects(spark, tmp_path_factory):
    """Production built with COUNT(*), then edited to SUM(v); and the edited project built from scratch."""
    from incremental_assets.model.intervals import TimeWindow
    from incremental_assets.plan.run_plan import plan_window
    from incremental_assets.spark.executor import Executor

    from conftest import write_project

    base = tmp_path_factory.mktemp("envs")
    mp = pytest.MonkeyPatch()
    fresh = write_project(base / "fresh", files("SUM(v)"))
    write_events(fresh / "data" / "events", utc(2024, 1, 1), 24 * 3, per_hour=2)
    expected = load_project(fresh)
    for name in MODELS[:3]:  # the edited project computed from scratch on Spark, straight to Delta
        for plan in plan_window(expected, expected.models[name], TimeWindow(utc(2024, 1, 1), utc(2024, 1, 4))):
            Executor(spark, expected).execute(plan)
    root = write_project(base / "project", files("COUNT(*)"))
    build(root, base / "home", mp)
    (root / "models" / "daily.sql").write_text(DAILY.format(measure="SUM(v)"))
    mp.undo()
    return root, base / "home", expected


def test_an_environment_builds_the_change_apart_and_reads_the_rest_in_place(projects, monkeypatch, capsys):
    root, home, expected = projects
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    project = load_project(root)
    before = production(project)

    assert run(root) == 0
    out = capsys.readouterr().out
    assert "environment dev: 2 model(s) built apart (s.daily, s.totals); 2 read from production in place" in out
    assert production(project) == before  # no production table, Delta version, file or Dagster record changed

    warehouse = project.settings.warehouse
    root_dir = env_root(warehouse, "dev")
    assert sorted(os.listdir(os.path.join(root_dir, "s"))) == ["daily", "totals"]  # nothing copied of s.clean or s.keys
    for name in ("s.daily", "s.totals"):  # equal to a full recompute of the edited project
        assert table_rows(f"{root_dir}/{name.replace('.', '/')}") == table_rows(
            delta.table_uri(expected.settings.warehouse, name)
        )
    assert table_rows(f"{root_dir}/s/daily") != table_rows(delta.table_uri(warehouse, "s.daily"))

    manifest = json.loads(open(os.path.join(root_dir, "environment.json")).read())
    assert set(manifest["models"]) == {"s.daily", "s.totals"}
    assert manifest["models"]["s.daily"]["category"] == "breaking"
    assert manifest["models"]["s.totals"]["category"] == "indirect-breaking"
    assert manifest["models"]["s.daily"]["intervals"] == [["2024-01-01", "2024-01-04"]]
    assert manifest["models"]["s.daily"]["production_version"] == delta.version(delta.table_uri(warehouse, "s.daily"))
    assert manifest["reads"] == {"s.clean": delta.version(delta.table_uri(warehouse, "s.clean"))}

    env_keys = {tuple(k.path) for k in dg.DagsterInstance.get().get_asset_keys(prefix=["env", "dev"])}
    assert env_keys == {("env", "dev", "s", "daily"), ("env", "dev", "s", "totals")}

    # Again with no edit: nothing runs, the manifest is not rewritten.
    assert run(root) == 0
    assert "0 model(s) built now, 2 already current; 0 run(s) succeeded" in capsys.readouterr().out
    assert json.loads(open(os.path.join(root_dir, "environment.json")).read()) == manifest

    # The plan says the environment holds both with the current definition.
    assert cli.main(["plan", "--json", "--env", "dev", "--project", str(root)]) == 0
    plan = {m["name"]: m for m in json.loads(capsys.readouterr().out)["models"]}
    assert plan["s.daily"]["environment"] == {"builds": True, "built": True}
    assert plan["s.keys"]["environment"] == {"builds": False, "built": False}

    # A further edit rebuilds what changed since (s.daily, and s.totals which reads it), in one commit each.
    (root / "models" / "daily.sql").write_text(DAILY.format(measure="MAX(v)"))
    assert cli.main(["plan", "--json", "--env", "dev", "--project", str(root)]) == 0
    assert json.loads(capsys.readouterr().out)["models"][1]["environment"] == {"builds": True, "built": False}
    assert run(root) == 0
    out = capsys.readouterr().out
    assert "2 model(s) built now" in out and "rebuilt from start, one commit" in out
    assert production(project) == before
    totals = {r[0]: r[1] for r in table_rows(f"{root_dir}/s/totals")}
    assert set(totals.values()) == {18}  # MAX(v) per key (6) summed over three keys, each day


def test_environment_definitions_list_and_drop(projects, monkeypatch, capsys):
    root, home, _ = projects
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    project = load_project(root)
    if not os.path.exists(env_root(project.settings.warehouse, "dev")):
        assert run(root) == 0

    defs = build_definitions(project, environment="dev")
    graph = defs.resolve_asset_graph()
    daily = graph.get(dg.AssetKey(["env", "dev", "s", "daily"]))
    assert {tuple(k.path) for k in daily.parent_keys} == {("s", "clean")}  # read from production in place
    totals = graph.get(dg.AssetKey(["env", "dev", "s", "totals"]))
    assert {tuple(k.path) for k in totals.parent_keys} == {("env", "dev", "s", "daily")}
    assert daily.partitions_def is not None
    assert dg.AssetKey(["s", "daily"]) in build_definitions(project).resolve_asset_graph().get_all_asset_keys()

    capsys.readouterr()
    assert cli.main(["env", "list", "--project", str(root)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dev: 2 model(s), updated 20") and "built:   s.daily, s.totals" in out

    for bad in ("Dev", "prod", "1x"):
        assert cli.main(["env", "drop", bad, "--project", str(root)]) == 2
        assert "must match [a-z][a-z0-9_]*" in capsys.readouterr().err

    before = production(project)
    assert cli.main(["env", "drop", "dev", "--project", str(root)]) == 0
    assert "environment dev dropped" in capsys.readouterr().out
    assert not os.path.exists(env_root(project.settings.warehouse, "dev"))
    assert production(project) == before
    assert not dg.DagsterInstance.get().get_asset_keys(prefix=["env", "dev"])
    assert cli.main(["env", "list", "--project", str(root)]) == 0
    assert "no environments" in capsys.readouterr().out
    assert cli.main(["run", "--auto", "--env", "Prod", "--project", str(root)]) == 2

    # A selection builds only what it names, and refuses to read a changed model the environment lacks.
    assert run(root, "s.totals") == 2
    assert "s.totals reads s.daily, changed and not built in environment dev yet" in capsys.readouterr().err
    assert run(root, "s.daily", "--end", "2024-01-02") == 0
    manifest = json.loads(open(os.path.join(env_root(project.settings.warehouse, "dev"), "environment.json")).read())
    assert {m: v["intervals"] for m, v in manifest["models"].items()} == {"s.daily": [["2024-01-01", "2024-01-02"]]}
    assert production(project) == before


def test_drop_keeps_files_a_production_table_references(tmp_path):
    """A promotion may take an environment's files into production: a drop leaves those in place."""
    from incremental_assets.delta.environment import drop_environment

    warehouse = str(tmp_path)
    env_table = tmp_path / "__env" / "dev" / "s" / "t"
    env_table.mkdir(parents=True)
    (env_table / "part-taken.parquet").write_bytes(b"x")
    (env_table / "part-own.parquet").write_bytes(b"y")
    log = tmp_path / "s" / "t" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text(
        json.dumps({"add": {"path": str(env_table / "part-taken.parquet")}}) + "\n"
    )
    dropped = drop_environment(warehouse, "dev")
    assert dropped.removed == 1 and [os.path.basename(p) for p in dropped.kept] == ["part-taken.parquet"]
    assert sorted(os.listdir(env_table)) == ["part-taken.parquet"]


def test_an_environment_with_nothing_to_build_says_so(spark, tmp_path, monkeypatch, capsys):
    """No edit, or an edit of metadata only (a description): nothing differs from production's tables, so the
    environment builds nothing and says so, exit 0."""
    from conftest import write_project

    root = write_project(tmp_path / "project", files("COUNT(*)"))
    build(root, tmp_path / "home", monkeypatch)
    capsys.readouterr()
    assert run(root) == 0
    out = capsys.readouterr().out
    assert "environment dev: 0 model(s) built apart" in out, out
    (root / "models" / "daily.sql").write_text(
        DAILY.format(measure="COUNT(*)").replace("start '2024-01-01'", "start '2024-01-01', description 'per key'")
    )
    assert run(root) == 0
    out = capsys.readouterr().out
    assert "environment dev: 0 model(s) built apart" in out, out
    # A model new in the environment: built there, and `diff` says production has none (exit 1, not a crash).
    (root / "models" / "extra.sql").write_text(KEYS.replace("s.keys", "s.extra"))
    assert run(root, "--end", "2024-01-04") == 0
    assert "environment dev: 1 model(s) built apart (s.extra)" in capsys.readouterr().out
    assert cli.main(["diff", "s.extra", "--env", "dev", "--project", str(root)]) == 1
    out = capsys.readouterr().out
    assert "s.extra: new in environment dev, production has no table yet; 9 rows in the environment" in out, out


def test_an_environment_builds_a_changed_kind_over_its_range_and_reads_a_changed_start_in_place(
    spark, tmp_path, monkeypatch, capsys
):
    """A FULL model made incremental is built from its start as a new model (its production table holds no
    intervals); a model whose start moved later changed only metadata (as in SQLMesh): it is not built, the
    environment reads production's table in place."""
    from conftest import write_project

    whole = "MODEL (name s.whole, kind {kind});\nSELECT ds, COUNT(*) AS n FROM s.clean{where} GROUP BY ds\n"
    root = write_project(
        tmp_path / "project", {**files("COUNT(*)"), "models/whole.sql": whole.format(kind="FULL", where="")}
    )
    build(root, tmp_path / "home", monkeypatch)
    (root / "models" / "whole.sql").write_text(
        whole.format(
            kind="INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01'",
            where=" WHERE ds BETWEEN @start_ds AND @end_ds",
        )
    )
    (root / "models" / "keys.sql").write_text(KEYS.replace("start '2024-01-01'", "start '2024-01-02'"))
    capsys.readouterr()
    assert run(root, "--end", "2024-01-04") == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out and "no complete interval" not in out, out
    assert "1 model(s) built apart (s.whole)" in out and "1 model(s) built now" in out, out
    project = load_project(root)
    manifest = json.loads(open(os.path.join(env_root(project.settings.warehouse, "dev"), "environment.json")).read())
    assert manifest["models"]["s.whole"]["intervals"] == [["2024-01-01", "2024-01-04"]]
    assert "s.keys" not in manifest["models"]
    assert not os.path.exists(f"{env_root(project.settings.warehouse, 'dev')}/s/keys")
