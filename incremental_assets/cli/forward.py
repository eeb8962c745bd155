"""Hand a command to the project's command server, a process that has the CLI's libraries imported already.

Python's imports are most of a short command's time (Dagster, its SQL storage, pandas, pyarrow, the Spark
Connect client: 1.5-3 s). While the project's long-lived Spark runs, ``incremental-assets spark start`` also
keeps a process with all of them imported (:mod:`incremental_assets.cli.command_process`). The
``incremental-assets`` command first tries it: it sends its arguments, working directory, environment and
its stdin, stdout and stderr (the descriptors themselves) over a Unix socket; the server forks a copy of
itself that runs exactly this command as the command would have run on its own, and the command's exit code
comes back. Ctrl-C and other signals are passed on; a command whose caller is killed is killed too.
The copy takes the caller's ``sys.path`` too, so imports a command makes (a project's Python models) find what
they would find in the command's own process.

Anything amiss (no server, another version of the code, a socket that is not the user's own) and the
command runs in its own process as always. Only the standard library and the settings module (~20 ms) are
imported here.
``INCREMENTAL_ASSETS_COMMAND_SERVER=0`` turns the hand-over off.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import struct
import sys
import tempfile
from pathlib import Path

from incremental_assets.model.settings import child_environment, read_env_settings

PACKAGE = Path(__file__).resolve().parent.parent
# Commands that manage the servers themselves always run in their own process.
OWN_PROCESS_COMMANDS = {"spark"}
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
HEADER = struct.Struct("!Q")


def socket_folder() -> Path:
    return Path(tempfile.gettempdir()) / f"incremental-assets-{os.getuid()}"


def socket_path(project: str | os.PathLike[str]) -> Path:
    """The project's command server socket: a short path (Unix sockets allow ~100 bytes), one per folder."""
    key = hashlib.sha256(str(Path(project).resolve()).encode()).hexdigest()[:24]
    return socket_folder() / f"{key}.sock"


def code_fingerprint() -> str:
    """What the server's imported code is: the interpreter, every module file of the package (path, size,
    modification time) and the site-packages folder (it changes when a package is installed or removed)."""
    digest = hashlib.sha256(sys.executable.encode())
    for path in sorted(PACKAGE.rglob("*.py")):
        info = path.stat()
        digest.update(f"{path}:{info.st_size}:{info.st_mtime_ns}\n".encode())
    for entry in sys.path:
        if entry.endswith("site-packages") and os.path.isdir(entry):
            digest.update(f"{entry}:{os.stat(entry).st_mtime_ns}\n".encode())
    return digest.hexdigest()


def project_argument(argv: list[str]) -> str:
    """The folder whose server serves the command: the first ``--project``, else the current directory."""
    for index, token in enumerate(argv):
        if token == "--project" and index + 1 < len(argv):
            return argv[index + 1]
        if token.startswith("--project="):
            return token.split("=", 1)[1]
    return "."


def own_folder(folder: Path) -> bool:
    """Only a folder of this user that nobody else can enter is trusted with the environment."""
    try:
        info = folder.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077 == 0


def _connect(argv: list[str]) -> socket.socket | None:
    if not read_env_settings().command_server:
        return None
    if not argv or argv[0] in OWN_PROCESS_COMMANDS:
        return None
    path = socket_path(project_argument(argv))
    if not own_folder(path.parent) or not path.exists():
        return None
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(str(path))
    except OSError:
        client.close()
        return None
    return client


def _read_line(client: socket.socket, pending: bytearray) -> str | None:
    while b"\n" not in pending:
        chunk = client.recv(4096)
        if not chunk:
            return None
        pending.extend(chunk)
    line, _, rest = bytes(pending).partition(b"\n")
    pending[:] = rest
    return line.decode()


def _send_request(client: socket.socket, argv: list[str]) -> None:
    request = {
        "argv": argv,
        "cwd": os.getcwd(),
        "env": child_environment({}),
        "umask": _umask(),
        "path": sys.path,
        "code": code_fingerprint(),
    }
    payload = json.dumps(request).encode()
    socket.send_fds(client, [b"R"], [0, 1, 2])
    client.sendall(HEADER.pack(len(payload)) + payload)


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


def forwarded(argv: list[str]) -> int | None:
    """The command's exit code when the project's command server ran it; None when it must run here."""
    client = _connect(argv)
    if client is None:
        return None
    pending = bytearray()
    try:
        _send_request(client, argv)
        first = _read_line(client, pending)
    except OSError:
        client.close()
        return None
    if first is None or not first.startswith("pid "):
        client.close()
        return None  # the server refused (its code is another version) or went away: run here
    pid = int(first.split()[1])
    for number in FORWARDED_SIGNALS:
        signal.signal(number, lambda received, _frame: _pass_on(pid, received))
    try:
        last = _read_line(client, pending)
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
