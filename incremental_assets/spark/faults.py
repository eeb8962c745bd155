"""Named stages of a write where a test can kill the process, to prove a crash there loses nothing.

Set ``INCREMENTAL_ASSETS_KILL_AT`` to a stage name (comma-separated for several) and the process sends
itself SIGKILL when it reaches that stage: no ``finally`` block, no atexit handler, no Spark shutdown
runs, exactly like an OOM kill or a pulled plug. Unset (the default), a checkpoint costs one lookup.

Stages of every write:
- ``staging``: Spark is about to write the run's files into its staging folder (a kill while files are
  being written is done from outside, by a test that watches the staging folder fill);
- ``staged``: every file is written, the Delta commit has not been attempted;
- ``committed``: the Delta commit succeeded, Dagster has not recorded the materialization;
- ``recording``: Dagster is writing the materializations of the run's partitions into its event log
  (rows inserted, their transaction not committed).
"""

from __future__ import annotations

import os
import signal

from incremental_assets.model.settings import KILL_AT_ENV, read_env_settings

ENV = KILL_AT_ENV
STAGES = ("staging", "staged", "committed", "recording")


def checkpoint(stage: str) -> None:
    """Die here, at once and uncleanly, when the environment asks for it."""
    if stage in read_env_settings().kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
