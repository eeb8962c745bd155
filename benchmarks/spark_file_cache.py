"""What a long-lived Spark keeps of every read: live objects after ``--reads`` reads of the same files, each
through a new DataFrame as every command and run does, with Spark's process-wide file listing cache
(``FileStatusCache``, ``spark.sql.hive.filesourcePartitionFileCacheSize``, 250 MB by default) on and off.

Each side runs in a fresh process with a local Spark built from the project's default settings (the same
Spark the server runs); the live heap and the listing objects are counted by ``jcmd GC.class_histogram``
(a full collection first) before the reads, half-way and at the end.

    .venv/bin/python benchmarks/spark_file_cache.py --files 180 --reads 60 \
        --out benchmarks/results-spark-file-cache.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
FILE_CACHE = "spark.sql.hive.filesourcePartitionFileCacheSize"
SIDES = {"cache on (Spark's default, 250 MB)": str(250 * 1024 * 1024), "cache off (0)": "0"}


def one_side(size: str, files: int, reads: int) -> dict:
    from daemon_memory import class_histogram, heap_info, rss_kb
    from growth import _descendants

    from incremental_assets.model.settings import DEFAULT_SPARK_CONF
    from incremental_assets.spark.session import build_spark_session

    conf = {**DEFAULT_SPARK_CONF, "spark.master": "local[2]", FILE_CACHE: size}
    with tempfile.TemporaryDirectory(prefix="file-cache-") as tmp:
        conf["spark.sql.warehouse.dir"] = str(Path(tmp) / "catalog")
        spark = build_spark_session(conf, app_name="file cache")
        paths = []
        for i in range(files):  # one small file a day, as a daily table's
            paths.append(str(Path(tmp) / f"d{i:03d}"))
            spark.range(i, i + 3).write.parquet(paths[-1])
        jvm = max(_descendants(os.getpid()), key=rss_kb)
        points = []
        began = time.perf_counter()
        for n in range(reads + 1):
            if n in (0, reads // 2, reads):
                live = class_histogram(jvm)
                points.append(
                    {
                        "reads": n,
                        "live_mb": live["live_mb"],
                        **{k: live["watched"][k] for k in ("FileStatus", "LocatedFileStatus", "Path", "URI")},
                        "heap_committed_mb": heap_info(jvm).get("heap_committed_mb"),
                        "rss_mb": round(rss_kb(jvm) / 1024, 1),
                    }
                )
            if n < reads:
                assert spark.read.parquet(*paths).count() == 3 * files
        seconds = round(time.perf_counter() - began, 1)
        spark.stop()
    return {"points": points, "seconds_reading": seconds}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=180)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--side", help=argparse.SUPPRESS)  # one side, in a process of its own
    args = parser.parse_args(argv)
    if args.side is not None:
        print(json.dumps(one_side(args.side, args.files, args.reads)))
        return
    result: dict = {"files": args.files, "reads": args.reads, "sides": {}}
    for name, size in SIDES.items():
        done = subprocess.run(
            [sys.executable, __file__, "--side", size, "--files", str(args.files), "--reads", str(args.reads)],
            capture_output=True,
            text=True,
            env={**os.environ, "TZ": "UTC", "PYTHONPATH": str(REPO)},
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-3000:])
        result["sides"][name] = json.loads(done.stdout.strip().splitlines()[-1])
        print(name, json.dumps(result["sides"][name]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
