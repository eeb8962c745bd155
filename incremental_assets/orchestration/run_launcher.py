"""The project's run launcher: the daemon's runs start in the command server when it runs, else as Dagster does.

Dagster's default launcher asks the code server to start each run, and the code server starts it in a fresh
interpreter (``multiprocessing`` spawn) that imports Dagster, Spark's client and the product again: 2-4 s of
a run that does ~1 s of work on the long-lived Spark. While ``incremental-assets spark start`` keeps the
project's command server up (its record in the instance's folder), :class:`ProjectRunLauncher` hands the run
to it instead: a forked copy with those libraries imported runs ``dagster api execute_run`` for it, the
command Dagster's container launchers run, with the daemon's environment and working directory; the
copy loads the project's definitions itself, as every run does. Without the server (or when it refuses, e.g.
it has another copy of the package) the run goes to the code server as before.

The copy's PID is a tag of the run: ``terminate`` interrupts it (Dagster marks the run canceled), and the
daemon's run monitoring asks :meth:`ProjectRunLauncher.check_run_worker_health`, so a copy that died (killed,
out of memory) fails its run, which the project's run retries start again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

from dagster import DefaultRunLauncher
from dagster._core.launcher.base import CheckRunHealthResult, LaunchRunContext, WorkerStatus
from dagster._core.storage.dagster_run import DagsterRun
from dagster._grpc.types import ExecuteRunArgs
from dagster._serdes import serialize_value

from incremental_assets.model.settings import read_env_settings
from incremental_assets.orchestration.command_socket import (
    DAGSTER_RUN,
    connect,
    is_command_process,
    read_record,
    started_copy,
)

WORKER_PID_TAG = "incremental_assets/run_worker_pid"


def execute_run(argv: list[str]) -> int:
    """In the command server's copy: the ``dagster`` command with ``argv`` (``api execute_run ARGS``)."""
    from dagster._cli import cli

    cli.main(args=argv, prog_name="dagster", auto_envvar_prefix="DAGSTER")
    return 0


class ProjectRunLauncher(DefaultRunLauncher):
    """Dagster's default launcher, with runs started in the project's command server while it is up."""

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        pid = self._forked(run)
        if pid is None:
            super().launch_run(context)
            return
        self._instance.add_run_tags(run.run_id, {WORKER_PID_TAG: str(pid)})

    def _forked(self, run: DagsterRun) -> int | None:
        origin = run.job_code_origin
        if origin is None or os.path.realpath(origin.executable_path) != os.path.realpath(sys.executable):
            return None  # a code location of another Python: its code server starts the run
        if not read_env_settings().command_server:
            return None
        record = read_record(Path(self._instance.root_directory))
        client = connect(Path(record["socket"])) if record and record.get("socket") else None
        if client is None:
            return None
        args = ExecuteRunArgs(job_origin=origin, run_id=run.run_id, instance_ref=self._instance.get_ref())
        with client:
            argv = ["api", "execute_run", serialize_value(args)]
            return started_copy(client, DAGSTER_RUN, argv, bytearray(), f"dagster run {run.run_id} ({run.job_name})")

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or WORKER_PID_TAG not in run.tags:
            return super().terminate(run_id)
        if run.is_finished:
            return False
        self._instance.report_run_canceling(run)
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(run.tags[WORKER_PID_TAG]), signal.SIGINT)  # the run's interrupt: it ends canceled
            return True
        return False

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        pid = run.tags.get(WORKER_PID_TAG)
        if pid is None:  # the code server started it and reports its end, as with Dagster's default launcher
            return CheckRunHealthResult(WorkerStatus.RUNNING, "started by the code server, which watches it")
        if is_command_process(int(pid)):
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        return CheckRunHealthResult(WorkerStatus.FAILED, f"the run's process (pid {pid}) is gone")
