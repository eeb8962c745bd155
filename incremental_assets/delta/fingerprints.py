"""What each data file held when it was committed: a fingerprint of its Parquet footer.

A file overwritten with other bytes of the same size, or replaced by another file of the same size (an
interval's file copied over another's), keeps the size the log recorded, so the size check alone cannot
see it. Every commit therefore records, beside its files in the run's staging folder (or a compaction's), the SHA-256 of
each file's Parquet footer (``_ia_footers.json``: file name -> hash; a name starting with ``_`` is never read
as data, nor deleted by ``vacuum``'s file cleanup). The footer holds the file's schema, row groups, row
counts and per-column min/max, so another file's footer differs, and garbage has no footer at all.
Checking a file costs two small reads at its end, not a scan. Files committed without a record (by an
older release, or promoted from elsewhere) are not checked.
"""

from __future__ import annotations

import hashlib
import json
import posixpath

from pyarrow import fs as pafs

from incremental_assets.delta.files import filesystem
from incremental_assets.delta.staging import COMPACT_PREFIX, STAGING_PREFIX

RECORD = "_ia_footers.json"
_TAIL = 8  # a Parquet file ends with the footer's length (4 bytes, little-endian) and b"PAR1"


def footer_hash(fs: pafs.FileSystem, path: str, size: int) -> str | None:
    """The SHA-256 (first 16 hex digits) of the file's Parquet footer; None when it has none."""
    if size < 12:
        return None
    with fs.open_input_file(path) as handle:
        tail = handle.read_at(_TAIL, size - _TAIL)
        if tail[4:] != b"PAR1":
            return None
        length = int.from_bytes(tail[:4], "little")
        if length <= 0 or length > size - 12:
            return None
        return hashlib.sha256(handle.read_at(length, size - _TAIL - length)).hexdigest()[:16]


def record_footers(staging: str) -> None:
    """Write the staging folder's record: each staged Parquet file (path relative to the folder) -> its
    footer's hash. Called just before the commit that makes those files the table's."""
    fs, base = filesystem(staging)
    base = base.rstrip("/")
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    record = {
        info.path[len(base) + 1 :]: footer_hash(fs, info.path, info.size or 0)
        for info in infos
        if info.type == pafs.FileType.File and info.base_name.endswith(".parquet")
    }
    with fs.open_output_stream(f"{base}/{RECORD}") as out:
        out.write(json.dumps(record, sort_keys=True).encode())


class Footers:
    """The recorded footer hashes of a table's files, read once per staging folder."""

    def __init__(self, fs: pafs.FileSystem):
        self.fs = fs
        self.records: dict[str, dict[str, str | None]] = {}

    def recorded(self, path: str) -> tuple[bool, str | None]:
        """Whether a hash was recorded for the file at ``path`` (a filesystem path), and that hash."""
        parts = path.split("/")
        folder = next(
            (i for i in range(len(parts) - 2, -1, -1) if parts[i].startswith((STAGING_PREFIX, COMPACT_PREFIX))), None
        )
        if folder is None:
            return False, None
        root = "/".join(parts[: folder + 1])
        if root not in self.records:
            try:
                with self.fs.open_input_stream(posixpath.join(root, RECORD)) as handle:
                    self.records[root] = json.loads(handle.read())
            except (OSError, ValueError):
                self.records[root] = {}
        relative = "/".join(parts[folder + 1 :])
        record = self.records[root]
        return relative in record, record.get(relative)

    def differs(self, path: str, size: int) -> bool:
        """Whether the file's footer is not the one recorded at its commit (unrecorded files: never)."""
        known, wanted = self.recorded(path)
        if not known:
            return False
        try:
            return footer_hash(self.fs, path, size) != wanted
        except OSError:
            return True
