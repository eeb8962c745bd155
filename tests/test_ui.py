"""End to end in a real browser: `dagster dev` on a copy of the example project, headless Chromium.

Needs Debian's chromium and the playwright package: scripts/ci-browser.sh installs both.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import date
from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable

from incremental_assets import delta
from incremental_assets.demo import generate_demo_data
from incremental_assets.load.project import load_project
from incremental_assets.orchestration.instance import open_instance

from conftest import REPO

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = REPO / "tests" / "artifacts"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _ensure_browser() -> None:
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        subprocess.run(
            ["sh", str(REPO / "scripts" / "ci-browser.sh")],
            check=False,
            env={**os.environ, "PYTHON": sys.executable},
            timeout=600,
        )
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("chromium is missing in CI: scripts/ci-browser.sh could not install it")
        pytest.skip("chromium is not installed and scripts/ci-browser.sh could not install it")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _graphql(port: int, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


@contextlib.contextmanager
def _serve(root: Path, log_path: Path, **environ: str):
    """`dagster dev` on the project in ``root`` (its instance at the project's DAGSTER_HOME), on a free port;
    stopped by its PID, also when the caller fails."""
    project = load_project(root)
    home = project.settings.dagster_home
    open_instance(home)
    port = _free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "INCREMENTAL_ASSETS_PROJECT": str(root),
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        **environ,
    }
    log = open(log_path, "w")
    # `dagster dev` started in the background ignores SIGTERM: restore SIGINT and stop it with kill -INT.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dagster",
            "dev",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-m",
            "incremental_assets.definitions",
        ],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
                break
            except OSError:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                time.sleep(1)
        yield project, port
    finally:
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _shop(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    shutil.copytree(REPO / "models", root / "models")
    shutil.copy(REPO / "sources.yaml", root / "sources.yaml")
    generate_demo_data(root, start=date(2024, 1, 1), days=4, orders_per_day=20)
    # No maintenance schedule: on a 2-core machine one run at a time starts, and an hourly compaction falling in
    # the test's minutes would hold the backfill's runs in the queue.
    (root / "incremental_assets.yaml").write_text("maintenance: {compact: null, vacuum: null}\n")
    return root


@pytest.fixture
def dagster_dev(tmp_path):
    with _serve(_shop(tmp_path), tmp_path / "dagster-dev.log") as served:
        yield served


def _wait_for_text(page, *texts: str, timeout: float = 60_000) -> None:
    """Wait until the page's visible text contains every one of ``texts`` (graph nodes included)."""
    page.wait_for_function(
        "texts => texts.every(t => document.body.innerText.includes(t))", arg=list(texts), timeout=timeout
    )


BACKFILL = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}"""

BACKFILLS = "{ partitionBackfillsOrError { ... on PartitionBackfills { results { id status } } } }"


RUNS = "{ runsOrError { ... on Runs { results { runId status startTime endTime tags { key value } } } } }"


def _stalled(port: int, status: str | None, log_path: Path) -> str:
    """What a backfill that did not finish leaves to read: its status, the runs and the server's log tail."""
    runs = _graphql(port, RUNS)["data"]["runsOrError"]["results"]
    return f"backfill {status}; runs {json.dumps(runs)}\n{log_path.read_text()[-6000:]}"


def test_ui_shows_assets_and_launches_a_partition_range_backfill(dagster_dev, tmp_path):
    _ensure_browser()
    from playwright.sync_api import sync_playwright

    project, port = dagster_dev
    log_path = tmp_path / "dagster-dev.log"
    base = f"http://127.0.0.1:{port}"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(f"{base}/asset-groups", wait_until="domcontentloaded")
        _wait_for_text(page, "Global asset lineage")
        try:  # the first-visit newsletter prompt
            page.get_by_role("button", name="Skip").first.click(timeout=15_000)
        except Exception:
            pass
        # Expand the shop group in the lineage sidebar (its caret sits left of the name): its models are listed.
        box = page.get_by_text("shop", exact=True).first.bounding_box()
        page.mouse.click(box["x"] - 39, box["y"] + box["height"] / 2)
        try:
            _wait_for_text(page, "order_lines", "hourly_orders", "weekly_category_revenue")
        finally:
            page.screenshot(path=str(ARTIFACTS / "ui-asset-graph.png"))

        # The asset's partitions page: nothing materialized yet.
        page.goto(f"{base}/assets/shop/order_lines?view=partitions", wait_until="domcontentloaded")
        _wait_for_text(page, "Materialized (0)")

        # Launch a range backfill from the Materialize dialog.
        launched_from_ui = False
        try:
            page.get_by_role("button", name="Materialize").first.click(timeout=20_000)
            dialog = page.get_by_role("dialog")
            try:  # the dialog starts on the last 90 days; the range we want is older
                dialog.get_by_text("Show all partitions").click(timeout=5_000)
            except Exception:
                pass
            box = dialog.locator("input[type='text'], input:not([type]), textarea, [contenteditable='true']").first
            box.click(timeout=10_000)
            page.keyboard.press("Control+A")
            page.keyboard.type("[2024-01-01...2024-01-03]")
            page.keyboard.press("Enter")
            _wait_for_text(page, "3 partitions", timeout=15_000)
            page.screenshot(path=str(ARTIFACTS / "ui-launch-dialog.png"))
            dialog.get_by_role("button", name="Launch backfill").click(timeout=20_000)
            launched_from_ui = True
        except Exception as exc:  # the dialog's markup changes between Dagster releases
            page.screenshot(path=str(ARTIFACTS / "ui-launch-dialog.png"))
            print(f"launching from the dialog failed ({exc}); falling back to GraphQL launchPartitionBackfill")
        if not launched_from_ui:
            result = _graphql(
                port,
                BACKFILL,
                {
                    "params": {
                        "partitionNames": ["2024-01-01", "2024-01-02", "2024-01-03"],
                        "assetSelection": [{"path": ["shop", "order_lines"]}],
                        "fromFailure": False,
                    }
                },
            )
            assert result["data"]["launchPartitionBackfill"]["__typename"] == "LaunchBackfillSuccess", result

        # The daemon (started by dagster dev) runs the backfill; wait until it is done.
        deadline = time.time() + 240
        status = None
        while time.time() < deadline:
            results = _graphql(port, BACKFILLS)["data"]["partitionBackfillsOrError"]["results"]
            status = results[0]["status"] if results else None
            if status in ("COMPLETED", "COMPLETED_SUCCESS", "FAILED", "COMPLETED_FAILED", "CANCELED"):
                break
            time.sleep(3)
        assert status in ("COMPLETED", "COMPLETED_SUCCESS"), _stalled(port, status, log_path)

        page.goto(f"{base}/assets/shop/order_lines?view=partitions", wait_until="domcontentloaded")
        _wait_for_text(page, "Materialized (3)", "Failed (0)")
        page.screenshot(path=str(ARTIFACTS / "ui-after-backfill.png"), full_page=True)

        # One partition's page: its own row count (the Delta table's rows of that day), beside the run's facts.
        uri = delta.table_uri(project.settings.warehouse, "shop.order_lines")
        day_rows = delta.interval_row_counts(uri)["2024-01-02"]
        page.goto(f"{base}/assets/shop/order_lines?view=partitions&partition=2024-01-02", wait_until="domcontentloaded")
        try:
            _wait_for_text(page, "partition_row_count", str(day_rows), "run_window_start")
        finally:
            page.screenshot(path=str(ARTIFACTS / "ui-partition.png"), full_page=True)
        # The asset's overview: typed columns (the revenue column's decimal type), the table's name.
        page.goto(f"{base}/assets/shop/order_lines?view=overview", wait_until="domcontentloaded")
        try:
            _wait_for_text(page, "decimal(18,2)", "shop.order_lines")
        finally:
            page.screenshot(path=str(ARTIFACTS / "ui-overview.png"), full_page=True)
        browser.close()

    uri = delta.table_uri(project.settings.warehouse, "shop.order_lines")
    days = sorted({r["order_date"] for r in DeltaTable(uri).to_pyarrow_table(columns=["order_date"]).to_pylist()})
    assert [d.isoformat() for d in days] == ["2024-01-01", "2024-01-02", "2024-01-03"]
    instance = dg.DagsterInstance.from_config(str(project.settings.dagster_home))
    done = instance.get_materialized_partitions(dg.AssetKey(["shop", "order_lines"]))
    assert done == {"2024-01-01", "2024-01-02", "2024-01-03"}
    print("launched from the UI dialog" if launched_from_ui else "launched with GraphQL")


ASSET_NODES = "{ assetNodes { assetKey { path } groupName } }"


def test_ui_shows_an_environment_beside_production(spark, tmp_path, monkeypatch, capsys):
    """After `run --auto --env dev`, `dagster dev` with INCREMENTAL_ASSETS_ENVIRONMENTS=dev lists the
    environment's assets under env/dev/... in a group of their own, their partitions materialized, and
    production's assets as they were."""
    _ensure_browser()
    from playwright.sync_api import sync_playwright

    from incremental_assets import cli

    root = _shop(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(load_project(root).settings.dagster_home))
    assert (
        cli.main(["run", "shop.order_lines", "--start", "2024-01-01", "--end", "2024-01-04", "--project", str(root)])
        == 0
    )
    lines = root / "models" / "staging" / "order_lines.sql"
    lines.write_text(
        lines.read_text().replace("AND o.status <> 'cancelled'", "AND o.status <> 'cancelled' AND o.channel <> 'store'")
    )
    assert cli.main(["run", "--auto", "--env", "dev", "shop.order_lines", "--project", str(root)]) == 0
    capsys.readouterr()
    project = load_project(root)
    production_key = dg.AssetKey(["shop", "order_lines"])
    instance = open_instance(project.settings.dagster_home)
    before = (
        delta.version(delta.table_uri(project.settings.warehouse, "shop.order_lines")),
        [r.storage_id for r in instance.fetch_materializations(production_key, limit=100).records],
    )

    base_url = None
    with (
        _serve(root, tmp_path / "dagster-dev.log", INCREMENTAL_ASSETS_ENVIRONMENTS="dev") as (_, port),
        sync_playwright() as p,
    ):
        base_url = f"http://127.0.0.1:{port}"
        nodes = {
            tuple(n["assetKey"]["path"]): n["groupName"] for n in _graphql(port, ASSET_NODES)["data"]["assetNodes"]
        }
        assert nodes[("env", "dev", "shop", "order_lines")] == "env_dev"
        assert nodes[("shop", "order_lines")] == "shop"
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        try:
            # The catalog's folder of environment dev: its assets, apart from production's.
            page.goto(f"{base_url}/assets/env/dev/shop", wait_until="domcontentloaded")
            try:
                page.get_by_role("button", name="Skip").first.click(timeout=10_000)
            except Exception:
                pass
            _wait_for_text(page, "order_lines")
            page.screenshot(path=str(ARTIFACTS / "ui-environment-catalog.png"), full_page=True)
            # The environment's asset: its own partitions, the three days built in the environment.
            page.goto(f"{base_url}/assets/env/dev/shop/order_lines?view=partitions", wait_until="domcontentloaded")
            _wait_for_text(page, "Materialized (3)")
            page.screenshot(path=str(ARTIFACTS / "ui-environment-partitions.png"), full_page=True)
            # Production's asset: as it was.
            page.goto(f"{base_url}/assets/shop/order_lines?view=partitions", wait_until="domcontentloaded")
            _wait_for_text(page, "Materialized (3)")
            # The lineage lists the environment's group beside production's.
            page.goto(f"{base_url}/asset-groups", wait_until="domcontentloaded")
            _wait_for_text(page, "env_dev", "shop")
            page.screenshot(path=str(ARTIFACTS / "ui-environment-groups.png"))
        finally:
            browser.close()
    assert base_url is not None
    env_key = dg.AssetKey(["env", "dev", "shop", "order_lines"])
    assert instance.get_materialized_partitions(env_key) == {"2024-01-01", "2024-01-02", "2024-01-03"}
    assert (
        delta.version(delta.table_uri(project.settings.warehouse, "shop.order_lines")),
        [r.storage_id for r in instance.fetch_materializations(production_key, limit=100).records],
    ) == before
