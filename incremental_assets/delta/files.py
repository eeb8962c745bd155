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

def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True

def is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")

def local_path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri
