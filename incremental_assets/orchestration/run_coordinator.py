"""The project's run queue: Dagster's, with each run tagged by whether it starts a Spark of its own.

A run started while the project's long-lived Spark is up (``incremental-assets spark start``) sends its
queries to that one server: it starts no JVM, and spends much of its time waiting for the server, so two
such runs at once overlap one's Dagster bookkeeping with the other's Spark work. A run started without it
starts a local Spark of its own (a JVM with ``local[N]``'s cores), and two of those at once on a small
machine only make both slower. :class:`ProjectRunCoordinator` is Dagster's ``QueuedRunCoordinator`` that,
when a run is queued (from the UI, a sensor, a schedule, a backfill or a retry), tags it ``server`` or
``own`` (:data:`SPARK_TAG`); the project's ``dagster.yaml`` limits the runs tagged ``own`` to
``max_concurrent_runs`` and all runs to ``max_concurrent_runs_on_server``.

The automation may request a run in the same tick as the upstream runs it reads, to wait for them in its
run (:data:`~.tags.AFTER_UPSTREAM_TAG` ``true``). Such a run holds a slot while it waits, so the project's
``dagster.yaml`` gives those runs slots of their own, as many again as the others (the coordinator tags
every other run ``false``): a waiting run never takes the slot of a run it waits for. Without the
long-lived Spark such a run is tagged :data:`OWN_SPARK_AFTER_UPSTREAM`, outside the limit of the runs with a
Spark of their own: its JVM starts while it waits (most of a short run's time) and computes once the runs
it follows have. :func:`runs_may_follow` tells the sensor whether the queue is set up so.

The tag says what the run will find when it starts, judged when it is queued: a server stopped in between
leaves a run tagged ``server`` that then starts its own Spark (it still runs, with less room), and a server
started in between leaves a run tagged ``own`` held to the smaller limit.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from dagster import QueuedRunCoordinator
from dagster._core.run_coordinator.base import SubmitRunContext
from dagster._core.storage.dagster_run import DagsterRun

from incremental_assets.orchestration.tags import AFTER_UPSTREAM_TAG
from incremental_assets.spark.connect_server import server_up_in

SPARK_TAG = "incremental_assets/spark"
ON_SERVER = "server"  # the run's queries go to the project's long-lived Spark
OWN_SPARK = "own"  # the run starts a Spark of its own
OWN_SPARK_AFTER_UPSTREAM = "own-after-upstream"  # ... and waits for upstream runs before it computes


def spark_of_new_run(instance_root: Path) -> str:
    """Which Spark a run queued now will use: the long-lived server's, when it is up, else its own."""
    return ON_SERVER if server_up_in(instance_root) else OWN_SPARK


class ProjectRunCoordinator(QueuedRunCoordinator):
    """Dagster's run queue, with every run it queues tagged by the Spark it will use (:data:`SPARK_TAG`)."""

    def submit_run(self, context: SubmitRunContext) -> DagsterRun:
        run = context.dagster_run
        spark = spark_of_new_run(Path(self._instance.root_directory))
        if spark == OWN_SPARK and run.tags.get(AFTER_UPSTREAM_TAG) == "true":
            spark = OWN_SPARK_AFTER_UPSTREAM
        added = {AFTER_UPSTREAM_TAG: "false"} if AFTER_UPSTREAM_TAG not in run.tags else {}
        if run.tags.get(SPARK_TAG) != spark:  # a retry carries its first run's tag: judged again
            added[SPARK_TAG] = spark
        if added:
            self._instance.add_run_tags(run.run_id, added)
            run = self._instance.get_run_by_id(run.run_id) or run
        return super().submit_run(SubmitRunContext(run, context.workspace))


def runs_may_follow(instance: dg.DagsterInstance) -> bool:
    """Whether a run may be queued to wait in its run for upstream runs queued with it: the instance's queue
    gives such runs (:data:`~.tags.AFTER_UPSTREAM_TAG` ``true``) slots that the others (``false``) never need."""
    queue = instance.get_concurrency_config().run_queue_config  # the `concurrency` section's, or the queue's
    if queue is None or not isinstance(instance.run_coordinator, ProjectRunCoordinator):
        return False
    limits = {
        str(limit.get("value")).lower(): int(limit.get("limit") or 0)
        for limit in queue.tag_concurrency_limits
        if limit.get("key") == AFTER_UPSTREAM_TAG
    }
    waiting, working = limits.get("true", 0), limits.get("false", 0)
    return waiting >= 1 and working >= 1 and waiting + working <= queue.max_concurrent_runs
