"""The project's long-lived local Spark: a Spark Connect server the CLI and Dagster runs share.

``incremental-assets spark start`` launches the server from the installed pyspark (``spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer``, its jar ships with pyspark) in the background,
on 127.0.0.1 and a free port, with the project's Spark settings; it records the PID and URL in the
project's state folder (``dagster_home``, by default ``<project>/.dagster``). While it is up, every
command and every Dagster run of the project connects to it instead of starting a JVM of its own
(:func:`spark_remote`); an explicit ``spark.remote`` (or ``INCREMENTAL_ASSETS_SPARK_REMOTE``) still wins.

Nothing here imports pyspark: finding out whether the server is up costs a file read and a socket probe.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from incremental_assets.errors import SparkServerError
from incremental_assets.model import clock
from incremental_assets.model.settings import Settings
from incremental_assets.spark.class_archive import spark_home, with_class_archive

LOOPBACK = "127.0.0.1"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
RECORD_FILE = "spark-connect.json"
CONF_FILE = "spark-connect.conf"
LOG_FILE = "spark-connect.log"


@dataclass(frozen=True)
class ServerRecord:
    """What ``spark start`` wrote down: enough to find, use and stop the server."""

    pid: int
    port: int
    project_dir: str
    master: str
    started_at: str
    log: str

    @property
    def url(self) -> str:
        return f"sc://{LOOPBACK}:{self.port}"


@dataclass(frozen=True)
class ServerStatus:
    """Whether the project's server is up; ``stale``: a record whose process is gone; ``foreign``: the
    state folder is shared with another project, whose server it records."""

    up: bool
    record: ServerRecord | None = None
    stale: bool = False
    foreign: bool = False


def state_dir(settings: Settings) -> Path:
    """The project's state folder: where its Dagster instance lives, and the server's record."""
    return Path(settings.dagster_home or settings.project_dir / ".dagster")


def read_record(settings: Settings) -> ServerRecord | None:
    return _record_in(state_dir(settings))


def _record_in(state: Path) -> ServerRecord | None:
    try:
        return ServerRecord(**json.loads((state / RECORD_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _command_line(pid: int) -> str | None:
    """The process's command line, or None when there is no such (live) process."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own child that has exited
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return None
    except OSError:  # no /proc (macOS): ask ps
        done = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True)
        return done.stdout.strip() or None


def _is_our_server(record: ServerRecord, state: Path) -> bool:
    """The PID is alive and still the server started with the settings file in ``state`` (not a reused PID)."""
    command = _command_line(record.pid)
    return command is not None and SERVER_CLASS in command and str(state / CONF_FILE) in command


def server_up_in(state: Path) -> bool:
    """Whether the server recorded in the state folder ``state`` (a project's Dagster home) is up: what the
    run queue asks, which knows the instance's folder and not the project's settings."""
    record = _record_in(state)
    return record is not None and _is_our_server(record, state) and port_open(record.port)


def port_open(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def server_status(settings: Settings) -> ServerStatus:
    """Up (its process alive and listening), down, or down with a stale record."""
    record = read_record(settings)
    if record is None:
        return ServerStatus(False)
    if not _is_our_server(record, state_dir(settings)):
        return ServerStatus(False, record, stale=True)
    if Path(record.project_dir) != settings.project_dir:
        return ServerStatus(False, record, foreign=True)
    return ServerStatus(port_open(record.port), record)


def _refuse_foreign(status: ServerStatus, settings: Settings) -> None:
    if status.foreign and status.record:
        raise SparkServerError(
            f"the state folder {state_dir(settings)} is shared with the project "
            f"{status.record.project_dir}, whose Spark Connect "
            f"server (pid {status.record.pid}) it records",
            hint="give each project its own dagster_home (DAGSTER_HOME)",
        )


def spark_remote(settings: Settings) -> str | None:
    """The Spark Connect URL a session of this project uses: the configured ``spark.remote``, else the
    project's running server, else None (an in-process local session)."""
    if settings.spark_remote:
        return settings.spark_remote
    status = server_status(settings)
    return status.record.url if status.up and status.record else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def server_conf(settings: Settings, port: int) -> dict[str, str]:
    """The server's Spark settings: the project's (it is the driver now), bound to loopback and ``port``."""
    conf = {k: v for k, v in settings.spark_config().items() if k != "spark.master"}
    conf.update(
        {
            # No authentication on a Connect server: only this machine may reach it.
            "spark.connect.grpc.binding.address": LOOPBACK,
            "spark.connect.grpc.binding.port": str(port),
            "spark.app.name": "incremental_assets Spark Connect server",
        }
    )
    return conf


def _write_conf(path: Path, conf: dict[str, str]) -> None:
    """A properties file readable by the owner only: credentials among the settings stay off the command line."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        for key, value in conf.items():
            out.write(f"{key} {value}\n".replace("\\", "\\\\"))


def _launch(settings: Settings, port: int) -> subprocess.Popen:
    home, pyspark_home = state_dir(settings), spark_home()
    home.mkdir(parents=True, exist_ok=True)
    conf_path = home / CONF_FILE
    _write_conf(conf_path, with_class_archive(server_conf(settings, port)))
    argv = [
        str(pyspark_home / "bin" / "spark-submit"),
        "--master",
        settings.spark_master,
        "--properties-file",
        str(conf_path),
        "--class",
        SERVER_CLASS,
        "--name",
        "incremental_assets Spark Connect server",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_CONNECT_MODE"))}
    env.update(SPARK_HOME=str(pyspark_home), PYSPARK_PYTHON=sys.executable, TZ="UTC")
    with open(home / LOG_FILE, "ab") as log:
        # Its own session (process group): it outlives this command, and stopping it stops all it started.
        return subprocess.Popen(
            argv,
            env=env,
            cwd=settings.project_dir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _log_tail(settings: Settings, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join((state_dir(settings) / LOG_FILE).read_text(errors="replace").splitlines()[-lines:])
    return ""


def start_server(settings: Settings, *, timeout: float = 180.0) -> tuple[ServerRecord, bool]:
    """Start the project's server unless it is up; returns its record and whether this call started it."""
    status = server_status(settings)
    if status.up and status.record:
        return status.record, False
    _refuse_foreign(status, settings)
    if status.record and not status.stale:
        raise SparkServerError(
            f"the Spark Connect server (pid {status.record.pid}) is running but not answering on port "
            f"{status.record.port}; see {status.record.log}",
            hint="`incremental-assets spark stop`, then start it again",
        )
    if status.stale:
        (state_dir(settings) / RECORD_FILE).unlink(missing_ok=True)
    port = _free_port()
    process = _launch(settings, port)
    record = ServerRecord(
        process.pid,
        port,
        str(settings.project_dir),
        settings.spark_master,
        clock.wall_time().isoformat(timespec="seconds"),
        str(state_dir(settings) / LOG_FILE),
    )
    deadline = time.monotonic() + timeout
    while not port_open(port):
        if process.poll() is not None:
            raise SparkServerError(
                f"the Spark Connect server exited with code {process.returncode} while starting; "
                f"last lines of {record.log}:\n{_log_tail(settings)}",
                hint="check that Java 17+ is installed (JAVA_HOME)",
            )
        if time.monotonic() > deadline:
            _signal_group(process.pid, signal.SIGKILL)
            raise SparkServerError(
                f"the Spark Connect server did not listen on port {port} within {timeout:.0f} s; "
                f"last lines of {record.log}:\n{_log_tail(settings)}"
            )
        time.sleep(0.2)
    (state_dir(settings) / RECORD_FILE).write_text(json.dumps(asdict(record), indent=2) + "\n")
    return record, True


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)  # started in its own session: its process group id is its PID


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _command_line(pid) is None:
            return True
        time.sleep(0.2)
    return _command_line(pid) is None


def stop_server(settings: Settings, *, timeout: float = 30.0) -> ServerRecord | None:
    """Stop the project's server by its recorded PID: SIGTERM (Spark shuts down cleanly), SIGKILL after
    ``timeout``. Returns the record of the server stopped, None when none was running."""
    status = server_status(settings)
    _refuse_foreign(status, settings)
    record = status.record
    if record is not None and not status.stale:
        _signal_group(record.pid, signal.SIGTERM)
        if not _wait_gone(record.pid, timeout):
            _signal_group(record.pid, signal.SIGKILL)
            if not _wait_gone(record.pid, 10.0):
                raise SparkServerError(
                    f"the Spark Connect server (pid {record.pid}) did not stop", hint=f"kill {record.pid}"
                )
    (state_dir(settings) / RECORD_FILE).unlink(missing_ok=True)
    return None if status.stale else record


def warm_up(url: str, queries: int = 2) -> None:
    """Run a few small queries through a client session, so the first command does not pay the JIT's warm-up."""
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(url).getOrCreate()
    try:
        for _ in range(queries):
            session.sql("SELECT id, id % 7 AS k FROM range(1000)").groupBy("k").count().collect()
    finally:
        session.stop()
