"""The command server's process: the CLI's libraries imported, one forked copy per command.

Started by ``incremental-assets spark start`` next to the project's Spark Connect server and ended with it
(it watches the server's process and exits when it is gone, so whatever stops the server stops this too).
It imports what commands use (Dagster and its SQL storage, the Spark Connect client, pandas, pyarrow,
deltalake, sqlglot and the product), opens nothing, starts no thread, then waits on a Unix socket (see
:mod:`incremental_assets.cli.forward`). For each command it forks: the copy takes the caller's stdin,
stdout and stderr, working directory, umask and environment and runs the command's ``main`` exactly as the
command's own process would, then writes the exit code back. The project's files (models, settings,
sources) are read by each copy as usual; only library code is shared, and a caller whose copy of the
package differs (an edit, an upgrade) is refused and runs the command itself; the server then exits.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import importlib
import io
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from incremental_assets.model.settings import adopt_environment
from incremental_assets.orchestration.command_socket import (
    DAGSTER_RUN,
    HEADER,
    code_fingerprint,
    own_folder,
    read_record,
    record_path,
    socket_folder,
    socket_path,
)

# What a command imports on its way (the heaviest first); each copy finds them imported.
PRELOAD = (
    "dagster",
    "dagster._cli.api",
    "dagster._core.storage.runs.sqlite.sqlite_run_storage",
    "dagster._core.storage.event_log.sqlite.sqlite_event_log",
    "dagster._core.storage.event_log.sqlite.consolidated_sqlite_event_log",
    "dagster._core.storage.schedules.sqlite.sqlite_schedule_storage",
    "dagster._core.storage.defs_state.blob_storage_state_storage",
    "dagster_pyspark",
    "pyspark.sql.connect.session",
    "pandas",
    "pyarrow",
    "pyarrow.dataset",
    "deltalake",
    "sqlglot",
    "upath",
    "incremental_assets.cli.commands",
    "incremental_assets.load.project",
    "incremental_assets.orchestration.build_definitions",
    "incremental_assets.orchestration.instance",
    "incremental_assets.orchestration.runner",
    "incremental_assets.spark.session",
    # Imported on a command's way by name or lazily (Dagster's in-process execution, its instance factory and
    # compute logs, upath's local paths over fsspec, the Connect client's channel, the product's run modules).
    "dagster._core.definitions.external_asset",
    "dagster._core.definitions.repository_definition.repository_data_builder",
    "dagster._core.execution.execute_in_process",
    "dagster._core.execution.plan.active",
    "dagster._core.executor.in_process",
    "dagster._core.instance.factory",
    "dagster._core.instance.runs.run_domain",
    "dagster._core.storage.legacy_storage",
    "dagster._core.storage.local_compute_log_manager",
    "dagster._core.storage.root",
    "dagster._core.system_config.composite_descent",
    "encodings.ascii",
    "fsspec.implementations.local",
    "grpc._channel",
    "sqlglot.serde",
    "upath.implementations.local",
    "watchdog.observers.polling",
    "watchdog.utils.dirsnapshot",
    "incremental_assets.cli.spark_server",
    "incremental_assets.load.stamp",
    "incremental_assets.orchestration.code_reload",
    "incremental_assets.orchestration.compute_logs",
    "incremental_assets.orchestration.decisions",
    "incremental_assets.orchestration.event_log",
    "incremental_assets.orchestration.live",
    "incremental_assets.orchestration.maintenance",
    "incremental_assets.orchestration.reads",
    "incremental_assets.orchestration.run_groups",
    "incremental_assets.orchestration.run_launcher",
    "incremental_assets.orchestration.schedules",
    "incremental_assets.orchestration.sensors",
    "incremental_assets.orchestration.sqlite_storage",
    "incremental_assets.orchestration.tick_watch",
    "incremental_assets.orchestration.watch",
)
HANDSHAKE_SECONDS = 10.0


def preload() -> list[str]:
    """Import every module of :data:`PRELOAD` that is installed; the names that are not."""
    missing = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def _read_exact(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the caller went away")
        data.extend(chunk)
    return bytes(data)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    conn.settimeout(HANDSHAKE_SECONDS)
    _, fds, _, _ = socket.recv_fds(conn, 1, 3)
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise ConnectionError("the caller sent no stdin, stdout and stderr")
    try:
        (size,) = HEADER.unpack(_read_exact(conn, HEADER.size))
        request = json.loads(_read_exact(conn, size))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    conn.settimeout(None)
    return request, fds


def _stdio(fds: list[int]) -> None:
    """Make the caller's descriptors this process's 0, 1 and 2. Python's streams (and whatever holds them,
    such as logging handlers) already write to those numbers; stdout is line-buffered on a terminal only,
    as in a process of the command's own."""
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=os.isatty(1))


def _die_with_caller(conn: socket.socket, finished: threading.Event) -> None:
    """A caller that goes away (killed, its terminal closed) takes its command with it, as with a process of
    its own: the command's process group is killed, unless the command has finished already."""
    with contextlib.suppress(OSError):
        while conn.recv(64):
            pass
    if not finished.is_set():
        os.killpg(0, signal.SIGKILL)


def _run_command(request: dict) -> int:
    """The request's work: an ``incremental-assets`` command, or a Dagster run (``dagster api execute_run``,
    what Dagster's container launchers run in a new container) the project's run launcher handed over."""
    gc.set_threshold(50_000, 20, 100)
    try:
        if request.get("kind") == DAGSTER_RUN:
            from incremental_assets.orchestration.run_launcher import execute_run

            return execute_run(request["argv"])
        from incremental_assets.cli.commands import main

        return main(request["argv"])
    except KeyboardInterrupt:
        return 130
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)


def _child(conn: socket.socket, request: dict, fds: list[int], closing: list[int]) -> None:
    """The forked copy: becomes the command's process, runs it, reports its exit code, never returns."""
    code = 1
    finished = threading.Event()
    try:
        os.setpgid(0, 0)
        for fd in closing:
            os.close(fd)
        for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _stdio(fds)
        os.chdir(request["cwd"])
        os.umask(int(request["umask"]))
        adopt_environment(request["env"])
        time.tzset()  # the caller's TZ, as its own process would have read it at its start
        sys.path[:] = request["path"]
        sys.argv = ["incremental-assets", *request["argv"]]
        if request.get("kind") != DAGSTER_RUN:  # a run goes on when its launcher lets go; Dagster watches it
            threading.Thread(target=_die_with_caller, args=(conn, finished), daemon=True).start()
        code = _run_command(request)
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()  # what a process of its own would run at its end
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        finished.set()
        with contextlib.suppress(OSError):
            conn.sendall(f"exit {code}\n".encode())
        os._exit(code)


class Server:
    """The accept loop: one fork per command, reaping finished copies; ends when the Spark server does."""

    def __init__(self, project: Path, spark_pid: int) -> None:
        self.path = socket_path(project)
        self.fingerprint = code_fingerprint()
        self.spark = os.pidfd_open(spark_pid)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.children: dict[int, tuple[str, float]] = {}
        self.stopping = False

    def bind(self) -> None:
        folder = socket_folder()
        folder.mkdir(mode=0o700, exist_ok=True)
        if not own_folder(folder):
            raise SystemExit(f"{folder} is not this user's own private folder; the command server does not start")
        temporary = folder / f"{self.path.stem}.{os.getpid()}.tmp"
        temporary.unlink(missing_ok=True)
        self.listener.bind(str(temporary))
        self.listener.listen(32)
        os.replace(temporary, self.path)  # one step: a caller finds the old socket or this one, never none
        self.inode = self.path.stat().st_ino

    def serve(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        while not self.stopping:
            with contextlib.suppress(InterruptedError):
                wait = 0.2 if self.children else 1.0  # copies running: collect each soon after it ends
                ready, _, _ = select.select([self.listener.fileno(), self.spark], [], [], wait)
                if self.spark in ready:
                    break  # the Spark server is gone: so is the reason to be here
                if self.listener.fileno() in ready:
                    self.accept()
            self.reap()
        self.close()

    def accept(self) -> None:
        conn, _ = self.listener.accept()
        try:
            request, fds = _receive(conn)
        except (OSError, ValueError, ConnectionError):
            conn.close()
            return
        if request.get("code") != self.fingerprint:
            with contextlib.suppress(OSError):
                conn.sendall(b"other code\n")  # the caller runs the command itself
            conn.close()
            for fd in fds:
                os.close(fd)
            # The package changed under this process (an edit, an upgrade): it stops serving; the next
            # `spark start` starts one with the new code. A caller of another copy leaves it serving.
            self.stopping = code_fingerprint() != self.fingerprint
            return
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # nothing of this process's own output may reach the caller
        pid = os.fork()
        if pid == 0:
            _child(conn, request, fds, [self.listener.fileno(), self.spark])
        self.children[pid] = (str(request.get("label") or " ".join(request["argv"])), time.monotonic())
        for fd in fds:
            os.close(fd)
        with contextlib.suppress(OSError):
            conn.sendall(f"pid {pid}\n".encode())
        conn.close()

    def reap(self) -> None:
        """Collect finished copies; one line each in the server's log: PID, exit code, seconds, what it ran."""
        for pid, (label, started) in list(self.children.items()):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if not done:
                continue
            del self.children[pid]
            code = os.waitstatus_to_exitcode(status)
            print(f"{pid}: exit {code} after {time.monotonic() - started:.2f} s: {label[:300]}", flush=True)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.path.stat().st_ino == self.inode:  # still ours: a newer server may have replaced it
                self.path.unlink()
        self.listener.close()


def serve_project(project: Path, spark_pid: int, state: Path) -> int:
    missing = preload()
    if missing:
        print(f"not installed, imported by each command itself: {', '.join(missing)}", flush=True)
    gc.collect()
    gc.freeze()  # what the imports left stays put: forked copies share those pages instead of copying them
    server = Server(project, spark_pid)
    server.bind()
    record = {"pid": os.getpid(), "socket": str(server.path), "code": server.fingerprint, "project": str(project)}
    temporary = record_path(state).with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(temporary, record_path(state))
    print(f"serving commands of {project} on {server.path}", flush=True)
    try:
        server.serve()
    finally:
        with contextlib.suppress(OSError):
            if (read_record(state) or {}).get("pid") == os.getpid():
                record_path(state).unlink()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m incremental_assets.cli.command_process")
    parser.add_argument("project", type=Path)
    parser.add_argument("spark_pid", type=int)
    parser.add_argument("state", type=Path)
    args = parser.parse_args(argv)
    return serve_project(args.project.resolve(), args.spark_pid, args.state)


if __name__ == "__main__":
    sys.exit(main())
