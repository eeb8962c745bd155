"""An old project's hourly cycle beside a day-one project's, in turn, in one process (same load, same JVM).

    .venv/bin/python benchmarks/year_side_by_side.py OLD_PROJECT NEXT_HOUR_INDEX PAIRS

OLD_PROJECT is a project of ``year.py`` kept at some simulated day (its next hour is NEXT_HOUR_INDEX hours
after 2025-01-01); a new project gets day one, then each pair runs one ``run --auto`` cycle of each. Prints
the medians (the first two pairs warm up) and their ratio.
"""

import json
import os
import statistics as st
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

import year  # noqa: E402  (the year benchmark's project, arrivals and in-process command)

CLOCK = year.PhaseClock()


def cycle(root: Path, index: int) -> dict[str, float]:
    year.append_rows(root / "data" / "events", year.arrivals(index))
    began = time.perf_counter()
    year.command(["run", "--auto", "--end", (year.START + (index + 1) * year.HOUR).isoformat(), "--project", str(root)])
    cost = CLOCK.take(time.perf_counter() - began)
    cost["bookkeeping"] = round(cost["total"] - cost["spark"], 4)
    return cost


def medians(costs: list[dict[str, float]], other: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per phase: the median of each side and their ratio (old over young)."""
    out = {}
    for phase in costs[0]:
        old, young = st.median(c[phase] for c in costs), st.median(c[phase] for c in other)
        out[phase] = {"old": round(old, 3), "young": round(young, 3), "ratio": round(old / young, 3) if young else None}
    return out


def main(old: Path, index: int, pairs: int) -> dict:
    CLOCK.install()
    young = Path(tempfile.mkdtemp(prefix="year-young-")) / "project"
    year.make_project(young)
    for i in range(24):
        year.append_rows(young / "data" / "events", year.arrivals(i))
    year.command(["run", "--auto", "--end", (year.START + 24 * year.HOUR).isoformat(), "--project", str(young)])
    olds, youngs = [], []
    for n in range(pairs):
        olds.append(cycle(old, index + n))
        youngs.append(cycle(young, 24 + n))
        print(f"pair {n}: old {olds[-1]['total']:.2f}s young {youngs[-1]['total']:.2f}s", flush=True)
    olds, youngs = olds[2:], youngs[2:]
    return {
        "old_day": index // 24,
        "pairs": len(olds),
        "phases": medians(olds, youngs),
        "median_pairwise_ratio": round(st.median(a["total"] / b["total"] for a, b in zip(olds, youngs)), 3),
        "median_pairwise_bookkeeping_ratio": round(
            st.median(a["bookkeeping"] / b["bookkeeping"] for a, b in zip(olds, youngs)), 3
        ),
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))), flush=True)
    os._exit(0)  # the local Spark's shutdown hooks add nothing to the figures
