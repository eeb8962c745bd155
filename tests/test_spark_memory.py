"""What a long-lived Spark (the project's Spark Connect server, up for months) keeps per query.

Spark keeps the file listing of every file read in one process-wide cache (``FileStatusCache``, 250 MB by
default) under a key of the read's own: a later read never finds an earlier read's entries, so on a server
that reads the same tables every hour the cache only fills, up to its bound, inside the driver's heap. The
project's Spark settings switch it off (``spark.sql.hive.filesourcePartitionFileCacheSize=0``); a read still
lists its files once.
"""

from __future__ import annotations

from incremental_assets.model.settings import DEFAULT_SPARK_CONF, Settings
from incremental_assets.spark.connect_server import server_conf

FILE_CACHE = "spark.sql.hive.filesourcePartitionFileCacheSize"


def file_status_cache(spark) -> str:
    jvm = spark.sparkContext._jvm
    cache = jvm.org.apache.spark.sql.execution.datasources.FileStatusCache.getOrCreate(spark._jsparkSession)
    return cache.getClass().getName()


def test_reads_keep_no_file_listing_in_the_process_wide_cache(spark, tmp_path):
    path = str(tmp_path / "t")
    spark.range(10).write.parquet(path)
    for _ in range(2):
        assert spark.read.parquet(path).count() == 10  # each read lists the files again: same rows
    assert file_status_cache(spark).endswith("NoopCache$")  # the shared, size-bound cache is not used


def test_the_server_and_a_local_session_both_have_it_off(tmp_path):
    assert DEFAULT_SPARK_CONF[FILE_CACHE] == "0"
    settings = Settings(project_dir=tmp_path, warehouse=str(tmp_path / "warehouse"))
    assert server_conf(settings, 15002)[FILE_CACHE] == "0"
    assert settings.spark_config()[FILE_CACHE] == "0"
