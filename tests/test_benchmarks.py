"""The benchmark runner's pure parts: the generated large project loads whole, the peer model is ours minus audits."""

from __future__ import annotations

import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import peer  # noqa: E402
import project_scale  # noqa: E402

from incremental_assets.load.model_file import parse_model_file  # noqa: E402


def test_generated_project_loads_and_builds_definitions_in_a_fresh_process():
    [measured] = project_scale.main(["30"], reps=2)
    assert measured["reps"] == 2 and len(measured["load_s_all"]) == 2
    assert round(measured["load_s"], 2) in measured["load_s_all"]  # one of the runs, not a mean
    assert measured["models"] == 30
    assert measured["assets"] == 30 + 2  # every model plus the two sources
    assert measured["refused"] == 0
    assert measured["load_s"] > 0 and measured["max_rss_mb"] > 50


def test_peer_side_runs_the_example_model_without_its_audits(tmp_path):
    peer.our_model(tmp_path)
    ours = parse_model_file(tmp_path / "models" / "order_lines.sql")
    example = parse_model_file(REPO / "models" / "staging" / "order_lines.sql")
    assert example.audits and not ours.audits
    assert ours.fingerprint == example.fingerprint  # same query, kind and time layout: the same data


def test_sqlmesh_peer_project_declares_the_same_model_sources_and_spark_settings(tmp_path):
    import peer_sqlmesh
    import yaml

    data = tmp_path / "ours" / "data"
    (data / "raw").mkdir(parents=True)
    (data / "raw" / "items.csv").write_text("item_id,name,category,unit_price\n")
    project = peer_sqlmesh.sqlmesh_project(tmp_path, data, "r1")
    assert (
        project / "models" / "order_lines.sql"
    ).read_text() == peer.model_text()  # the same header and query, no audits
    config = yaml.safe_load((project / "config.yaml").read_text())
    gateway = config["gateways"][config["default_gateway"]]
    assert gateway["connection"]["type"] == "spark" and gateway["state_connection"]["type"] == "duckdb"
    spark = gateway["connection"]["config"]
    assert spark["spark.master"] == "local[2]" and spark["spark.sql.session.timeZone"] == "UTC"
    assert spark["spark.sql.warehouse.dir"] == str(tmp_path / "sqlmesh-warehouse-r1")
    declared = {
        m["name"]: {c: t.lower() for c, t in m["columns"].items()}
        for m in yaml.safe_load((project / "external_models.yaml").read_text())
    }
    sources = {s["name"]: s["columns"] for s in yaml.safe_load((REPO / "sources.yaml").read_text())}
    assert declared == {name: sources[name] for name in ("raw.orders", "raw.order_items", "raw.items")}
    links = tmp_path / "peer-data"
    assert (links / "orders").resolve() == (data / "raw" / "orders").resolve() and (
        links / "items" / "items.csv"
    ).exists()
    assert any(f"LOCATION '{links / 'orders'}'" in ddl for ddl in peer.source_ddl(links))


def test_sqlmesh_peer_on_our_server_points_its_gateway_at_it_with_a_schema_per_repetition(tmp_path, monkeypatch):
    import peer_sqlmesh
    import yaml

    data = tmp_path / "ours" / "data"
    (data / "raw").mkdir(parents=True)
    (data / "raw" / "items.csv").write_text("item_id,name,category,unit_price\n")
    monkeypatch.setattr(peer_sqlmesh, "ON_SERVER", True)  # BENCH_SQLMESH_SPARK=server, read at import
    monkeypatch.setattr(peer_sqlmesh, "REMOTE", ["sc://127.0.0.1:15002"])
    config = yaml.safe_load((peer_sqlmesh.sqlmesh_project(tmp_path, data, "r1") / "config.yaml").read_text())
    spark = config["gateways"][config["default_gateway"]]["connection"]["config"]
    assert spark == {
        "spark.remote": "sc://127.0.0.1:15002",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
    }  # no local master, driver or metastore: the server has them
    assert config["physical_schema_mapping"] == {"^shop$": "sqlmesh_r1"}


def test_sqlmesh_peer_backfills_with_the_first_plan_and_restates_the_last_day():
    from datetime import date

    import peer_sqlmesh

    backfill, day = peer_sqlmesh.commands(date(2024, 1, 1), date(2024, 1, 8))
    assert backfill == ["plan", "--auto-apply", "--no-prompts", "--execution-time", "2024-01-08"]
    assert day[day.index("--restate-model") + 1] == "shop.order_lines"
    assert day[day.index("--start") + 1] == day[day.index("--end") + 1] == "2024-01-07"  # SQLMesh's end is inclusive


def test_year_traces_delta_log_reads_per_table_and_plots_every_hourly_cycle(tmp_path):
    import year

    trace = tmp_path / "trace.txt"
    trace.write_text(
        '101 openat(AT_FDCWD, "/p/warehouse/s/hourly/_delta_log/00000000000000000007.json", O_RDONLY|O_CLOEXEC) = 9\n'
        '102 openat(AT_FDCWD, "/p/warehouse/s/hourly/_delta_log/00000000000000000007.json", O_RDONLY|O_CLOEXEC) = 9\n'
        '102 openat(AT_FDCWD, "/p/warehouse/s/hourly/_delta_log/_last_checkpoint", O_RDONLY) = -1 ENOENT '
        "(No such file or directory)\n"
        '103 openat(AT_FDCWD, "/p/data/events/_delta_log/00000000000000000001.json", O_RDONLY|O_CLOEXEC) = 4\n'
        '103 openat(AT_FDCWD, "/p/data/events/part-0.parquet", O_RDONLY|O_CLOEXEC) = 4\n'
    )
    assert year.delta_log_reads(trace) == {
        "data/events": {"opens": 1, "files": 1},
        "s/hourly": {"opens": 2, "files": 1},
    }
    # A late row every 10th cycle for the hour five back; every 13th hour empty.
    late = [i for i in range(40) if any(s < year.START + i * year.HOUR for s in year.arrivals(i))]
    assert late == [9, 19, 29, 39] and year.arrivals(7) == [] and len(year.arrivals(8)) == year.hour_rows(8) > 0
    cost = dict.fromkeys(("total", *year.PHASES), 1.0)
    cycles = [{"cycle": c, "phase": "first" if c < 30 else "last", "cost": cost} for c in (25, 26, 100, 101)]
    plot = tmp_path / "plot.svg"
    year.svg_plot(
        {"cycles": cycles, "what_ran": {"first_hourly_days": 1, "forward_days": 2, "last_hourly_days": 1}}, plot
    )
    assert plot.read_text().startswith("<svg") and plot.read_text().count('r="2"') == 4


def test_daemon_memory_reads_a_real_jvms_heap_and_live_objects_and_fits_a_trend(spark, tmp_path):
    import os

    import daemon_memory
    from growth import _descendants

    spark.sql("SELECT 1").collect()  # one SQL execution in Spark's status store
    jvm = max(_descendants(os.getpid()), key=daemon_memory.rss_kb)
    heap = daemon_memory.heap_info(jvm)
    assert 0 < heap["heap_used_mb"] <= heap["heap_committed_mb"] and heap["metaspace_committed_mb"] > 0
    assert daemon_memory.native_memory(jvm) == {}  # this JVM runs without native memory tracking
    live = daemon_memory.class_histogram(jvm)
    assert 0 < live["live_mb"] <= heap["heap_committed_mb"]
    assert live["watched"]["SQLExecutionUIData"] >= 1 and live["watched"]["JobDataWrapper"] >= 1
    assert live["largest"][0][2] >= live["largest"][-1][2] > 0
    rising = [(h, 100.0) for h in range(50)] + [(h, 100.0 + h - 49) for h in range(50, 100)]
    t = daemon_memory.trend(rising)
    assert (t["first"], t["last"], t["min"], t["max"]) == (100.0, 150.0, 100.0, 150.0)
    assert t["per_100h_first_half"] == 0 and t["per_100h_second_half"] == 100.0
    samples = [{"hour": h, "spark_mb": y, "code_servers": [1], "code_server_mb": 300.0} for h, y in rising]
    assert daemon_memory.summarise({"samples": samples})["code_server_mb_when_one"]["per_100h"] == 0
    daemon_memory.svg_plot({"samples": samples}, tmp_path / "plot.svg")
    assert (tmp_path / "plot.svg").read_text().count("<polyline") == 2  # only the series sampled
