"""Scale of the project: load, analyse and build Dagster Definitions for N generated models.

Each measurement runs in a fresh subprocess (so imports and memory are counted honestly). The process's CPU
time is reported next to the wall time: on a shared machine it is the figure that other load disturbs least.
  python benchmarks/project_scale.py 100 1000 5000      # BENCH_REPS=3: each size three times, the median reported
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers import EVENTS_SOURCE  # noqa: E402  (the hourly raw.events Delta source the tests and benchmarks share)

SOURCES = (
    EVENTS_SOURCE
    + """\
- name: raw.users
  location: data/users.parquet
  format: parquet
"""
)

SHAPES = [
    # (kind header, query) ; {up} is an upstream model or source
    (
        "INCREMENTAL_BY_TIME_RANGE (time_column ds)",
        "SELECT CAST(ts AS DATE) AS ds, k, COUNT(*) AS n FROM raw.events WHERE ts BETWEEN @start_dt AND "
        "@end_dt GROUP BY CAST(ts AS DATE), k",
    ),
    (
        "INCREMENTAL_BY_TIME_RANGE (time_column ds)",
        "SELECT u.ds, u.k, SUM(u.n) AS n FROM {up} AS u JOIN raw.users AS r ON r.k = u.k WHERE u.ds "
        "BETWEEN @start_ds AND @end_ds GROUP BY u.ds, u.k",
    ),
    (
        "INCREMENTAL_BY_TIME_RANGE (time_column ds)",
        "SELECT a.ds, a.k, COUNT(*) AS n FROM {up} AS a JOIN {up} AS b ON b.k = a.k AND b.ds BETWEEN a.ds "
        "- INTERVAL 7 DAYS AND a.ds "
        "WHERE a.ds BETWEEN @start_ds AND @end_ds GROUP BY a.ds, a.k",
    ),
    ("FULL", "SELECT k, SUM(n) AS n FROM {up} GROUP BY k"),
]


def generate(root: Path, n: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    (root / "models").mkdir(parents=True)
    (root / "sources.yaml").write_text(SOURCES)
    incremental: list[str] = []
    for i in range(n):
        kind, query = SHAPES[0] if not incremental else rng.choice(SHAPES)
        up = rng.choice(incremental[-50:]) if incremental else "raw.events"
        name = f"m{i // 100:03d}.model_{i:05d}"
        text = (
            f"MODEL (name {name}, kind {kind}, start '2024-01-01', cron '@daily', owner 'team', tags "
            f"[bench]);\n{query.format(up=up)}\n"
        )
        (root / "models" / f"{i:05d}.sql").write_text(text)
        if kind.startswith("INCREMENTAL"):
            incremental.append(name)


MEASURE = textwrap.dedent(
    """
    import json, resource, sys, time
    t0 = time.perf_counter()
    from incremental_assets.load.project import load_project
    from incremental_assets.plan.analyses import analyses
    from incremental_assets.orchestration.build_definitions import build_definitions
    t1 = time.perf_counter()
    c1 = time.process_time()
    project = load_project(sys.argv[1])
    t2 = time.perf_counter()
    refused = sum(1 for a in analyses(project).values() if a.refused)
    t3 = time.perf_counter()
    defs = build_definitions(project)
    keys = defs.resolve_asset_graph().get_all_asset_keys()
    t4 = time.perf_counter()
    c4 = time.process_time()
    print(json.dumps({"load_cpu_s": c4 - c1, "models": len(project.models), "import_s": t1 - t0, "parse_s": t2 - t1,
                      "analyse_s": t3 - t2, "definitions_s": t4 - t3, "load_s": t4 - t1, "assets": len(keys),
                      "refused": refused, "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
    """
)


def measure(n: int) -> dict:
    """A first load of a new project (nothing cached), then a second one in another fresh process (the
    project's ``.cache`` holds what the first computed): the second is every later load of the project."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp), n)
        runs = [
            subprocess.run([sys.executable, "-c", MEASURE, tmp], capture_output=True, text=True, check=True).stdout
            for _ in range(2)
        ]
        first, again = (json.loads(out.strip().splitlines()[-1]) for out in runs)
        return {**first, "again": again}


def main(argv: list[str], reps: int = 1) -> list[dict]:
    """Each size ``reps`` times (a fresh process each); the run with the median load time is reported, with
    every repetition's load time next to it."""
    sizes = [int(a) for a in argv] or [100, 1000, 5000]
    results = []
    for n in sizes:
        runs = sorted((measure(n) for _ in range(reps)), key=lambda r: r["load_s"])
        r = {**runs[len(runs) // 2], "reps": reps, "load_s_all": [round(x["load_s"], 2) for x in runs]}
        results.append(r)
        for label, x in (("first load", r), ("again", r["again"])):
            print(
                f"{n:>6} models, {label}: parse {x['parse_s']:.2f}s, analyse {x['analyse_s']:.2f}s, "
                f"Definitions {x['definitions_s']:.2f}s, "
                f"load total {x['load_s']:.2f}s (CPU {x['load_cpu_s']:.2f}s), peak RSS "
                f"{x['max_rss_mb']:.0f} MB, refused {x['refused']}",
                flush=True,
            )
        print(
            f"{n:>6} models: first loads {', '.join(f'{x:.2f}' for x in r['load_s_all'])} (median reported)", flush=True
        )
    return results


if __name__ == "__main__":
    import os

    main(sys.argv[1:], reps=int(os.environ.get("BENCH_REPS", "1")))
