"""The single-writer lock of a table: a file created with O_EXCL in the table folder."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from datetime import datetime, timezone
from typing import Iterator

from incremental_assets.delta.files import host_tag, is_local, local_path, pid_alive
from incremental_assets.errors import StorageError

LOCK_FILE = "_ia_writer.lock"

LOCK_TIMEOUT_ENV = "INCREMENTAL_ASSETS_LOCK_TIMEOUT"

STALE_LOCK_SECONDS = 600.0  # a commit holds the lock for seconds; an older lock belongs to a dead writer

def _read_lock(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.loads(handle.read() or "{}")
    except (OSError, ValueError):
        return {}

def _lock_is_stale(holder: dict, path: str) -> bool:
    """A lock whose process is dead (same host), or older than any commit can take."""
    if holder.get("host") == host_tag() and isinstance(holder.get("pid"), int) and not pid_alive(holder["pid"]):
        return True
    try:
        age = time.time() - os.path.getmtime(path)
    except OSError:
        return False
    return age > STALE_LOCK_SECONDS

@contextlib.contextmanager
def writer_lock(uri: str, *, owner: str = "", timeout: float | None = None) -> Iterator[None]:
    """Hold the table's single-writer lock: a file created with O_EXCL in the table folder.

    A writer that finds the lock held waits (polling) up to ``timeout`` seconds (default 300, or
    ``INCREMENTAL_ASSETS_LOCK_TIMEOUT``), then fails naming the holder. A lock left by a killed
    process (same host, pid gone) or older than ten minutes is taken over. Object stores have no
    O_EXCL: there delta-rs's own locking (e.g. a DynamoDB lock for S3) must arbitrate.
    """
    if not is_local(uri):
        yield
        return
    folder = local_path(uri).rstrip("/")
    os.makedirs(folder, exist_ok=True)
    path = f"{folder}/{LOCK_FILE}"
    me = {"pid": os.getpid(), "host": host_tag(), "hostname": socket.gethostname(), "owner": owner,
          "since": datetime.now(timezone.utc).isoformat(), "token": uuid.uuid4().hex}
    wait = float(os.environ.get(LOCK_TIMEOUT_ENV, "300")) if timeout is None else timeout
    deadline = time.monotonic() + wait
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _read_lock(path)
            if _lock_is_stale(holder, path):
                with contextlib.suppress(FileNotFoundError):
                    # rename first: of two writers taking over the same stale lock, only one succeeds
                    os.rename(path, f"{path}.stale-{uuid.uuid4().hex[:8]}")
                    for stale in (p for p in os.listdir(folder) if p.startswith(LOCK_FILE + ".stale-")):
                        os.remove(f"{folder}/{stale}")
                continue
            if time.monotonic() >= deadline:
                raise StorageError(
                    f"table {uri} is being written by {holder.get('owner') or 'another run'} (pid {holder.get('pid')} on "
                    f"{holder.get('hostname')}, since {holder.get('since')}); waited {wait:.0f}s. Retry when it is done, "
                    f"or raise {LOCK_TIMEOUT_ENV}; if that process is gone, delete {path}"
                ) from None
            time.sleep(0.05)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(me))
        break
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            if _read_lock(path).get("token") == me["token"]:  # never remove a lock another writer took over
                os.remove(path)
