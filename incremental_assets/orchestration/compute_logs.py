"""Dagster's local compute logs (a run's stdout and stderr kept in files the UI shows, in the same folder), with
the output copied on to the terminal by a thread of the run's own process.

Dagster's own manager starts four processes per run for that copy (``tail -F`` and an orphan watcher for each
stream), 40-200 ms of a run's time on a 2-core machine, and its ``tail`` can stop before the last lines reach the
terminal. Here the thread reads the captured file as it grows and, once the run's output is restored, to its
end: every line reaches the terminal, in order, and stays in the file.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

from dagster._config import StringSource
from dagster._core.execution.compute_logs import redirect_to_file, should_disable_io_stream_redirect
from dagster._core.storage.compute_log_manager import CapturedLogContext, ComputeIOType
from dagster._core.storage.local_compute_log_manager import IO_TYPE_EXTENSION, LocalComputeLogManager
from dagster._serdes import ConfigurableClassData
from dagster._utils import ensure_file, touch_file

POLL_SECONDS = 0.05
CHUNK = 1 << 16


class ProjectComputeLogManager(LocalComputeLogManager):
    """Dagster's :class:`LocalComputeLogManager` in ``<dagster_home>/storage`` (where Dagster keeps them by
    default), mirroring to the terminal without child processes."""

    @classmethod
    def config_type(cls) -> Any:
        return {"dagster_home": StringSource}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None, config_value: Any) -> ProjectComputeLogManager:
        base = os.path.join(os.path.abspath(config_value["dagster_home"]), "storage")
        return cls(base_dir=base, inst_data=inst_data)

    @contextmanager
    def capture_logs(self, log_key: Sequence[str]) -> Iterator[CapturedLogContext]:
        out = self.get_captured_local_path(log_key, IO_TYPE_EXTENSION[ComputeIOType.STDOUT])
        err = self.get_captured_local_path(log_key, IO_TYPE_EXTENSION[ComputeIOType.STDERR])
        with mirrored(sys.stdout, out), mirrored(sys.stderr, err):
            yield CapturedLogContext(log_key)
        touch_file(self.complete_artifact_path(log_key))  # how the UI knows the capture is complete


def _descriptor(stream: IO[str]) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (a test's captured stream)
        return None


@contextmanager
def mirrored(stream: IO[str], path: str) -> Iterator[None]:
    """While the block runs, what is written to ``stream``'s descriptor (by Python, a library in C, a child
    process started meanwhile) goes to the file at ``path``, and a thread copies it from there to where the
    descriptor pointed before."""
    ensure_file(path)
    number = _descriptor(stream)
    if number is None or should_disable_io_stream_redirect():
        with redirect_to_file(stream, path):
            yield
        return
    terminal = os.dup(number)
    finished = threading.Event()
    copier = threading.Thread(target=_copy, args=(path, terminal, finished), name="compute-log-mirror", daemon=True)
    copier.start()
    try:
        with redirect_to_file(stream, path):
            yield
    finally:
        finished.set()
        copier.join()
        os.close(terminal)


def _copy(path: str, terminal: int, finished: threading.Event) -> None:
    """Copy the file at ``path`` to ``terminal`` as it grows; once ``finished`` is set, what is left, then stop.
    A terminal that went away (a closed pipe) ends the copy; the file keeps everything."""
    with open(path, "rb") as source:
        while True:
            done = finished.is_set()  # read before the last read: nothing written after it is missed
            chunk = source.read(CHUNK)
            if chunk:
                try:
                    _write_all(terminal, chunk)
                except OSError:
                    return
            elif done:
                return
            else:
                finished.wait(POLL_SECONDS)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
