"""Real services for the cluster tests, each started on 127.0.0.1 in the background and always stopped.

* :func:`standalone_cluster`: a Spark standalone master and N workers (separate JVMs) from the pyspark
  distribution (``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``; the pip
  package ships ``bin/spark-class`` but not ``sbin/start-master.sh``).
* :func:`connect_server`: a Spark Connect server (``spark-submit --class ...SparkConnectServer``; the
  connect jar ships with pyspark 4).
* :func:`postgres_server`: a throwaway PostgreSQL cluster (Debian's ``postgresql`` package) made with
  initdb in a temporary folder and started with pg_ctl, as the ``postgres`` user when we are root
  (the server refuses to run as root). The password is random, lives in memory and in a 0600 file
  that is deleted with the cluster, and is never printed.

Every process is started in its own session (process group) so that stopping it also stops what it
started (a worker's executors); nothing is stopped by name.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
LOOPBACK = "127.0.0.1"


class ServiceError(RuntimeError):
    pass


def java_available() -> bool:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").exists():
        return True
    return shutil.which("java") is not None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path} not readable)"
    return "\n".join(text[-lines:])


class Service:
    """One background process (and its process group) with its output in a log file."""

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str], log: Path, cwd: Path | None = None):
        self.name = name
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                list(argv),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def check_alive(self) -> None:
        if not self.alive:
            raise ServiceError(
                f"{self.name} exited with {self.process.returncode}; last lines of {self.log}:\n{tail(self.log)}"
            )

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to the process group, then SIGKILL whatever is left after ``timeout``."""
        pgid = self.process.pid  # start_new_session: the group id is the leader's pid
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(wait)
            except subprocess.TimeoutExpired:
                continue
            # The leader is gone; give the rest of its group (executors) the same chance.
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _group_alive(pgid):
                time.sleep(0.2)
            if not _group_alive(pgid):
                break
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(1)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def wait_for(check: Callable[[], object], *, timeout: float, what: str, services: Sequence[Service] = ()) -> object:
    """Poll ``check`` until it returns something truthy; fail with the services' logs otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        for service in services:
            service.check_alive()
        with contextlib.suppress(Exception):
            value = check()
            if value:
                return value
        if time.monotonic() > deadline:
            logs = "\n\n".join(f"--- {s.name} ({s.log}):\n{tail(s.log)}" for s in services)
            raise ServiceError(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")
        time.sleep(0.5)


def spark_env(base: Path) -> dict[str, str]:
    """Environment for Spark daemons and drivers: loopback only, logs and scratch space under ``base``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INCREMENTAL_ASSETS_", "SPARK_", "PYSPARK_"))}
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP=LOOPBACK,  # bind every Spark socket and web UI to loopback
        SPARK_LOCAL_DIRS=str(base / "spark-local"),
        SPARK_LOG_DIR=str(base / "logs"),
        SPARK_PID_DIR=str(base / "pids"),
        PYSPARK_PYTHON=sys.executable,
        TZ="UTC",
    )
    (base / "spark-local").mkdir(parents=True, exist_ok=True)
    return env


# -- Spark standalone ------------------------------------------------------------------------


@dataclass
class StandaloneCluster:
    master_url: str
    webui_url: str
    worker_dirs: list[Path]
    services: list[Service] = field(default_factory=list)

    def state(self) -> dict:
        with urllib.request.urlopen(self.webui_url + "/json/", timeout=5) as response:
            return json.load(response)

    def executor_logs(self) -> dict[str, list[Path]]:
        """Per worker, the stderr files of the executors it launched (``<work dir>/<app>/<id>/stderr``)."""
        return {str(d): sorted(d.glob("app-*/*/stderr")) for d in self.worker_dirs}


@contextlib.contextmanager
def standalone_cluster(
    base: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g", timeout: float = 120
) -> Iterator[StandaloneCluster]:
    """A master and ``workers`` workers on loopback; stopped (workers first) when the block exits."""
    env = spark_env(base)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port, ui = free_port(), free_port()
    cluster = StandaloneCluster(f"spark://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{ui}", [])
    master_env = dict(env, SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")  # no fixed-port REST server
    try:
        master = Service(
            "spark-master",
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                LOOPBACK,
                "--port",
                str(port),
                "--webui-port",
                str(ui),
            ],
            master_env,
            base / "logs" / "master.log",
        )
        cluster.services.append(master)
        wait_for(
            lambda: cluster.state().get("status") == "ALIVE",
            timeout=timeout,
            what="the Spark master",
            services=cluster.services,
        )
        for i in range(workers):
            work_dir = base / f"worker-{i + 1}"
            work_dir.mkdir(parents=True, exist_ok=True)
            cluster.worker_dirs.append(work_dir)
            cluster.services.append(
                Service(
                    f"spark-worker-{i + 1}",
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        LOOPBACK,
                        "--webui-port",
                        str(free_port()),
                        "--cores",
                        str(cores),
                        "--memory",
                        memory,
                        "--work-dir",
                        str(work_dir),
                        cluster.master_url,
                    ],
                    env,
                    base / "logs" / f"worker-{i + 1}.log",
                )
            )

        def all_registered() -> bool:
            return sum(1 for w in cluster.state()["workers"] if w["state"] == "ALIVE") == workers

        wait_for(all_registered, timeout=timeout, what=f"{workers} workers to register", services=cluster.services)
        yield cluster
    finally:
        for service in reversed(cluster.services):
            service.stop()


# -- Spark Connect ---------------------------------------------------------------------------


@dataclass
class ConnectServer:
    url: str
    event_log_dir: Path
    service: Service


@contextlib.contextmanager
def connect_server(
    base: Path, *, master: str = "local[2]", conf: Mapping[str, str] | None = None, timeout: float = 120
) -> Iterator[ConnectServer]:
    """A Spark Connect server on loopback (its own driver JVM); stopped when the block exits."""
    env = spark_env(base)
    port = free_port()
    events = base / "events"
    events.mkdir(parents=True, exist_ok=True)
    settings = {
        "spark.connect.grpc.binding.address": LOOPBACK,
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.eventLog.enabled": "true",  # the server's own record of what it ran, for the test to read
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",
        **(conf or {}),
    }
    argv = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--name",
        "Spark Connect server",
        "--master",
        master,
    ]
    for key, value in settings.items():
        argv += ["--conf", f"{key}={value}"]
    service = Service("spark-connect", argv, env, base / "logs" / "connect.log")
    try:
        wait_for(lambda: port_open(port), timeout=timeout, what="the Spark Connect server", services=[service])
        yield ConnectServer(f"sc://{LOOPBACK}:{port}", events, service)
    finally:
        service.stop()


# -- PostgreSQL ------------------------------------------------------------------------------


def postgres_bindir() -> Path | None:
    """The folder with initdb and pg_ctl: on PATH, or Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return Path(candidates[-1]).parent if candidates else None


def postgres_unavailable_reason() -> str | None:
    """Why this machine cannot start a PostgreSQL server (None when it can)."""
    if postgres_bindir() is None:
        return (
            "no PostgreSQL server binaries (initdb/pg_ctl): install Debian's postgresql package "
            "(scripts/ci-services.sh does)"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root without runuser to start the server as the 'postgres' user"
    return None


@dataclass
class PostgresServer:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str
    data_dir: Path
    log: Path

    def env(self) -> dict[str, str]:
        """What deploy/dagster.yaml reads: connection settings from the environment."""
        return {
            "DAGSTER_PG_HOST": self.host,
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_USERNAME": self.user,
            "DAGSTER_PG_PASSWORD": self.password,
            "DAGSTER_PG_DB": self.database,
        }

    def connect(self, database: str | None = None):
        import psycopg2

        return psycopg2.connect(
            host=self.host, port=self.port, user=self.user, password=self.password, dbname=database or self.database
        )

    def query(self, sql: str, params: Sequence = ()) -> list[tuple]:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall()
        finally:
            conn.close()


def _kill_postmaster(data: Path) -> None:
    """Last resort when pg_ctl cannot stop the server: SIGKILL the pid in its postmaster.pid."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int((data / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def postgres_server(
    *, database: str = "dagster", user: str = "dagster", timeout: float = 60
) -> Iterator[PostgresServer]:
    """A fresh PostgreSQL cluster on 127.0.0.1 (random port, random password); deleted afterwards."""
    reason = postgres_unavailable_reason()
    if reason:
        raise ServiceError(reason)
    bindir = postgres_bindir()
    assert bindir is not None
    as_root = os.geteuid() == 0
    # Not under pytest's tmp dir: the server's user must be able to reach its data folder.
    base = Path(tempfile.mkdtemp(prefix="ia-postgres-"))
    data, sockets, log, pwfile = base / "data", base / "sockets", base / "postgres.log", base / "pwfile"
    password = secrets.token_urlsafe(24)
    sockets.mkdir()
    pwfile.write_text(password + "\n")
    pwfile.chmod(0o600)
    if as_root:
        owner = pwd.getpwnam("postgres")
        for path in (base, sockets, pwfile):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    else:
        prefix = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(LC_ALL="C.UTF-8", LANG="C.UTF-8", TZ="UTC")
    port = free_port()
    started = False

    def run(argv: list[str], what: str) -> None:
        done = subprocess.run(
            prefix + argv, env=env, cwd=base, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise ServiceError(
                f"{what} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}\n{tail(log)}"
            )

    try:
        run(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                user,
                f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256",
                "--auth-local=scram-sha-256",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ],
            "initdb",
        )
        pwfile.unlink()
        options = (
            f"-c listen_addresses={LOOPBACK} -p {port} -c unix_socket_directories={sockets} -c fsync=off -c "
            "full_page_writes=off"
        )
        run(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(log),
                "-o",
                options,
                "-w",
                "-t",
                str(int(timeout)),
                "start",
            ],
            "pg_ctl start",
        )
        started = True
        server = PostgresServer(LOOPBACK, port, user, password, database, data, log)
        conn = server.connect("postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{database}"')
        finally:
            conn.close()
        yield server
    finally:
        if started:
            try:
                run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "30", "stop"], "pg_ctl stop")
            except Exception:
                _kill_postmaster(data)
        shutil.rmtree(base, ignore_errors=True)
