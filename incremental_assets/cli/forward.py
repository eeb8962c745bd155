"""Hand a command to the project's command server, a process that has the CLI's libraries imported already.

Python's imports are most of a short command's time (Dagster, its SQL storage, pandas, pyarrow, the Spark
Connect client: 1.5-3 s). While the project's long-lived Spark runs, ``incremental-assets spark start`` also
keeps a process with all of them imported (:mod:`incremental_assets.cli.command_process`). The
``incremental-assets`` command first tries it: it sends its arguments, working directory, environment and
its stdin, stdout and stderr (the descriptors themselves) over a Unix socket
(:mod:`incremental_assets.orchestration.command_socket`); the server forks a copy of itself that runs exactly
this command as the command would have run on its own, and the command's exit code comes back. Ctrl-C and
other signals are passed on; a command whose caller is killed is killed too. The copy takes the caller's
``sys.path`` too, so imports a command makes (a project's Python models) find what they would find in the
command's own process.

Anything amiss (no server, another version of the code, a socket that is not the user's own) and the
command runs in its own process as always. Only the standard library and the settings module (~20 ms) are
imported here. ``INCREMENTAL_ASSETS_COMMAND_SERVER=0`` turns the hand-over off.
"""

from __future__ import annotations

import os
import signal
import sys

from incremental_assets.model.settings import read_env_settings
from incremental_assets.orchestration.command_socket import COMMAND, connect, read_line, socket_path, started_copy

# Commands that manage the servers themselves always run in their own process.
OWN_PROCESS_COMMANDS = {"spark"}
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def project_argument(argv: list[str]) -> str:
    """The folder whose server serves the command: the first ``--project``, else the current directory."""
    for index, token in enumerate(argv):
        if token == "--project" and index + 1 < len(argv):
            return argv[index + 1]
        if token.startswith("--project="):
            return token.split("=", 1)[1]
    return "."


def forwarded(argv: list[str]) -> int | None:
    """The command's exit code when the project's command server ran it; None when it must run here."""
    if not argv or argv[0] in OWN_PROCESS_COMMANDS or not read_env_settings().command_server:
        return None
    client = connect(socket_path(project_argument(argv)))
    if client is None:
        return None
    pending = bytearray()
    pid = started_copy(client, COMMAND, argv, pending)
    if pid is None:
        client.close()
        return None  # the server refused (its code is another version) or went away: run here
    for number in FORWARDED_SIGNALS:
        signal.signal(number, lambda received, _frame: _pass_on(pid, received))
    try:
        last = read_line(client, pending)
    finally:
        client.close()
    if last is None or not last.startswith("exit "):
        print(
            f"error: the command's process (pid {pid}) ended without an exit code (fix: run the command again; "
            "INCREMENTAL_ASSETS_COMMAND_SERVER=0 runs it in a process of its own)",
            file=sys.stderr,
        )
        return 1
    return int(last.split()[1])


def _pass_on(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass
