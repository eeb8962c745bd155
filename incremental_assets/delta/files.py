"""Where a table lives: its filesystem, local paths, the data files of a file source, and which host and
process wrote a file."""

from __future__ import annotations

import hashlib
import os
import re
import socket
from pathlib import Path
from typing import Mapping

from pyarrow import fs as pafs

from incremental_assets.errors import StorageError
from incremental_assets.model.settings import (
    is_local,  # noqa: F401 (the delta package's name for it)
    read_env_settings,
)

# Where the AWS SDKs (delta-rs, pyarrow) find credentials, besides an EC2 instance role.
_AWS_CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


def check_credentials(uri: str, environ: Mapping[str, str] | None = None) -> None:
    """Refuse an ``s3://`` location when no AWS credentials are configured, before any client looks for
    them: the SDKs would otherwise query the EC2 instance metadata service with retries and warnings, then
    fail with "Generic S3 error". On an instance role, ``AWS_EC2_METADATA_DISABLED=false`` says so.

    >>> check_credentials("s3://bucket/w", environ={})
    Traceback (most recent call last):
    ...
    incremental_assets.errors.StorageError: s3://bucket/w is on S3, but no AWS credentials are configured: ...
    >>> check_credentials("s3://bucket/w", environ={"AWS_PROFILE": "prod"})
    """
    if not uri.startswith(("s3://", "s3a://")):
        return
    env = read_env_settings().credentials if environ is None else environ
    if any(env.get(name) for name in _AWS_CREDENTIAL_VARIABLES):
        return
    if (
        env.get("AWS_SKIP_SIGNATURE", "").lower() == "true"
        or env.get("AWS_EC2_METADATA_DISABLED", "").lower() == "false"
    ):
        return
    home = Path(env.get("HOME") or Path.home())
    files = (
        env.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials",
        env.get("AWS_CONFIG_FILE") or home / ".aws" / "config",
    )
    if environ is None and any(Path(f).is_file() for f in files):
        return
    raise StorageError(
        f"{uri} is on S3, but no AWS credentials are configured: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
        "(and AWS_ENDPOINT_URL for an S3-compatible store) or AWS_PROFILE; on an EC2 instance role set "
        "AWS_EC2_METADATA_DISABLED=false; for a public bucket AWS_SKIP_SIGNATURE=true"
    )


def short_reason(exc: BaseException) -> str:
    """An object store's multi-line error chain as one line: its first and its last (root) cause."""
    lines = [re.sub(r"\x1b\[[0-9;]*m|↳", "", line).strip() for line in str(exc).splitlines()]
    lines = [line for line in lines if line and not re.fullmatch(r"\d+: .*|at .*", line)]
    if not lines:
        return type(exc).__name__
    return lines[0] if len(lines) == 1 else f"{lines[0]}: {lines[-1]}"


def commit_name(version: int) -> str:
    """The name of a table's commit file ``version`` in its ``_delta_log`` folder."""
    return f"{version:020d}.json"


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    if "://" in uri:
        check_credentials(uri)
        try:
            return pafs.FileSystem.from_uri(uri)
        except OSError as exc:
            raise StorageError(f"cannot open {uri}: {short_reason(exc)}") from None
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


def local_path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def source_data_files(location: str) -> list[str]:
    """Every data file of a local file source, sorted: the file itself for a one-file source, else every
    file under the folder, skipping hidden and ``_``-prefixed entries at any depth as Spark does (``_SUCCESS``,
    ``.crc`` files, a ``_temporary`` folder). The one rule the Spark reader and the source watch share.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("d=1/a.parquet", "d=1/.a.parquet.crc", "_temporary/0/b.parquet", "_SUCCESS", "c.parquet"):
    ...     (root / name).parent.mkdir(parents=True, exist_ok=True); (root / name).touch()
    >>> [f[len(str(root)) + 1:] for f in source_data_files(str(root))]
    ['c.parquet', 'd=1/a.parquet']
    >>> source_data_files(str(root / "c.parquet")) == [str(root / "c.parquet")]
    True
    """
    return sorted(info.path for info in _data_file_infos(location))


def source_files_state(location: str) -> tuple[tuple[str, int | None, int | None], ...]:
    """Each data file of a local file source with its modification time (ns) and size: a new file, one
    rewritten or one still growing changes it. One listing of the folder, no file opened."""
    return tuple(sorted((info.path, info.mtime_ns, info.size) for info in _data_file_infos(location)))


def _data_file_infos(location: str) -> list[pafs.FileInfo]:
    location = location.removeprefix("file://")
    if os.path.isfile(location):
        return pafs.LocalFileSystem().get_file_info([location])
    selector = pafs.FileSelector(location, recursive=True, allow_not_found=True)
    out = []
    for info in pafs.LocalFileSystem().get_file_info(selector):
        relative = info.path[len(location.rstrip("/")) + 1 :]
        if info.type != pafs.FileType.File or any(part.startswith((".", "_")) for part in relative.split("/")):
            continue
        out.append(info)
    return out
