"""`diff MODEL --env NAME` and `promote NAME`, on real Spark, Delta and Dagster: an edited project built in
an environment, compared with production, then taken by production without recomputing anything."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import datetime, timezone

import pytest
from deltalake import DeltaTable

from incremental_assets import cli, delta
from incremental_assets.delta.environment import MANIFEST, env_root
from incremental_assets.load.project import load_project
from incremental_assets.orchestration.definitions import build_definitions
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.translator import ModelTranslator

from helpers import EVENTS_SOURCE, table_rows, utc, write_events

HOURLY = """
MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column hour), start '2024-01-01', cron '@hourly', grain (hour, k));
SELECT date_trunc('hour', ts) AS hour, k, {measure} AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt{filter} GROUP BY 1, 2
"""
TOTALS = """
MODEL (name s.totals, kind FULL, grain k);
SELECT k, SUM(n) AS n FROM s.hourly GROUP BY k
"""
# The edit: n ten times larger, a new column, and key k2 filtered out.
EDITED = HOURLY.format(measure="COUNT(*) * 10 AS n, MAX(v)", filter=" AND k <> 'k2'").replace("MAX(v) AS n", "MAX(v) AS top")
START, END = utc(2024, 1, 1), utc(2024, 1, 3)
MODELS = ("s.hourly", "s.totals")


def _run(root, models=MODELS, **kw):
    project = load_project(root)
    runner = Runner(project, open_instance(project.settings.dagster_home), build_definitions(project))
    report = runner.run([project.model(m) for m in models], start=kw.pop("start", START), end=kw.pop("end", END), **kw)
    assert report.success, [r.error for r in report.records]
    return report


def build_environment(root, name: str, monkeypatch, *, home) -> dict:
    """Environment ``name`` of the project as it is now: its tables under ``<warehouse>/__env/NAME`` and its
    manifest, as `run --auto --env NAME` leaves them, production's tables and Dagster records untouched.
    Returns the manifest."""
    warehouse = load_project(root).settings.warehouse
    before = {m: delta.version(delta.table_uri(warehouse, m)) for m in MODELS}
    production_home = os.environ["DAGSTER_HOME"]
    monkeypatch.setenv("INCREMENTAL_ASSETS_WAREHOUSE", env_root(warehouse, name))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    try:
        _run(root)
        project = load_project(root)
    finally:
        monkeypatch.delenv("INCREMENTAL_ASSETS_WAREHOUSE")
        monkeypatch.setenv("DAGSTER_HOME", production_home)
    models = {
        m: {"fingerprint": project.model(m).fingerprint, "category": "breaking", "production_version": before[m],
            "intervals": [[START.isoformat(), END.isoformat()]] if project.model(m).is_incremental else []}
        for m in MODELS
    }
    manifest = {"name": name, "updated": datetime.now(timezone.utc).isoformat(), "models": models, "reads": {}}
    path = os.path.join(env_root(warehouse, name), MANIFEST)
    with open(path + ".tmp", "w") as handle:
        json.dump(manifest, handle)
    os.replace(path + ".tmp", path)
    return manifest


@pytest.fixture
def edited(spark, make_project, tmp_path, monkeypatch):
    """Production built with the original project, then the project edited and built in environment dev."""
    root = make_project({"sources.yaml": EVENTS_SOURCE, "models/hourly.sql": HOURLY.format(measure="COUNT(*)", filter=""), "models/totals.sql": TOTALS})
    write_events(root / "data" / "events", START, 48)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    _run(root)
    (root / "models" / "hourly.sql").write_text(EDITED)
    began = time.perf_counter()
    build_environment(root, "dev", monkeypatch, home=tmp_path / "env_home")
    return root, time.perf_counter() - began


def _diff(root, *args) -> tuple[int, dict]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["diff", *args, "--json", "--project", str(root)])
    return code, json.loads(out.getvalue()) if out.getvalue().strip() else {}


def _uris(root, model):
    warehouse = load_project(root).settings.warehouse
    return delta.table_uri(warehouse, model), delta.table_uri(env_root(warehouse, "dev"), model)


def _state(uri):
    """What any reader of production sees: its version and file list."""
    return delta.version(uri), sorted(DeltaTable(uri).file_uris())


def _inodes(uri) -> set[int]:
    return {os.stat(f.removeprefix("file://")).st_ino for f in DeltaTable(uri).file_uris()}


def test_diff_then_promote_takes_the_environment_without_recomputing(edited, capsys):
    root, env_seconds = edited
    code, hourly = _diff(root, "s.hourly", "--env", "dev")
    assert code == 1 and not hourly["equal"]
    assert hourly["schema"] == {"added": [["top", "bigint"]], "removed": [], "changed": []}
    assert hourly["grain"] == ["hour", "k"]
    # Every hour held one event; the k2 hours (a third) are gone from the environment, the others have n = 10.
    assert {(c["interval"], c["production"], c["environment"]) for c in hourly["counts"][:3]} == {
        ("2024-01-01T00", 1, 1), ("2024-01-01T01", 1, 1), ("2024-01-01T02", 1, 0)}
    assert hourly["rows"] == {"only_production": 16, "only_environment": 0, "changed": 32}
    assert hourly["examples"]["only_production"][0] == {"hour": "2024-01-01T02:00:00", "k": "k2", "n": 1}
    assert hourly["examples"]["changed"][0] == {"key": {"hour": "2024-01-01T00:00:00", "k": "k0"}, "columns": {"n": {"production": 1, "environment": 10}}}
    assert len(hourly["examples"]["changed"]) == 5
    code, totals = _diff(root, "s.totals", "--env", "dev")
    assert code == 1 and totals["schema"] == {"added": [], "removed": [], "changed": []}
    assert totals["counts"] == [{"interval": None, "production": 3, "environment": 2}]
    assert totals["rows"] == {"only_production": 1, "only_environment": 0, "changed": 2}
    assert totals["examples"]["changed"][0] == {"key": {"k": "k0"}, "columns": {"n": {"production": 16, "environment": 160}}}
    # Bad input: one line, exit 2.
    for args, said in ((["s.nope", "--env", "dev"], "no model named 's.nope'"), (["s.hourly", "--env", "qa"], "no environment named qa")):
        assert cli.main(["diff", *args, "--project", str(root)]) == 2
        assert said in capsys.readouterr().err

    env_files = {m: _inodes(_uris(root, m)[1]) for m in MODELS}
    env_rows = {m: table_rows(_uris(root, m)[1]) for m in MODELS}
    before = {m: delta.version(_uris(root, m)[0]) for m in MODELS}
    began = time.perf_counter()
    assert cli.main(["promote", "dev", "--project", str(root)]) == 0
    promote_seconds = time.perf_counter() - began
    out = capsys.readouterr().out
    assert "nothing recomputed" in out and "Spark" not in out
    for m in MODELS:
        prod, env = _uris(root, m)
        # One new commit, the environment's very files (same inodes: no Spark job wrote them), its rows and schema.
        assert delta.version(prod) == before[m] + 1
        assert _inodes(prod) == env_files[m]
        assert table_rows(prod) == env_rows[m]
        assert delta.built_with(prod) == load_project(root).model(m).fingerprint
        assert delta.last_commit_metadata(prod)["promoted_from"] == "dev"
        assert delta.stored_definition(prod, delta.built_with(prod))["fingerprint"] == delta.built_with(prod)
        # The environment still works: its table reads as before.
        assert table_rows(env) == env_rows[m]
    assert _diff(root, "s.hourly", "--env", "dev")[0] == 0
    assert _diff(root, "s.totals", "--env", "dev")[0] == 0

    # Dagster follows: status shows every interval done with the new definition; plan and run --auto have nothing to do.
    assert cli.main(["status", "--json", "--project", str(root)]) == 0
    status = {s["model"]: s for s in json.loads(capsys.readouterr().out)}
    assert status["s.hourly"]["intervals_done"] == 48 and not status["s.hourly"]["changed"] and not status["s.hourly"]["stale"]
    assert not status["s.totals"]["changed"] and not status["s.totals"]["upstream_changed"]
    assert cli.main(["plan", "--json", "--project", str(root)]) == 0
    assert all(m["recompute"] == [] and m["category"] == "unchanged" for m in json.loads(capsys.readouterr().out)["models"])
    versions = {m: delta.version(_uris(root, m)[0]) for m in MODELS}
    report = _run(root, start=None, end=END, auto=True)
    assert [r for r in report.records if r.model == "s.hourly"] == []
    assert delta.version(_uris(root, "s.hourly")[0]) == versions["s.hourly"]

    # The same as recomputing the edited project from scratch (timed next to the promotion).
    began = time.perf_counter()
    os.environ["INCREMENTAL_ASSETS_WAREHOUSE"] = str(root / "recomputed")
    try:
        _run(root)
    finally:
        del os.environ["INCREMENTAL_ASSETS_WAREHOUSE"]
    recompute_seconds = time.perf_counter() - began
    for m in MODELS:
        assert table_rows(delta.table_uri(str(root / "recomputed"), m)) == table_rows(_uris(root, m)[0])
    print(f"\npromote: {promote_seconds:.2f}s; recompute of the same tables: {recompute_seconds:.2f}s (environment build {env_seconds:.2f}s)")


def _records(root, instance) -> dict[str, list[int]]:
    """The storage ids of every materialization Dagster holds of each model."""
    project, translator = load_project(root), ModelTranslator()
    return {m: [r.storage_id for r in instance.fetch_materializations(translator.get_asset_key(project.model(m)), limit=1000).records] for m in MODELS}


def test_promote_is_refused_when_production_moved_on(edited, capsys):
    root, _ = edited
    prod = _uris(root, "s.hourly")[0]
    # Production re-runs an interval with the project as it was (another deployment still on it).
    (root / "models" / "hourly.sql").write_text(HOURLY.format(measure="COUNT(*)", filter=""))
    _run(root, models=("s.hourly",), start=utc(2024, 1, 2), end=utc(2024, 1, 2, 1))
    (root / "models" / "hourly.sql").write_text(EDITED)
    untouched = {m: _state(_uris(root, m)[0]) for m in MODELS}
    instance = open_instance(load_project(root).settings.dagster_home)
    events = _records(root, instance)
    assert cli.main(["promote", "dev", "--project", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "s.hourly changed in production since environment dev was built" in err
    assert "run --auto --env dev" in err
    assert {m: _state(_uris(root, m)[0]) for m in MODELS} == untouched
    assert _records(root, instance) == events
    # The same when only a table the environment read in place moved on.
    path = os.path.join(env_root(load_project(root).settings.warehouse, "dev"), MANIFEST)
    manifest = json.loads(open(path).read())
    manifest["reads"] = {"s.hourly": delta.version(prod) - 1}
    del manifest["models"]["s.hourly"]
    open(path, "w").write(json.dumps(manifest))
    assert cli.main(["promote", "dev", "--project", str(root)]) == 2
    assert "s.hourly, which environment dev read in place, changed in production" in capsys.readouterr().err
    # A model the environment read in place was not built there: nothing to compare.
    assert cli.main(["diff", "s.hourly", "--env", "dev", "--project", str(root)]) == 2
    assert "environment dev did not build s.hourly: it reads production's table in place" in capsys.readouterr().err
    assert {m: _state(_uris(root, m)[0]) for m in MODELS} == untouched


def test_a_run_of_production_during_promote_waits_for_it(edited, monkeypatch):
    """A production run whose files are staged when promote takes the writer locks commits after it,
    on the promoted table; table and Dagster's records agree."""
    from incremental_assets.orchestration import promote as promotion_module
    from incremental_assets.spark import faults

    root, _ = edited
    prod = _uris(root, "s.hourly")[0]
    staged, release, promoting, go_on = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    checkpoint = faults.checkpoint

    def pause(stage):
        if stage == "staged" and threading.current_thread().name == "production run" and not staged.is_set():
            staged.set()
            release.wait(60)
        checkpoint(stage)

    monkeypatch.setattr(faults, "checkpoint", pause)
    real = promotion_module.promote_table

    def slow(*args, **kwargs):  # holding every writer lock
        promoting.set()
        go_on.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(promotion_module, "promote_table", slow)
    result = {}
    # The production run of the edited project: the table's definition changed, so it rebuilds s.hourly.
    runner = threading.Thread(target=lambda: result.setdefault("report", _run(root, models=("s.hourly",))), name="production run")
    runner.start()
    assert staged.wait(120)
    project = load_project(root)
    instance = open_instance(project.settings.dagster_home)
    promotion = promotion_module.prepare(project, instance, "dev")
    promoter = threading.Thread(target=lambda: result.setdefault("promoted", promotion_module.promote(project, instance, promotion)))
    promoter.start()
    assert promoting.wait(30)
    release.set()  # the run goes on to its commit, which waits for promote's lock
    time.sleep(1.0)
    go_on.set()
    promoter.join(60)
    runner.join(120)
    promoted = {p.model: p.version for p in result["promoted"]}
    assert result["report"].success
    log = delta.commits(prod)
    assert [c.run_id.startswith("promote-") for c in log[-2:]] == [True, False]  # serialized: promote, then the run
    assert log[-2].version == promoted["s.hourly"]
    # Consistent: the table is the edited definition's (the run rebuilt it so), and Dagster's latest record names it.
    assert table_rows(prod) == table_rows(_uris(root, "s.hourly")[1])
    key = ModelTranslator().get_asset_key(project.model("s.hourly"))
    latest = instance.get_latest_materialization_event(key).asset_materialization
    assert latest.metadata["fingerprint"].value == delta.built_with(prod) == project.model("s.hourly").fingerprint
