"""One archive of the classes a local Spark's JVM loads, shared by every Spark this machine starts.

A local Spark (a command's, a run's, the long-lived server's) starts a JVM that loads and verifies tens of
thousands of classes before its first query. Java's class data sharing maps them from an archive instead:
on a 2-core machine a session's start with a small query and a write went from 7.4 s to 4.8-5.1 s.

The archive is made once for a Java, a Spark and a class path (its key): the first local Spark started
without one starts a process of its own, in the background and at low priority, that runs a small Spark
workload in a JVM told to write the classes it loaded at its exit, then moves the finished file into place
(a JVM must never map a half-written archive). Every JVM started afterwards with the same key maps it. A
JVM that finds the archive does not match (another Java or class path than its key says) starts as it
would without one, silently.

``INCREMENTAL_ASSETS_JVM_ARCHIVE`` moves the archives' folder (default ``~/.cache/incremental_assets/jvm``)
or, set to ``off``, leaves the JVMs as Java starts them.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping

from incremental_assets.errors import SparkServerError
from incremental_assets.model import clock
from incremental_assets.model.settings import read_env_settings

JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# The settings that change which classes a driver JVM can load (with the Java and Spark installed), and its
# heap size, which decides whether its class pointers are compressed as the archive's are.
CLASS_PATH_KEYS = ("spark.driver.extraClassPath", "spark.jars", "spark.jars.packages", "spark.driver.memory")
QUIET = "-Xlog:cds=off,cds+dynamic=off"  # an archive that does not match is not worth a warning
CREATING_STALE_SECONDS = 600.0  # a creator that has held its marker this long is gone
CREATE_TIMEOUT_SECONDS = 300.0
KEPT = 3  # archives kept in the folder (other Java or Spark versions): the newest


def archive_folder() -> Path | None:
    """Where the archives live, or None when they are turned off."""
    chosen = read_env_settings().jvm_archive
    if chosen and chosen.strip().lower() in ("off", "0", "false", "no"):
        return None
    return Path(chosen).expanduser() if chosen else Path.home() / ".cache" / "incremental_assets" / "jvm"


def with_class_archive(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` with the driver JVM told to map this machine's class archive; when there is none yet, one is
    started in the background for the JVMs that come after. ``conf`` as it is when the archives are off,
    when the settings already choose the JVM's class sharing, or when no Java is found."""
    conf = dict(conf)
    options = conf.get(JAVA_OPTIONS, "")
    folder = archive_folder()
    if folder is None or "SharedArchiveFile" in options or "-Xshare" in options:
        return conf
    key = archive_key(conf)
    if key is None:
        return conf
    archive = folder / f"spark-{key}.jsa"
    if archive.is_file():
        conf[JAVA_OPTIONS] = f"{options} -XX:SharedArchiveFile={archive} {QUIET}".strip()
    else:
        _start_creating(archive, conf)
    return conf


def archive_key(conf: Mapping[str, str]) -> str | None:
    """What an archive is valid for: the Java (its runtime image), Spark's jars and the class path settings."""
    java = java_executable()
    spark_jars = spark_home() / "jars"
    if java is None or not spark_jars.is_dir():
        return None
    runtime = java.parent.parent / "lib" / "modules"
    facts: list[object] = [str(java), _stamp(runtime), str(spark_jars)]  # a class path names its jars by path
    facts += sorted((entry.name, entry.stat().st_size) for entry in os.scandir(spark_jars))
    facts += [(k, conf.get(k, "")) for k in CLASS_PATH_KEYS]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]


def java_executable() -> Path | None:
    """The ``java`` Spark's launcher starts: ``$JAVA_HOME/bin/java``, else the one on the path."""
    home = read_env_settings().java_home
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def _stamp(path: Path) -> tuple[int, int]:
    with contextlib.suppress(OSError):
        stat = path.stat()
        return stat.st_size, int(stat.st_mtime)
    return 0, 0


def spark_home() -> Path:
    """The folder of the installed pyspark (its ``jars`` and ``bin``), found without importing it."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.origin:
        raise SparkServerError("pyspark is not installed in this environment", hint="pip install incremental-assets")
    return Path(spec.origin).resolve().parent


def _start_creating(archive: Path, conf: Mapping[str, str]) -> None:
    """Start the creator in the background unless another is making the archive. Its marker file holds
    its PID: a marker whose process is gone, or that is older than any creation takes, is left over."""
    marker = creating_marker(archive)
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        if marker.exists() and not _creator_alive(marker):
            marker.unlink(missing_ok=True)
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError:
        return  # another process is making it, or the folder cannot be written: this JVM starts without
    wanted = {k: conf[k] for k in ("spark.master", JAVA_OPTIONS, *CLASS_PATH_KEYS) if k in conf}
    try:
        creator = subprocess.Popen(
            [sys.executable, "-m", __name__, str(archive), json.dumps(wanted)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not stopped with the command that started it, nor by its Ctrl-C
        )
    except OSError:
        os.close(fd)
        marker.unlink(missing_ok=True)
        return
    with os.fdopen(fd, "w") as out:
        out.write(str(creator.pid))


def creating_marker(archive: Path) -> Path:
    """The file that says a process is making ``archive``; it holds that process's PID."""
    return archive.with_suffix(".creating")


def creator_pid(archive: Path) -> int | None:
    """The PID of the process making ``archive``, if one is."""
    with contextlib.suppress(OSError, ValueError):
        return int(creating_marker(archive).read_text())
    return None


def _creator_alive(marker: Path) -> bool:
    with contextlib.suppress(OSError, ValueError):
        if _age(marker) > CREATING_STALE_SECONDS:
            return False
        text = marker.read_text().strip()
        if not text:
            return True  # its creator is being started
        os.kill(int(text), 0)
        return True
    return False


def create(archive: Path, conf: Mapping[str, str]) -> bool:
    """Run a small Spark workload in a JVM that writes the classes it loaded at its exit, and move the
    finished archive into place. Whether it was made (a JVM that could not write one leaves nothing)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    partial = archive.with_suffix(f".{os.getpid()}.partial")
    options = f"{conf.get(JAVA_OPTIONS, '')} -XX:ArchiveClassesAtExit={partial} {QUIET}".strip()
    builder = SparkSession.builder.appName("incremental_assets class archive")
    for key, value in {**conf, JAVA_OPTIONS: options, "spark.ui.enabled": "false"}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    process = SparkContext._gateway.proc  # type: ignore[union-attr]  # the JVM (spark-submit execs it)
    try:
        with tempfile.TemporaryDirectory(prefix="incremental_assets_archive_") as work:
            _workload(spark, Path(work))
    finally:
        spark.stop()
        process.stdin.close()  # the JVM exits when its parent's pipe closes, writing the archive first
        process.wait(timeout=CREATE_TIMEOUT_SECONDS)
    if process.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
        partial.unlink(missing_ok=True)
        return False
    os.replace(partial, archive)
    _keep_newest(archive.parent)
    return True


def _workload(spark, work: Path) -> None:
    """What a model's run does, small: partitioned Parquet written and read back by file, CSV and JSON read,
    aggregates, joins and window functions over timestamps, a write with row counts observed."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    rows = spark.range(3000).selectExpr(
        "id",
        "cast(id % 24 as int) as hour",
        "timestamp_seconds(1700000000 + id * 97) as ts",
        "cast(id as string) as name",
        "cast(id / 7 as decimal(18, 2)) as amount",
    )
    rows = rows.withColumn("day", F.to_date("ts"))
    rows.write.partitionBy("day").parquet(str(work / "parquet"))
    rows.write.csv(str(work / "csv"), header=True)
    rows.write.json(str(work / "json"))
    files = [str(p) for p in (work / "parquet").rglob("*.parquet")]
    read = spark.read.option("basePath", str(work / "parquet")).parquet(*files)
    read.createOrReplaceTempView("rows")
    spark.read.csv(str(work / "csv"), header=True, inferSchema=True).createOrReplaceTempView("csv_rows")
    spark.read.json(str(work / "json")).createOrReplaceTempView("json_rows")
    query = spark.sql(
        "SELECT r.day, date_trunc('HOUR', r.ts) AS hour, count(*) AS n, sum(r.amount) AS amount,"
        " max(c.name) AS name, row_number() OVER (PARTITION BY r.day ORDER BY max(r.ts)) AS k,"
        " lag(sum(r.amount)) OVER (PARTITION BY r.day ORDER BY date_trunc('HOUR', r.ts)) AS before"
        " FROM rows r JOIN csv_rows c ON r.id = c.id LEFT JOIN json_rows j ON j.id = r.id"
        " WHERE r.ts >= timestamp'2023-11-14 00:00:00' GROUP BY r.day, date_trunc('HOUR', r.ts)"
    )
    observed = Observation("rows")
    query.observe(observed, F.count(F.lit(1)).alias("n")).write.parquet(str(work / "out"))
    spark.read.parquet(str(work / "out")).where("n > 1").select(F.countDistinct("day")).collect()
    spark.sql("SELECT hour, count(DISTINCT name) FROM rows GROUP BY hour HAVING count(*) > 1").collect()


def _age(path: Path) -> float:
    """Seconds since ``path`` was last written."""
    return clock.wall_time().timestamp() - path.stat().st_mtime


def _keep_newest(folder: Path) -> None:
    archives = sorted(folder.glob("spark-*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[KEPT:]:
        old.unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    archive = Path(argv[0])
    os.nice(10)  # behind the work of the command that started it
    try:
        return 0 if create(archive, json.loads(argv[1])) else 1
    finally:
        creating_marker(archive).unlink(missing_ok=True)
        archive.with_suffix(f".{os.getpid()}.partial").unlink(missing_ok=True)
        for partial in archive.parent.glob(f"{archive.stem}.*.partial"):
            with contextlib.suppress(OSError):
                if _age(partial) > CREATING_STALE_SECONDS:
                    partial.unlink()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
