"""Tables on an object store (S3 API, served by a local moto server): no lock file there, so concurrent
writers are arbitrated by the commit itself (an application transaction delta-rs refuses to commit on a
stale snapshot, replayed on the new one): same-window writers leave one whole result, different windows
all land, and `verify`'s file check works on the store."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from incremental_assets import delta
from incremental_assets.delta.files import filesystem
from incremental_assets.model.intervals import IntervalUnit, TimeWindow, to_utc

from helpers import all_at_once

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def endpoint():
    """A moto S3 server on 127.0.0.1, stopped by its PID at the end."""
    port = _free_port()
    server = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen(
        [str(server), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url, timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the moto S3 server did not start") from None
                time.sleep(0.2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.fixture
def bucket(endpoint, monkeypatch):
    for key, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }.items():
        monkeypatch.setenv(key, value)
    name = "b" + uuid.uuid4().hex[:12]
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{name}", method="PUT"))
    return f"s3://{name}"


def stage(uri: str, tag: str, day: str) -> str:
    """A staging folder on the store as Spark leaves it: one file in the interval's partition."""
    staging = delta.new_staging_dir(uri)
    fs, path = filesystem(staging)
    fs.create_dir(f"{path}/{delta.PARTITION_COLUMN}={day}")
    with fs.open_output_stream(f"{path}/{delta.PARTITION_COLUMN}={day}/part-0.parquet") as out:
        pq.write_table(pa.table({"k": [tag] * 3, "v": [0, 1, 2]}, schema=SCHEMA), out)
    return staging


def commit(uri: str, staging: str, day: str) -> delta.CommitResult:
    start = to_utc(day)
    window = delta.ReplaceWindow(TimeWindow(start, start + timedelta(days=1)), IntervalUnit.DAY)
    return delta.commit_staged(uri, staging, SCHEMA, window, metadata={"model": "t.x"})


def rows(uri: str) -> list[tuple]:
    table = DeltaTable(uri).to_pyarrow_table()
    return sorted((r["k"], r["v"], r[delta.PARTITION_COLUMN]) for r in table.to_pylist())


@pytest.mark.parametrize("existing", [False, True], ids=["racing to create", "existing table"])
def test_two_writers_of_one_window_on_s3_leave_one_whole_result(bucket, existing):
    for round_ in range(3):
        uri = f"{bucket}/t{round_}"
        if existing:
            commit(uri, stage(uri, "old", "2024-01-01"), "2024-01-01")
        a, b = stage(uri, "a", "2024-01-01"), stage(uri, "b", "2024-01-01")
        results = all_at_once(lambda: commit(uri, a, "2024-01-01"), lambda: commit(uri, b, "2024-01-01"))
        assert all(isinstance(r, delta.CommitResult) for r in results), results  # the later one replayed, then replaced
        assert rows(uri) in ([(w, v, "2024-01-01") for v in range(3)] for w in ("a", "b"))
        assert len({r.version for r in results}) == 2
        winner = max(results, key=lambda r: r.version)
        assert rows(uri)[0][0] == ("a" if winner is results[0] else "b")  # the later commit's rows are the table's


def test_writers_of_different_windows_on_s3_all_land(bucket):
    uri = f"{bucket}/t"
    commit(uri, stage(uri, "old", "2023-12-31"), "2023-12-31")
    days = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]
    stagings = {d: stage(uri, d, d) for d in days}
    results = all_at_once(*[lambda d=d: commit(uri, stagings[d], d) for d in days])
    assert all(isinstance(r, delta.CommitResult) for r in results), results
    assert sorted(r.version for r in results) == [2, 3, 4, 5], [
        (h["version"], h.get("operation"), h.get(delta.METADATA_PREFIX + "staging")) for h in DeltaTable(uri).history()
    ]  # created empty (0), "old" (1)
    assert {k for k, _, _ in rows(uri)} == {"old", *days} and len(rows(uri)) == 15


def test_verify_finds_a_missing_file_on_s3(bucket):
    uri = f"{bucket}/t"
    commit(uri, stage(uri, "a", "2024-01-01"), "2024-01-01")
    commit(uri, stage(uri, "b", "2024-01-02"), "2024-01-02")
    files = delta.snapshot_files(uri)
    assert delta.file_problems(uri, files, readable=True) == []
    victim = next(f for f in files if f.interval == "2024-01-02")
    fs, _ = filesystem(uri)
    fs.delete_file(victim.uri.split("://", 1)[1])
    assert delta.file_problems(uri, delta.snapshot_files(uri)) == [(victim, "missing")]
