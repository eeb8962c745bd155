"""The example project: every incremental model gives the same table whether the year is run day by day,
in random chunks or as one window, and that table equals one full recompute of the query over all the data."""

from __future__ import annotations

import dataclasses
import random
import shutil
from datetime import date

import pytest

from incremental_assets import delta
from incremental_assets.demo import generate_demo_data
from incremental_assets.load.project import load_project
from incremental_assets.model.intervals import TimeWindow, batches, floor, next_boundary
from incremental_assets.plan.run_plan import plan_run
from incremental_assets.spark.executor import Executor

from conftest import REPO
from helpers import normalize, table_rows, utc

END = utc(2025, 1, 1)


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    root = tmp_path_factory.mktemp("example")
    shutil.copytree(REPO / "models", root / "models")
    shutil.copy(REPO / "sources.yaml", root / "sources.yaml")
    generate_demo_data(root, start=date(2024, 1, 1), days=366, orders_per_day=15)
    return load_project(root)


def chunks(model, mode: str, rng: random.Random) -> list[TimeWindow]:
    unit = model.interval_unit
    end = floor(END, unit)
    whole = TimeWindow(model.start, end)
    if mode == "one_window":
        return [whole]
    if mode == "day_by_day":
        # One run per interval (per day for an hourly model) over the last weeks, after one window for the
        # rest: every such run still reads committed history (lookbacks, self-references), in few runs.
        coarse = unit not in ("hour", "day")
        split = max(whole.start, floor(utc(2024, 10, 1) if coarse else utc(2024, 12, 17), unit))
        head = [TimeWindow(whole.start, split)] if split > whole.start else []
        step = unit if coarse else "day"
        return head + [TimeWindow(w.start, w.end) for w in batches(TimeWindow(split, end), step, 1)]
    # Random chunks of 1..60 intervals; an hourly model's only over the last month, after one window for the
    # rest (as day by day), so its runs stay a few dozen.
    parts, cursor = [], whole.start
    if unit == "hour":
        cursor = max(whole.start, floor(utc(2024, 12, 1), unit))
        parts = [TimeWindow(whole.start, cursor)] if cursor > whole.start else []
    while cursor < end:
        nxt = cursor
        for _ in range(rng.randint(1, 60)):
            nxt = next_boundary(nxt, unit)
            if nxt >= end:
                break
        parts.append(TimeWindow(cursor, min(nxt, end)))
        cursor = min(nxt, end)
    return parts


def build(spark, project, warehouse, mode) -> dict[str, list[tuple]]:
    project = dataclasses.replace(project, settings=dataclasses.replace(project.settings, warehouse=str(warehouse)))
    executor = Executor(spark, project)
    rng = random.Random(42)
    tables = {}
    for model in project.ordered():
        if model.is_incremental:
            for window in chunks(model, mode, rng):
                executor.execute(plan_run(project, model, window))
        else:
            executor.execute(plan_run(project, model, None))
        if model.kind.name != "VIEW":
            tables[model.name] = table_rows(delta.table_uri(str(warehouse), model.name))
    return tables


def recompute(spark, project) -> dict[str, list[tuple]]:
    """Each query once over all the data; upstream models are the recomputed results, not the tables."""
    executor = Executor(spark, project)
    results = {}
    for model in project.ordered():
        window = TimeWindow(model.start, floor(END, model.interval_unit)) if model.is_incremental else None
        plan = plan_run(project, model, window)
        for read in plan.inputs:
            if read.kind == "source":
                df, _ = executor.read_source(project.sources[read.name], read)
            else:
                df = results[read.name]
            df.createOrReplaceTempView(read.view)
        results[model.name] = spark.sql(plan.sql).cache()
    return {
        name: sorted(normalize(tuple(r)) for r in df.collect())
        for name, df in results.items()
        if project.models[name].kind.name != "VIEW"
    }


@pytest.mark.slow
def test_every_split_gives_the_full_recompute(spark, example, tmp_path):
    expected = recompute(spark, example)
    incremental = [m.name for m in example.ordered() if m.is_incremental]
    assert len(incremental) >= 6 and all(expected[name] for name in incremental), "every model must produce rows"
    for mode in ("one_window", "day_by_day", "random_chunks"):
        got = build(spark, example, tmp_path / mode, mode)
        for name, rows in expected.items():
            assert got[name] == rows, f"{name} built {mode} differs from the full recompute"
