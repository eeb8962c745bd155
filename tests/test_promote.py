"""`diff MODEL --env NAME` and `promote NAME`, on real Spark, Delta and Dagster: an edited project built in
an environment, compared with production, then taken by production without recomputing anything."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from deltalake import DeltaTable

from incremental_assets import cli, delta
from incremental_assets.delta.environment import read_manifest
from incremental_assets.load.project import load_project
from incremental_assets.model.environment import env_root
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.translator import ModelTranslator

from helpers import EVENTS_SOURCE, table_rows, utc, write_events

HOURLY = """
MODEL (name s.hourly, kind INCREMENTAL_BY_TIME_RANGE (time_column hour), start '2024-01-01', cron '@hourly',
  grain (hour, k));
SELECT date_trunc('hour', ts) AS hour, k, {measure} AS n FROM raw.events WHERE ts BETWEEN @start_dt AND @end_dt{filter}
  GROUP BY 1, 2
"""
TOTALS = """
MODEL (name s.totals, kind FULL, grain k);
SELECT k, SUM(n) AS n{extra} FROM s.hourly GROUP BY k
"""
SUMMARY = """
MODEL (name s.summary, kind FULL);
SELECT SUM(n) AS n FROM s.totals
"""
# The edit: n ten times larger, a new column, and key k2 filtered out.
EDITED = HOURLY.format(measure="COUNT(*) * 10 AS n, MAX(v)", filter=" AND k <> 'k2'").replace(
    "MAX(v) AS n", "MAX(v) AS top"
)
START, END = utc(2024, 1, 1), utc(2024, 1, 3)
MODELS = ("s.hourly", "s.totals", "s.summary")


def _run(root, models=MODELS, **kw):
    project = load_project(root)
    runner = Runner(project, open_instance(project.settings.dagster_home), build_definitions(project))
    report = runner.run([project.model(m) for m in models], start=kw.pop("start", START), end=kw.pop("end", END), **kw)
    assert report.success, [r.error for r in report.records]
    return report


def _env(root, capsys) -> str:
    """`run --auto --env dev`, as a user runs it; its output."""
    capsys.readouterr()
    assert cli.main(["run", "--auto", "--env", "dev", "--project", str(root)]) == 0
    return capsys.readouterr().out


def _manifest(root) -> dict:
    return read_manifest(load_project(root).settings.warehouse, "dev")


@pytest.fixture
def production(spark, make_project, tmp_path, monkeypatch):
    """Production built with the original project (48 hours of s.hourly, s.totals and s.summary)."""
    root = make_project(
        {
            "sources.yaml": EVENTS_SOURCE,
            "models/hourly.sql": HOURLY.format(measure="COUNT(*)", filter=""),
            "models/totals.sql": TOTALS.format(extra=""),
            "models/summary.sql": SUMMARY,
        }
    )
    write_events(root / "data" / "events", START, 48)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    _run(root)
    return root


@pytest.fixture
def edited(production, capsys):
    """s.hourly edited (breaking for every model below it), built in environment dev by `run --auto --env dev`."""
    (production / "models" / "hourly.sql").write_text(EDITED)
    began = time.perf_counter()
    _env(production, capsys)
    return production, time.perf_counter() - began


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
    # What `run --auto --env dev` recorded: the edited model and both models below it, built against production's
    # versions.
    manifest = _manifest(root)
    assert {m: e["category"] for m, e in manifest["models"].items()} == {
        "s.hourly": "breaking",
        "s.totals": "indirect-breaking",
        "s.summary": "indirect-breaking",
    }
    assert manifest["models"]["s.hourly"]["intervals"] == [["2024-01-01", "2024-01-03"]]
    assert manifest["reads"] == {}
    code, hourly = _diff(root, "s.hourly", "--env", "dev")
    assert code == 1 and not hourly["equal"]
    assert hourly["schema"] == {"added": [["top", "bigint"]], "removed": [], "changed": []}
    assert hourly["grain"] == ["hour", "k"]
    # Every hour held one event; the k2 hours (a third) are gone from the environment, the others have n = 10.
    assert {(c["interval"], c["production"], c["environment"]) for c in hourly["counts"][:3]} == {
        ("2024-01-01T00", 1, 1),
        ("2024-01-01T01", 1, 1),
        ("2024-01-01T02", 1, 0),
    }
    assert hourly["rows"] == {"only_production": 16, "only_environment": 0, "changed": 32}
    assert hourly["examples"]["only_production"][0] == {"hour": "2024-01-01T02:00:00", "k": "k2", "n": 1}
    assert hourly["examples"]["changed"][0] == {
        "key": {"hour": "2024-01-01T00:00:00", "k": "k0"},
        "columns": {"n": {"production": 1, "environment": 10}},
    }
    assert len(hourly["examples"]["changed"]) == 5
    code, totals = _diff(root, "s.totals", "--env", "dev")
    assert code == 1 and totals["schema"] == {"added": [], "removed": [], "changed": []}
    assert totals["counts"] == [{"interval": None, "production": 3, "environment": 2}]
    assert totals["rows"] == {"only_production": 1, "only_environment": 0, "changed": 2}
    assert totals["examples"]["changed"][0] == {
        "key": {"k": "k0"},
        "columns": {"n": {"production": 16, "environment": 160}},
    }
    # Bad input: one line, exit 2.
    for args, said in (
        (["s.nope", "--env", "dev"], "no model named 's.nope'"),
        (["s.hourly", "--env", "qa"], "no environment named qa"),
    ):
        assert cli.main(["diff", *args, "--project", str(root)]) == 2
        assert said in capsys.readouterr().err

    env_files = {m: _inodes(_uris(root, m)[1]) for m in MODELS}
    env_rows = {m: table_rows(_uris(root, m)[1]) for m in MODELS}
    before = {m: delta.version(_uris(root, m)[0]) for m in MODELS}
    began = time.perf_counter()
    assert cli.main(["promote", "dev", "--project", str(root)]) == 0
    promote_seconds = time.perf_counter() - began
    out = capsys.readouterr().out
    assert "promoted 3 table(s) of environment dev" in out and "nothing recomputed" in out
    for m in MODELS:
        prod, env = _uris(root, m)
        # One new commit, the environment's very files (same inodes: no Spark job wrote them), its rows and schema.
        assert delta.version(prod) == before[m] + 1
        assert _inodes(prod) == env_files[m]
        assert table_rows(prod) == env_rows[m]
        assert delta.built_with(prod) == load_project(root).model(m).fingerprint
        assert delta.last_commit_metadata(prod)["promoted_from"] == "dev"
        assert delta.stored_definition(prod, delta.built_with(prod))["fingerprint"] == delta.built_with(prod)
    assert _diff(root, "s.hourly", "--env", "dev")[0] == 0
    assert _diff(root, "s.totals", "--env", "dev")[0] == 0

    # Dagster follows: status shows every interval done with the new definition; plan and run --auto have nothing to do.
    assert cli.main(["status", "--json", "--project", str(root)]) == 0
    status = {s["model"]: s for s in json.loads(capsys.readouterr().out)}
    assert (
        status["s.hourly"]["intervals_done"] == 48
        and not status["s.hourly"]["changed"]
        and not status["s.hourly"]["stale"]
    )
    for m in ("s.totals", "s.summary"):
        assert not status[m]["changed"] and not status[m]["upstream_changed"] and not status[m]["stale"]
    assert cli.main(["plan", "--json", "--project", str(root)]) == 0
    assert all(
        m["recompute"] == [] and m["category"] == "unchanged" for m in json.loads(capsys.readouterr().out)["models"]
    )
    assert cli.main(["plan", "--json", "--env", "dev", "--project", str(root)]) == 0
    assert all(not m["environment"]["builds"] for m in json.loads(capsys.readouterr().out)["models"])
    versions = {m: delta.version(_uris(root, m)[0]) for m in MODELS}
    # run --auto recomputes nothing promoted: no interval, and no FULL model (nothing they read changed since).
    assert [r.model for r in _run(root, start=None, end=END, auto=True).records] == []
    assert {m: delta.version(_uris(root, m)[0]) for m in MODELS} == versions
    versions = {m: delta.version(_uris(root, m)[0]) for m in MODELS}

    # Dropping the environment leaves production's tables whole: their files are production's own names (hard links).
    assert cli.main(["env", "drop", "dev", "--project", str(root)]) == 0
    assert "environment dev dropped" in capsys.readouterr().out
    assert not os.path.exists(env_root(load_project(root).settings.warehouse, "dev"))
    for m in MODELS:
        prod = _uris(root, m)[0]
        assert delta.version(prod) == versions[m]
        assert all(os.path.exists(f.removeprefix("file://")) for f in DeltaTable(prod).file_uris())
    assert _inodes(_uris(root, "s.hourly")[0]) == env_files["s.hourly"]
    assert table_rows(_uris(root, "s.hourly")[0]) == env_rows["s.hourly"]
    print(
        f"\npromote: {promote_seconds:.2f}s; the environment's build (a recompute of the same tables): "
        f"{env_seconds:.2f}s"
    )


def _records(root, instance) -> dict[str, list[int]]:
    """The storage ids of every materialization Dagster holds of each model."""
    project, translator = load_project(root), ModelTranslator()
    return {
        m: [
            r.storage_id
            for r in instance.fetch_materializations(translator.get_asset_key(project.model(m)), limit=1000).records
        ]
        for m in MODELS
    }


def _refused(root, capsys, said: str) -> None:
    """promote refuses in one line naming the cause and `run --auto --env dev`; production and Dagster unchanged."""
    instance = open_instance(load_project(root).settings.dagster_home)
    untouched, events = {m: _state(_uris(root, m)[0]) for m in MODELS}, _records(root, instance)
    capsys.readouterr()
    assert cli.main(["promote", "dev", "--project", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err and "run --auto --env dev" in err, err
    assert {m: _state(_uris(root, m)[0]) for m in MODELS} == untouched
    assert _records(root, instance) == events


def test_promote_of_a_change_reading_its_upstream_in_place(production, capsys):
    """s.totals gains a column: the environment builds only it, reading s.hourly from production in place;
    s.summary reads none of its changed columns. Refused while production or the project moved on."""
    root = production
    (root / "models" / "totals.sql").write_text(TOTALS.format(extra=", COUNT(*) AS hours"))
    assert "1 model(s) built apart (s.totals); 2 read from production in place" in _env(root, capsys)
    hourly = _uris(root, "s.hourly")[0]
    manifest = _manifest(root)
    assert {m: e["category"] for m, e in manifest["models"].items()} == {"s.totals": "non-breaking"}
    assert manifest["reads"] == {"s.hourly": delta.version(hourly)}
    # A model read in place was not built there: nothing to compare.
    assert cli.main(["diff", "s.hourly", "--env", "dev", "--project", str(root)]) == 2
    assert "environment dev did not build s.hourly: it reads production's table in place" in capsys.readouterr().err

    # Production re-runs an hour of s.hourly: the environment's s.totals read an older version of it.
    _run(root, models=("s.hourly",), start=utc(2024, 1, 2), end=utc(2024, 1, 2, 1))
    _refused(root, capsys, "s.hourly, which environment dev read in place, changed in production since it was built")
    out = _env(root, capsys)  # builds s.totals again from production as it is now
    assert "1 model(s) built now" in out
    assert _manifest(root)["reads"] == {"s.hourly": delta.version(hourly)}

    # The project edited further: the environment is no longer the project.
    (root / "models" / "totals.sql").write_text(TOTALS.format(extra=", COUNT(*) AS hours, MAX(n) AS peak"))
    _refused(root, capsys, "s.totals: environment dev built it from another definition than the project's now")
    _env(root, capsys)
    summary = _state(_uris(root, "s.summary")[0])
    assert cli.main(["promote", "dev", "--project", str(root)]) == 0
    out = capsys.readouterr().out
    assert (
        "promoted 1 table(s)" in out
        and "unchanged downstream (they read none of the changed columns): s.summary" in out
    )
    assert "s.summary: reads none of the changed columns of s.totals: 1 interval(s) kept, nothing recomputed" in out
    assert table_rows(_uris(root, "s.totals")[0]) == table_rows(_uris(root, "s.totals")[1])
    assert _state(_uris(root, "s.summary")[0]) == summary  # kept as it is
    # Not stale either: the promotion confirmed it, as a rebuild in production would have.
    assert cli.main(["status", "s.summary", "--project", str(root)]) == 0
    assert "STALE" not in capsys.readouterr().out
    assert cli.main(["plan", "--json", "--project", str(root)]) == 0
    assert all(
        m["recompute"] == [] and m["category"] == "unchanged" for m in json.loads(capsys.readouterr().out)["models"]
    )
    assert "s.hourly" not in [r.model for r in _run(root, models=("s.hourly",), start=None, end=END, auto=True).records]


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
    runner = threading.Thread(
        target=lambda: result.setdefault("report", _run(root, models=("s.hourly",))), name="production run"
    )
    runner.start()
    assert staged.wait(120)
    project = load_project(root)
    instance = open_instance(project.settings.dagster_home)
    promotion = promotion_module.prepare(project, instance, "dev")
    promoter = threading.Thread(
        target=lambda: result.setdefault("promoted", promotion_module.promote(project, instance, promotion))
    )
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


def test_promoting_a_forward_only_change_keeps_production_s_intervals(
    spark, make_project, tmp_path, monkeypatch, capsys
):
    """As SQLMesh: a forward_only model's change applies to new intervals only. The environment builds it
    (to compare), but production keeps its table and takes only the definition; s.totals, changed only
    through it, keeps its table too."""
    forward = HOURLY.replace("(time_column hour)", "(time_column hour, forward_only true)")
    root = make_project(
        {
            "sources.yaml": EVENTS_SOURCE,
            "models/hourly.sql": forward.format(measure="COUNT(*)", filter=""),
            "models/totals.sql": TOTALS.format(extra=""),
        }
    )
    write_events(root / "data" / "events", START, 48)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    models = ("s.hourly", "s.totals")
    _run(root, models=models)
    (root / "models" / "hourly.sql").write_text(forward.format(measure="COUNT(*) * 10", filter=""))
    _env(root, capsys)
    assert {m: e["category"] for m, e in _manifest(root)["models"].items()} == {
        "s.hourly": "forward-only",
        "s.totals": "forward-only",
    }
    rows = {m: table_rows(_uris(root, m)[0]) for m in models}
    files = {m: _inodes(_uris(root, m)[0]) for m in models}
    assert table_rows(_uris(root, "s.hourly")[1]) != rows["s.hourly"]  # the environment holds the new rows
    totals_version = delta.version(_uris(root, "s.totals")[0])
    assert cli.main(["promote", "dev", "--project", str(root)]) == 0
    out = capsys.readouterr().out
    assert "s.hourly: forward-only change: production keeps its table (48 built interval(s) as they are)" in out
    assert "s.totals: changed only through a forward-only upstream: production keeps its table" in out
    assert "promoted 0 table(s)" in out and "production kept its tables" in out
    for m in models:
        assert table_rows(_uris(root, m)[0]) == rows[m] and _inodes(_uris(root, m)[0]) == files[m]
    hourly = _uris(root, "s.hourly")[0]
    assert delta.built_with(hourly) == load_project(root).model("s.hourly").fingerprint
    assert delta.version(_uris(root, "s.totals")[0]) == totals_version
    assert cli.main(["plan", "--json", "--project", str(root)]) == 0
    assert all(m["category"] == "unchanged" for m in json.loads(capsys.readouterr().out)["models"])
    # Nothing is recomputed afterwards; a new interval uses the new definition.
    assert [r.model for r in _run(root, models=models, start=None, end=END, auto=True).records] == []
