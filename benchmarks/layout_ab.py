"""The bookkeeping scenario's `run MODEL --auto` (the project's batched event log) for two checkouts of
the code, interleaved on the same data: e.g. the table layout of a change against the main branch's.

    git worktree add /tmp/main-code main
    .venv/bin/python benchmarks/layout_ab.py /tmp/main-code . 90 2 > /tmp/layout-ab.json

Each checkout runs in a fresh process (PYTHONPATH = the checkout), a fresh Dagster home and warehouse each;
printed: seconds per checkout, model and repetition, the data files and partition columns of each table,
and per checkout the medians, hourly / daily, and the milliseconds per extra partition.
"""

import json
import statistics
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from deltalake import DeltaTable

main_repo, new_repo, days, reps = (
    Path(sys.argv[1]).resolve(),
    Path(sys.argv[2]).resolve(),
    int(sys.argv[3]),
    int(sys.argv[4]),
)
sys.path.insert(0, str(new_repo / "benchmarks"))
sys.path.insert(0, str(new_repo / "tests"))
import bookkeeping as bk  # noqa: E402  (found through the sys.path entry just above)
from peer import run  # noqa: E402  (found through the sys.path entry just above)

root = Path(tempfile.mkdtemp(prefix="hfab-"))
bk.write_project(root, days, 4)
end = (bk.START + timedelta(days=days)).date().isoformat()
codes = {"before": main_repo, "after": new_repo}  # the code measured against, the code measured
times = {c: {m: [] for m in bk.MODELS} for c in codes}
files = {}
for rep in range(reps):
    order = list(codes) if rep % 2 == 0 else list(codes)[::-1]
    for code in order:
        for model in bk.MODELS:
            home, wh = root / f"home-{code}-{model}-{rep}", root / f"wh-{code}-{model}-{rep}"
            bk.prepare_home(home, "after")
            env = bk.variant_env("after", home, wh)
            env["PYTHONPATH"] = str(codes[code])
            argv = bk.run_argv(model, end, root)
            s = run(argv, root, env)
            assert bk.recorded(home, model) == days * (24 if model == "hourly" else 1)
            t = DeltaTable(str(wh / "b" / model))
            files[f"{code} {model}"] = {
                "files": len(t.file_uris()),
                "partition_columns": t.metadata().partition_columns,
            }
            times[code][model].append(s)
            print(f"{code} {model} rep {rep}: {s:.2f}s  {files[f'{code} {model}']}", flush=True)
out = {}
for code in codes:
    d, h = statistics.median(times[code]["daily"]), statistics.median(times[code]["hourly"])
    out[code] = {
        "daily_s": round(d, 2),
        "hourly_s": round(h, 2),
        "hourly_over_daily": round(h / d, 2),
        "ms_per_extra_partition": bk.per_extra_partition(d, h, days),
        "raw": times[code],
    }
print(json.dumps({"days": days, "reps": reps, "result": out, "files": files}, indent=1))
