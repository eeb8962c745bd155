"""Where a table lives: its filesystem, local paths, and which host and process wrote a file."""

from __future__ import annotations

import hashlib
import os
import socket

from pyarrow import fs as pafs


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" in uri:
        return pafs.FileSystem.from_uri(uri)
    return pafs.LocalFileSystem(), uri

def host_tag(host: str | None = None) -> str:
    return hashlib.sha1((host or socket.gethostname()).encode()).hexdigest()[:8]

def _proc_stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first); empty without ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []

def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a killed process its parent has not reaped yet does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        pass
    return _proc_stat(pid)[:1] not in (["Z"], ["X"])

def process_started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), to tell it from a later process given the
    same pid; None where ``/proc`` is not available."""
    fields = _proc_stat(pid)
    return fields[19] if len(fields) > 19 else None

def is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")

def local_path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri
