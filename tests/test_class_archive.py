"""The class archive local Spark JVMs map at start: made once, in the background, by the first JVM that
found none; mapped by every JVM started after it with the same Java, Spark and class path; ignored by a
JVM it does not match, which starts as before, without a word about it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from incremental_assets.model.settings import DEFAULT_SPARK_CONF
from incremental_assets.spark import class_archive
from incremental_assets.spark.class_archive import JAVA_OPTIONS, archive_key, creator_pid, with_class_archive

CONF = {**DEFAULT_SPARK_CONF, "spark.master": "local[1]"}

# A fresh process's local Spark: whether its JVM mapped a class archive (the JVM's own memory map says),
# and a query's answer.
SESSION = textwrap.dedent(
    """
    import json, sys
    from pyspark import SparkContext
    from incremental_assets.spark.session import build_spark_session
    spark = build_spark_session(json.loads(sys.argv[1]))
    jvm = SparkContext._gateway.proc.pid
    maps = open(f"/proc/{jvm}/maps").read()
    total = spark.range(1000).selectExpr("sum(id)").collect()[0][0]
    mapped = sorted({line.split()[-1] for line in maps.splitlines() if line.endswith(".jsa")})
    print(json.dumps({"mapped": mapped, "sum": total}))
    """
)


def _session(conf: dict, env: dict) -> tuple[dict, str]:
    import json

    done = subprocess.run(
        [sys.executable, "-c", SESSION, json.dumps(conf)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _stop(pid: int | None) -> None:
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)  # the creator and the JVM it started (its own session)
    except ProcessLookupError:
        pass


def test_the_first_local_spark_makes_the_archive_in_the_background_and_the_next_ones_map_it(tmp_path, monkeypatch):
    folder = tmp_path / "jvm"
    monkeypatch.setenv("INCREMENTAL_ASSETS_JVM_ARCHIVE", str(folder))
    env = {**os.environ, "INCREMENTAL_ASSETS_JVM_ARCHIVE": str(folder)}
    archive = folder / f"spark-{archive_key(CONF)}.jsa"

    untouched = with_class_archive(CONF)  # none yet: this JVM starts as before, and a creator is started
    pid = creator_pid(archive)
    try:
        assert untouched == CONF and pid is not None
        assert with_class_archive(CONF) == CONF and creator_pid(archive) == pid  # one creator at a time
        began = time.monotonic()
        while not archive.is_file() and time.monotonic() - began < 300:
            time.sleep(0.5)
        assert archive.is_file() and archive.stat().st_size > 10_000_000
        assert not list(folder.glob("*.partial"))
        while creator_pid(archive) is not None and time.monotonic() - began < 300:
            time.sleep(0.2)  # the creator removes its marker as it ends
    finally:
        _stop(pid)
    told = with_class_archive(CONF)[JAVA_OPTIONS]
    assert told.startswith(CONF[JAVA_OPTIONS]) and f"-XX:SharedArchiveFile={archive}" in told

    seen, _ = _session(CONF, env)
    assert str(archive) in seen["mapped"] and seen["sum"] == 499500  # beside Java's own archive of its classes

    # An archive that does not match the JVM (made for another class path): the JVM starts without it, silently.
    other = {**CONF, "spark.driver.extraClassPath": str(tmp_path)}
    (folder / f"spark-{archive_key(other)}.jsa").write_bytes(archive.read_bytes())
    seen, stderr = _session(other, env)
    assert seen["sum"] == 499500 and str(folder) not in " ".join(seen["mapped"])
    assert "shared archive" not in stderr.lower()

    off, _ = _session(CONF, {**env, "INCREMENTAL_ASSETS_JVM_ARCHIVE": "off"})
    assert off["sum"] == 499500 and str(folder) not in " ".join(off["mapped"])


def test_a_marker_left_by_a_creator_that_is_gone_does_not_stop_the_next_one(tmp_path, monkeypatch):
    folder = tmp_path / "jvm"
    folder.mkdir()
    monkeypatch.setenv("INCREMENTAL_ASSETS_JVM_ARCHIVE", str(folder))
    archive = folder / f"spark-{archive_key(CONF)}.jsa"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    class_archive.creating_marker(archive).write_text(str(gone.pid))
    with_class_archive(CONF)
    pid = creator_pid(archive)
    try:
        assert pid is not None and pid != gone.pid
    finally:
        _stop(pid)

    monkeypatch.setenv("INCREMENTAL_ASSETS_JVM_ARCHIVE", "off")
    assert with_class_archive(CONF) == CONF and class_archive.archive_folder() is None
    own = {**CONF, JAVA_OPTIONS: "-Xshare:off"}
    monkeypatch.setenv("INCREMENTAL_ASSETS_JVM_ARCHIVE", str(folder))
    assert with_class_archive(own) == own  # the settings choose the JVM's class sharing themselves


def test_the_key_follows_the_java_the_spark_jars_and_the_class_path(tmp_path, monkeypatch):
    # The archive names the jars by path: another installation of the same Spark needs its own.
    key = archive_key(CONF)
    assert key == archive_key(dict(CONF)) and key is not None
    monkeypatch.setattr(class_archive, "spark_home", lambda: tmp_path)
    (tmp_path / "jars").mkdir()
    assert archive_key(CONF) not in (None, key)
    monkeypatch.undo()
    assert archive_key({**CONF, "spark.jars": "/x.jar"}) != key
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    assert archive_key(CONF) is None and with_class_archive(CONF) == CONF
