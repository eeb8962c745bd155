"""The warm-up of a freshly started Spark Connect server with the project's own models.

A new server's JVM has not compiled the code its first large query runs (the parquet reader, the joins, the
partitioned writer): that query runs about twice as long as the next one. ``spark start`` therefore runs the
project's incremental SQL models over their first few days through the server, into a scratch warehouse, a
scratch Dagster home and a scratch analysis cache in a folder under the project's state folder, which is
then deleted: the project's tables, its Dagster instance and its cache are not touched.

The run is the CLI's ``run`` in a child process whose settings point at the scratch folder (the environment
overrides of :mod:`incremental_assets.load.settings`), so nothing of it (Dagster's instance, Spark
sessions, the analysis cache) lives on in this process. Python models, weekly and coarser models, models
with pre- or post-statements (they may write outside the warehouse), and models that depend on one of those
or on a model that is not incremental, are left out; a project with ``before_all`` / ``after_all``
statements is not warmed up (they would run a second time). Any failure skips the warm-up, it never fails
``spark start``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from incremental_assets.model.intervals import IntervalUnit
from incremental_assets.model.python_model import PythonModel
from incremental_assets.model.settings import CACHE_DIR_ENV, child_environment

DEFAULT_DAYS = 7
TIMEOUT_SECONDS = 900.0
SCRATCH_PREFIX = "warm-up-"


@dataclass(frozen=True)
class WarmUp:
    """What the warm-up did: its seconds, and the reason when it was skipped."""

    seconds: float
    models: int = 0
    skipped: str | None = None

    def line(self) -> str:
        if self.skipped:
            return f"warm-up skipped: {self.skipped}"
        return f"warmed up with {self.models} model(s) in {self.seconds:.1f}s"


def warm_up_models(project) -> list:
    """The hourly and daily incremental SQL models without pre- or post-statements whose upstream models are
    all such models too, upstreams first (a window of a few days holds no whole week or month)."""
    chosen: set[str] = set()
    for model in project.ordered():
        upstreams = [u.name for u in project.upstream_models(model)]
        sql = model.is_incremental and not isinstance(model, PythonModel)
        statements = getattr(model, "pre_statements", ()) or getattr(model, "post_statements", ())
        if (
            sql
            and not statements
            and model.unit in (IntervalUnit.HOUR, IntervalUnit.DAY)
            and all(u in chosen for u in upstreams)
        ):
            chosen.add(model.name)
    return [m for m in project.ordered() if m.name in chosen]


def _scratch_env(url: str, scratch: Path) -> dict[str, str]:
    env = child_environment(
        {
            "INCREMENTAL_ASSETS_SPARK_REMOTE": url,
            "INCREMENTAL_ASSETS_WAREHOUSE": str(scratch / "warehouse"),
            "DAGSTER_HOME": str(scratch / "dagster"),
            CACHE_DIR_ENV: str(scratch / "cache"),
        }
    )
    return env


def _run(command: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, str]:
    """The child's exit code and its last line of output; stopped (by its process group) on timeout."""
    child = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return -1, f"did not finish in {timeout:.0f}s"
    lines = [line for line in output.splitlines() if line.strip()]
    return child.returncode, lines[-1].strip() if lines else ""


def warm_up_with_models(project_dirs: list[Path], state: Path, url: str, *, days: int = DEFAULT_DAYS) -> WarmUp:
    """Run the project's models over their first ``days`` days through the server at ``url``, into a scratch
    folder under ``state`` that is deleted at the end; never raises."""
    began = time.monotonic()
    scratch = state / f"{SCRATCH_PREFIX}{os.getpid()}"
    try:
        from incremental_assets.load.project import load_project

        project = load_project(project_dirs if len(project_dirs) > 1 else project_dirs[0])
        if project.before_all or project.after_all:
            return WarmUp(0.0, skipped="the project's before_all / after_all statements would run a second time")
        models = warm_up_models(project)
        starts = [m.start for m in models if m.start is not None]
        if not starts:
            return WarmUp(0.0, skipped="no incremental SQL model with a start date")
        first = IntervalUnit.DAY.floor(min(starts))  # on every chosen model's interval boundaries
        command = [sys.executable, "-m", "incremental_assets.cli", "run", *(m.name for m in models)]
        command += ["--start", first.isoformat(), "--end", (first + timedelta(days=days)).isoformat()]
        for folder in project_dirs:
            command += ["--project", str(folder)]
        scratch.mkdir(parents=True)
        code, last = _run(command, _scratch_env(url, scratch), project.directory, TIMEOUT_SECONDS)
        if code != 0:
            return WarmUp(time.monotonic() - began, skipped=f"its run of the models failed ({last or f'exit {code}'})")
        return WarmUp(time.monotonic() - began, models=len(models))
    except Exception as error:  # noqa: BLE001 - the warm-up only saves time; it never fails `spark start`
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        return WarmUp(time.monotonic() - began, skipped=message)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
