"""The single-writer lock of a table: a file in the table folder, flock-ed by its writer for its life.

Holding the lock means two things at once: the file at ``_ia_writer.lock`` is the one the writer
published, and the writer holds ``fcntl.flock`` on it. A writer publishes its lock with ``link()``, which
fails when any file is there, and only after writing its record and taking the flock, so a lock is never
seen half written or unlocked. The kernel drops a flock when its process dies, however it dies, so a
lock file nobody flocks belongs to a dead writer: a later writer takes it over only while it holds that
file's flock itself and has checked that the path still names that file, which no other writer can
change meanwhile (removing the file needs its flock too). A live holder on this host is never robbed,
however long it holds the lock.

A holder on another host (a shared file system) is judged by its heartbeat: the holder touches the
file every :data:`HEARTBEAT_SECONDS`, and its lock is taken over only once it has not been touched for
:data:`STALE_LOCK_SECONDS` (file systems that share flock across hosts, such as NFSv4, never get that
far while the holder lives). Object stores have no such file: there each commit is one step of an
application transaction that delta-rs refuses to commit on a stale snapshot (:mod:`.commit`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import threading
import time
import uuid
from typing import Callable, Iterator

from incremental_assets.delta.files import (
    host_tag,
    is_local,
    local_path,
    pid_alive,
    process_started,
)
from incremental_assets.errors import StorageError
from incremental_assets.model import clock
from incremental_assets.model.settings import LOCK_TIMEOUT_ENV, read_env_settings

LOCK_FILE = "_ia_writer.lock"


STALE_LOCK_SECONDS = 600.0  # a lock from another host not touched for this long belongs to a dead writer
HEARTBEAT_SECONDS = 30.0  # how often a holder touches its lock file

# The steps of taking the lock, where a test can pause one writer while others run (see tests/test_concurrency.py).
STEPS = ("prepared", "opened", "flocked", "read", "judged", "moved")
_step_hook: Callable[[str], None] | None = None

_in_process: dict[str, threading.Lock] = {}
_in_process_guard = threading.Lock()


def _reset_after_fork() -> None:
    # a forked child does not own the locks its parent's threads held
    global _in_process_guard
    _in_process.clear()
    _in_process_guard = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def _step(name: str) -> None:
    if _step_hook is not None:
        _step_hook(name)


def _thread_lock(path: str) -> threading.Lock:
    # Threads of one process are serialised here first: flock over NFS is per process, not per file handle.
    with _in_process_guard:
        return _in_process.setdefault(os.path.realpath(path), threading.Lock())


def _read_record(fd: int) -> dict:
    try:
        data = os.pread(fd, 65536, 0)
        record = json.loads(data.decode("utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _read_record_at(path: str) -> dict:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return {}
    try:
        return _read_record(fd)
    finally:
        os.close(fd)


def _names(fd: int, path: str) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        at_path = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (at_path.st_dev, at_path.st_ino)


def _holder_is_gone(record: dict, fd: int) -> bool:
    """Judge the writer of a lock file whose flock we could take: gone, or alive on a file system whose
    flock does not reach it (another host without shared locks, or a writer of an older version)."""
    if record.get("host") == host_tag() and isinstance(record.get("pid"), int):
        pid = record["pid"]
        if pid == os.getpid():  # our threads are serialised before the file: a record of ours is left over
            return True
        started = process_started(pid)
        return not pid_alive(pid) or (
            record.get("started") is not None and started is not None and started != record["started"]
        )
    # another host, or no readable record: only a heartbeat older than the limit proves the holder dead
    return clock.wall_time().timestamp() - os.fstat(fd).st_mtime > STALE_LOCK_SECONDS


def _take_over(fd: int, path: str) -> bool:
    """Remove the dead writer's lock file open (and flock-ed) as ``fd``; False if it is no longer there."""
    aside = f"{path}.stale-{uuid.uuid4().hex}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    _step("moved")
    if _names(fd, aside):
        os.unlink(aside)
        return True
    # Only a writer on another host that ignores our flock can have replaced the file we judged: put its
    # live lock back (link fails rather than overwrite a lock published meanwhile).
    with contextlib.suppress(FileExistsError, FileNotFoundError):
        os.link(aside, path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(aside)
    return False


def _publish(fd: int, prepared: str, path: str) -> bool:
    """Make the prepared lock file (written and flock-ed) the table's lock, unless a lock is there."""
    try:
        os.link(prepared, path)
    except FileExistsError:
        return os.fstat(fd).st_nlink > 1  # NFS can report EEXIST for a link it made on a retried call
    return True


def _prepare(folder: str, record: dict) -> tuple[int, str]:
    prepared = f"{folder}/{LOCK_FILE}.{record['token']}.tmp"
    fd = os.open(prepared, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # nobody else knows this file yet: taken at once
    os.write(fd, json.dumps(record).encode("utf-8"))
    _step("prepared")
    return fd, prepared


def _inspect(path: str) -> tuple[dict, bool]:
    """The current lock's record, and whether it is free now (released, or its dead writer's file removed)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return {}, True
    try:
        _step("opened")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            return _read_record(fd), False  # its writer is alive
        _step("flocked")
        if not _names(fd, path):
            return {}, True  # released (or taken over) while we opened it
        record = _read_record(fd)
        _step("read")
        if not _holder_is_gone(record, fd):
            return record, False
        _step("judged")
        return record, _take_over(fd, path)
    finally:
        os.close(fd)


def _remove_leftovers(folder: str) -> None:
    """Prepared and moved-aside files of writers that died mid-acquisition (nobody flocks them)."""
    for name in os.listdir(folder):
        if not name.startswith(LOCK_FILE + ".") or name == LOCK_FILE:
            continue
        leftover = f"{folder}/{name}"
        with contextlib.suppress(OSError):
            if clock.wall_time().timestamp() - os.stat(leftover).st_mtime < STALE_LOCK_SECONDS:
                continue
            fd = os.open(leftover, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.unlink(leftover)
            finally:
                os.close(fd)


def _heartbeat(fd: int, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_SECONDS):
        with contextlib.suppress(OSError):
            os.utime(fd)


def _busy(uri: str, path: str, record: dict, wait: float) -> StorageError:
    who = record.get("owner") or "another run"
    text = (
        f"table {uri} is being written by {who} (pid {record.get('pid')} on {record.get('hostname')}, since "
        f"{record.get('since')}); waited {wait:.0f}s. Retry when it is done, or raise {LOCK_TIMEOUT_ENV}"
    )
    if record.get("host") != host_tag():
        text += (
            f"; a lock written on another host is taken over once its holder has not touched it for "
            f"{STALE_LOCK_SECONDS / 60:.0f} minutes, or delete {path} if you know that writer is gone"
        )
    return StorageError(text)


@contextlib.contextmanager
def writer_lock(uri: str, *, owner: str = "", timeout: float | None = None) -> Iterator[None]:
    """Hold the table's single-writer lock (see the module docstring for why it cannot be held twice).

    A writer that finds the lock held waits (polling) up to ``timeout`` seconds (default 300, or
    ``INCREMENTAL_ASSETS_LOCK_TIMEOUT``), then fails naming the holder. The lock of a dead writer is
    taken over at once on its host, and after :data:`STALE_LOCK_SECONDS` without heartbeat elsewhere.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with writer_lock(folder, owner="doctest"):
    ...     with writer_lock(folder, timeout=0):
    ...         pass
    Traceback (most recent call last):
    ...
    incremental_assets.errors.StorageError: table ... is being written by doctest ...
    """
    if not is_local(uri):
        yield
        return
    folder = local_path(uri).rstrip("/")
    os.makedirs(folder, exist_ok=True)
    path = f"{folder}/{LOCK_FILE}"
    wait = read_env_settings().lock_timeout_seconds if timeout is None else timeout
    deadline = time.monotonic() + wait
    in_process = _thread_lock(path)
    if not (in_process.acquire(timeout=wait) if wait > 0 else in_process.acquire(blocking=False)):
        raise _busy(uri, path, _read_record_at(path), wait)
    try:
        fd = _acquire(uri, folder, path, owner, deadline, wait)
        stop = threading.Event()
        beat = threading.Thread(target=_heartbeat, args=(fd, stop), name=f"heartbeat {path}", daemon=True)
        beat.start()
        try:
            yield
        finally:
            stop.set()
            beat.join()
            try:
                if _names(fd, path):  # under our flock nobody else can have replaced it
                    os.unlink(path)
            finally:
                os.close(fd)
    finally:
        in_process.release()


def _acquire(uri: str, folder: str, path: str, owner: str, deadline: float, wait: float) -> int:
    """Publish our lock file, taking over a dead writer's; the open, flock-ed lock file when held."""
    record = {
        "pid": os.getpid(),
        "started": process_started(os.getpid()),
        "host": host_tag(),
        "hostname": socket.gethostname(),
        "owner": owner,
        "since": clock.wall_time().isoformat(),
        "token": uuid.uuid4().hex,
    }
    fd, prepared = _prepare(folder, record)
    held = False
    try:
        while True:
            try:
                published = _publish(fd, prepared, path)
            except FileNotFoundError:  # removed as a leftover by a writer that ignores our flock
                os.close(fd)
                fd = -1
                fd, prepared = _prepare(folder, record)
                continue
            if published:
                held = True
                _remove_leftovers(folder)
                return fd
            holder, free = _inspect(path)
            if free:
                continue
            if time.monotonic() >= deadline:
                raise _busy(uri, path, holder, wait)
            time.sleep(0.05)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(prepared)
        if not held and fd >= 0:
            os.close(fd)
