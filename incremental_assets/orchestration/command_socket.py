"""The command server's socket, seen from a caller: where it is, whom it trusts, what a request carries.

``incremental-assets spark start`` keeps a command server next to the project's Spark server (a process with
the product's libraries imported, :mod:`incremental_assets.cli.command_process`). A caller, the
``incremental-assets`` command (:mod:`incremental_assets.cli.forward`) or the project's run launcher
(:mod:`incremental_assets.orchestration.run_launcher`), connects to its Unix socket, sends its stdin, stdout
and stderr (the descriptors themselves) and a request: what to run (a command's arguments, or a Dagster run),
its working directory, environment, umask, ``sys.path`` and a fingerprint of its copy of the package. The
server answers ``pid N`` (the forked copy that runs it) or refuses (``other code``), and for a command the
copy's exit code follows (``exit N``). Only the standard library and the settings module are imported here.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import struct
import sys
import tempfile
from pathlib import Path

from incremental_assets.model.settings import child_environment

PACKAGE = Path(__file__).resolve().parent.parent
HEADER = struct.Struct("!Q")
RECORD_FILE = "command-server.json"
COMMAND, DAGSTER_RUN = "command", "dagster-run"
PROCESS_MODULE = "incremental_assets.cli.command_process"


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


def own_folder(folder: Path) -> bool:
    """Only a folder of this user that nobody else can enter is trusted with the environment."""
    try:
        info = folder.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077 == 0


def is_command_process(pid: int) -> bool:
    """``pid`` is a running command server or one of its copies (not ended, not a PID another program reuses)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X") and PROCESS_MODULE.encode() in command


def record_path(state: Path) -> Path:
    return state / RECORD_FILE


def read_record(state: Path) -> dict | None:
    """The running server's PID, socket and code fingerprint, as it wrote them once it listened."""
    try:
        record = json.loads(record_path(state).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def connect(path: Path) -> socket.socket | None:
    """A connection to the server at ``path``; None when there is none, or its folder is not private."""
    if not own_folder(path.parent) or not path.exists():
        return None
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(str(path))
    except OSError:
        client.close()
        return None
    return client


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


def send_request(client: socket.socket, kind: str, argv: list[str], label: str | None = None) -> None:
    """Send this process's stdin, stdout and stderr and what the copy needs to run ``argv`` as it would here
    (``label``: how the server's log names it, by default the arguments)."""
    request = {
        "kind": kind,
        "argv": argv,
        "label": label or " ".join(argv),
        "cwd": os.getcwd(),
        "env": child_environment({}),
        "umask": _umask(),
        "path": sys.path,
        "code": code_fingerprint(),
    }
    payload = json.dumps(request).encode()
    socket.send_fds(client, [b"R"], [0, 1, 2])
    client.sendall(HEADER.pack(len(payload)) + payload)


def read_line(client: socket.socket, pending: bytearray) -> str | None:
    """The server's next line (``pid N``, ``exit N``, ``other code``); None when it closed the connection."""
    while b"\n" not in pending:
        chunk = client.recv(4096)
        if not chunk:
            return None
        pending.extend(chunk)
    line, _, rest = bytes(pending).partition(b"\n")
    pending[:] = rest
    return line.decode()


def started_copy(
    client: socket.socket, kind: str, argv: list[str], pending: bytearray, label: str | None = None
) -> int | None:
    """The PID of the server's copy that runs the request; None when it refused or went away."""
    try:
        send_request(client, kind, argv, label)
        first = read_line(client, pending)
    except OSError:
        return None
    if first is None or not first.startswith("pid "):
        return None
    return int(first.split()[1])
