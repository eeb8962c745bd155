"""The project's command server, started and stopped: ``spark start`` starts it next to the Spark server.

The server is a process with the CLI's libraries imported that runs each command in a forked copy of itself
(:mod:`incremental_assets.cli.command_process`; the caller's side is :mod:`incremental_assets.cli.forward`).
It writes its record (PID, socket, code fingerprint) into the project's state folder once it listens, and it
ends by itself when the project's Spark server does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from incremental_assets.orchestration.command_socket import (
    PROCESS_MODULE,
    code_fingerprint,
    is_command_process,
    read_record,
)

LOG_FILE = "command-server.log"


def start(project: Path, spark_pid: int, state: Path, *, timeout: float = 120.0) -> int | None:
    """Start the project's command server unless one of this code runs already; its PID, or None when it
    did not come up within ``timeout`` seconds (commands then run in their own processes, as without it)."""
    record = read_record(state)
    if record and is_command_process(int(record["pid"])):
        if record.get("code") == code_fingerprint() and record.get("project") == str(project):
            return int(record["pid"])
        stop(state)
    with (state / LOG_FILE).open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", PROCESS_MODULE, str(project), str(spark_pid), str(state)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return None
        if (read_record(state) or {}).get("pid") == process.pid:
            return process.pid
        time.sleep(0.1)
    process.kill()
    process.wait()
    return None


def stop(state: Path, timeout: float = 10.0) -> int | None:
    """Stop the recorded command server (commands running in its copies go on); its PID, None if none ran."""
    record = read_record(state)
    if not record or not is_command_process(pid := int(record["pid"])):
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while is_command_process(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if is_command_process(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pid
