"""Edits are seen without a click: real `dagster dev` (webserver, daemon, code server), the automation
sensor on, a model file edited while it runs; headless Chromium looks at the asset page.

Needs Debian's chromium and the playwright package: scripts/ci-browser.sh installs both.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error

import dagster as dg
import pytest
from test_dagster import MODELS, SOURCES
from test_ui import ARTIFACTS, CHROMIUM, FLAGS, _ensure_browser, _free_port, _graphql, _wait_for_text

from incremental_assets.load.project import load_project
from incremental_assets.model.settings import CLOCK_ENV
from incremental_assets.orchestration.build_definitions import build_definitions
from incremental_assets.orchestration.instance import open_instance
from incremental_assets.orchestration.runner import Runner
from incremental_assets.orchestration.sensors import SENSOR_NAME

from conftest import REPO
from helpers import stop_session, utc, write_events

LOCATION = "incremental_assets.definitions"
CODE_VERSION = '{ assetNodeOrError(assetKey: {path: ["s", "hourly"]}) { ... on AssetNode { opVersion } } }'
TICKS = """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { ... on Sensor {
  sensorState { ticks(limit: 30) { status skipReason timestamp } } } } }"""


def _until(what: str, probe, timeout: float, log) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"{what} within {timeout:.0f}s:\n{log.read_text()[-4000:]}")


@pytest.mark.slow
def test_an_edited_model_reaches_the_ui_and_the_automation_without_a_click(make_project, tmp_path, monkeypatch, spark):
    _ensure_browser()
    from playwright.sync_api import sync_playwright

    root = make_project({"sources.yaml": SOURCES, **MODELS})
    write_events(root / "data" / "events", utc(2024, 1, 1), 48)
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    project = load_project(root)
    instance = open_instance(project.settings.dagster_home)
    now = utc(2024, 1, 3)
    assert Runner(project, instance, build_definitions(project)).run(project.ordered(), auto=True, now=now).success
    old = project.model("s.hourly").fingerprint

    port = _free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "INCREMENTAL_ASSETS_PROJECT": str(root),
        CLOCK_ENV: now.isoformat(),
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    started = subprocess.run(
        [sys.executable, "-m", "dagster", "sensor", "start", SENSOR_NAME, "-m", LOCATION],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
    log_path = tmp_path / "dagster-dev.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dagster", "dev", "-h", "127.0.0.1", "-p", str(port), "-m", LOCATION],
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:

        def code_version():  # the asset's code version, as the UI shows it (None while dagster dev starts)
            try:
                result = _graphql(port, CODE_VERSION)
            except urllib.error.HTTPError:
                raise
            except OSError:
                return None
            return result["data"]["assetNodeOrError"].get("opVersion")

        assert _until("dagster dev serving the project", code_version, 180, log_path) == old
        # A first tick with nothing to do.
        selector = {"repositoryLocationName": LOCATION, "repositoryName": "__repository__", "sensorName": SENSOR_NAME}

        def ticks():
            result = _graphql(port, TICKS, {"s": selector})["data"]["sensorOrError"]
            return (result.get("sensorState") or {}).get("ticks") or []

        _until(
            "a first sensor tick",
            lambda: any(t["skipReason"] == "every model is up to date" for t in ticks()),
            120,
            log_path,
        )

        hourly = root / "models" / "hourly.sql"
        hourly.write_text(hourly.read_text().replace("COUNT(*) AS n", "COUNT(*) * 2 AS n"))
        edited = time.monotonic()
        new = load_project(root).model("s.hourly").fingerprint

        # The UI shows the new code version, without "Reload definitions".
        _until("the new code version in the UI", lambda: code_version() == new, 90, log_path)
        seen_in_ui = time.monotonic() - edited

        # The automation launched the rebuild.
        def automation_runs(model: str, reason: str):
            runs = instance.get_run_records(
                filters=dg.RunsFilter(tags={"incremental_assets/launched_by": "automation"})
            )
            return [
                r.dagster_run
                for r in runs
                if dg.AssetKey(model.split(".")) in (r.dagster_run.asset_selection or ())
                and reason in r.dagster_run.tags.get("incremental_assets/reason", "")
            ]

        def rebuild():
            return automation_runs("s.hourly", "definition changed")

        run = _until("the rebuild launched", rebuild, 90, log_path)[0]
        launched = time.monotonic() - edited

        # The day that reads the hours is requested in the same tick, in a run that waits for the rebuild's
        # step (its JVM starting meanwhile).
        def follower():
            return automation_runs("s.daily", "after the run of s.hourly requested with it")

        day = _until("the day's run requested with the rebuild", follower, 60, log_path)[0]
        assert day.tags["incremental_assets/after_upstream_runs"] == "true"
        assert day.tags["incremental_assets/spark"] == "own-after-upstream"
        created = {
            r.dagster_run.run_id: r.create_timestamp
            for r in instance.get_run_records(filters=dg.RunsFilter(run_ids=[run.run_id, day.run_id]))
        }
        assert abs((created[day.run_id] - created[run.run_id]).total_seconds()) < 2  # one tick

        check = dg.AssetCheckKey(dg.AssetKey(["s", "hourly"]), "definition_current")
        evaluations = [
            r.event.dagster_event.event_specific_data
            for r in instance.event_log_storage.get_asset_check_execution_history(check, limit=1000)
            if r.event
        ]
        failed = [e for e in evaluations if isinstance(e, dg.AssetCheckEvaluation) and not e.passed]
        assert failed and failed[-1].metadata["category"].value == "breaking", evaluations
        # The asset's page: its definition_current check (the changed mark, reported failed above with the
        # plan's category; the rebuild may have passed it again since) and the new code version.
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.goto(f"http://127.0.0.1:{port}/assets/s/hourly?view=checks", wait_until="domcontentloaded")
            try:
                page.get_by_role("button", name="Skip").first.click(timeout=10_000)
            except Exception:
                pass
            try:
                _wait_for_text(page, "definition_current")
                page.get_by_text("definition_current").first.click(timeout=10_000)
                _wait_for_text(page, "The table was built with the model's current definition")
            finally:
                page.screenshot(path=str(ARTIFACTS / "ui-live-edit-check.png"), full_page=True)
            page.goto(f"http://127.0.0.1:{port}/assets/s/hourly?view=overview", wait_until="domcontentloaded")
            try:
                _wait_for_text(page, new[:12])
            finally:
                page.screenshot(path=str(ARTIFACTS / "ui-live-edit-definition.png"), full_page=True)
            browser.close()
        print(f"edit seen in the UI after {seen_in_ui:.1f}s, rebuild launched after {launched:.1f}s")
    finally:
        stop_session(proc)
