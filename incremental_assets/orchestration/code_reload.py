"""Asking Dagster to reload the code location the automation sensor runs in, as "Reload definitions" does.

``dagster dev`` (and any deployment serving code with ``dagster code-server start``) runs the project's
definitions in a ``dagster api grpc`` process started by a code server proxy. The proxy's ``ReloadCode``
starts a fresh process that imports the project again, then retires the old one once its work is done;
the webserver and the daemon poll the proxy's server id every second and load the new definitions when
it changes. So the sensor, noticing edited model files, asks its own proxy to reload: the UI then shows
the new code versions without a click.

A process not started by such a proxy (``dagster-daemon run -m ...`` or ``dagster-webserver -m ...``
each start a plain ``dagster api grpc``, which cannot reload) gets ``None`` back: the automation still
plans from the edited files, and the UI needs "Reload definitions".
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

log = logging.getLogger(__name__)

RELOAD_TIMEOUT = 180  # seconds the proxy may take to start the new process


@dataclass(frozen=True)
class CodeServer:
    """Where the code server proxy of this process listens."""

    pid: int
    socket: str | None = None
    host: str = "localhost"
    port: int | None = None

    def __str__(self) -> str:
        return f"code server {self.pid} ({self.socket or f'{self.host}:{self.port}'})"


def parse_code_server(argv: list[str], pid: int) -> CodeServer | None:
    """The proxy's address from its command line (``... dagster code-server start --socket S`` or
    ``--port P [--host H]``), or None when the command is not a code server proxy.

    >>> parse_code_server(["python", "-m", "dagster", "code-server", "start", "--socket", "/tmp/s", "--heartbeat"], 7)
    CodeServer(pid=7, socket='/tmp/s', host='localhost', port=None)
    >>> parse_code_server(["dagster", "code-server", "start", "-p", "4000", "-h", "0.0.0.0"], 7).port
    4000
    >>> parse_code_server(["python", "-m", "dagster", "api", "grpc", "--socket", "/tmp/s"], 7) is None
    True
    """
    joined = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv))
    if "code-server start" not in joined:
        return None
    values: dict[str, str] = {}
    for flag, value in zip(argv, argv[1:]):
        if flag.startswith("--") and "=" in flag:
            name, _, val = flag.partition("=")
            values.setdefault(name, val)
        elif flag in ("--socket", "-s", "--port", "-p", "--host", "-h"):
            values.setdefault(flag, value)
    socket = values.get("--socket") or values.get("-s")
    port = values.get("--port") or values.get("-p")
    host = values.get("--host") or values.get("-h") or "localhost"
    if socket:
        return CodeServer(pid, socket=socket)
    if port and port.isdigit():
        return CodeServer(pid, host="localhost" if host in ("0.0.0.0", "::") else host, port=int(port))
    return None


def own_code_server() -> CodeServer | None:
    """The code server proxy that started this process (Linux: read from /proc), or None."""
    ppid = os.getppid()
    try:
        with open(f"/proc/{ppid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None
    return parse_code_server(argv, ppid)


def request_reload(server: CodeServer) -> None:
    """Ask the proxy to reload, in the background: the proxy replaces this very process once the new
    one is up, so the caller (a sensor tick) must return first."""

    def reload() -> None:
        from dagster._grpc.client import DagsterGrpcClient

        try:
            client = DagsterGrpcClient(port=server.port, socket=server.socket, host=server.host)
            client.reload_code(timeout=RELOAD_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - the UI then needs "Reload definitions"; the automation goes on
            log.warning("could not ask %s to reload the definitions: %s", server, exc)

    threading.Thread(target=reload, name="incremental-assets-reload", daemon=True).start()
