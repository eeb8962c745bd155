"""The commits of a table's log after a version, read from their commit files alone (nothing before).

A reader that remembers the version it last looked at reads only the commit files after it: what each
commit added and removed, and the commit info it was made with. :func:`identity` names one commit
(its time and staging folder, unique per commit of the product), so a reader can tell that the
version it remembers is still the same commit and not a later one reusing the number after the log
fell back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import unquote

from incremental_assets.delta.checkpoints import last_checkpoint
from incremental_assets.delta.files import commit_name, filesystem
from incremental_assets.delta.tables import METADATA_PREFIX, check_log, unreadable
from incremental_assets.errors import DamagedTableError


@dataclass(frozen=True)
class LogEntry:
    """One commit file: its commit info, the add actions of the files it added (by path relative to the
    table, unquoted) and the paths it removed."""

    version: int
    info: dict
    added: dict[str, dict] = field(default_factory=dict)
    removed: frozenset[str] = frozenset()

    @property
    def run_id(self) -> str:
        return str(self.info.get(METADATA_PREFIX + "run_id", ""))


def identity(info: dict) -> str:
    """What names one commit: its timestamp and the staging folder (or promotion) it committed.

    >>> identity({"timestamp": 5, "incremental_assets.staging": "run-1"})
    '5/run-1'
    """
    return f"{info.get('timestamp', '')}/{info.get(METADATA_PREFIX + 'staging', '')}"


def read_entry(uri: str, version: int) -> LogEntry | None:
    """The commit file of ``version`` (None: not in the log, e.g. past the log retention)."""
    fs, base = filesystem(uri)
    name = f"_delta_log/{commit_name(version)}"
    try:
        with fs.open_input_stream(f"{base.rstrip('/')}/{name}") as handle:
            lines = handle.read().decode("utf-8").splitlines()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise unreadable(uri, exc) from None
    if not any(line.strip() for line in lines):
        check_log(uri)  # an emptied commit file: named with its fix (the newest one can be deleted)
        raise DamagedTableError(uri, name, "empty")
    info: dict = {}
    added: dict[str, dict] = {}
    removed: set[str] = set()
    for line in lines:
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except ValueError:
            raise DamagedTableError(
                uri, name, "a line is not complete JSON (the file was cut off or overwritten)"
            ) from None
        if "commitInfo" in action:
            info = dict(action["commitInfo"] or {})
        elif "add" in action:
            added[unquote(action["add"]["path"])] = dict(action["add"])
        elif "remove" in action:
            removed.add(unquote(action["remove"]["path"]))
    return LogEntry(version, info, added, frozenset(removed))


def read_after(uri: str, version: int, current: int) -> list[LogEntry]:
    """The commits ``version + 1`` .. ``current``, oldest first; a commit file missing among them after
    the newest checkpoint is damage (:class:`DamagedTableError`, naming the file)."""
    out = []
    checkpoint = last_checkpoint(uri)
    for number in range(version + 1, current + 1):
        entry = read_entry(uri, number)
        if entry is None and checkpoint is not None and number <= checkpoint:
            continue  # a reader takes that version from the checkpoint: its commit cannot be judged, nor is it needed
        if entry is None:
            check_log(uri)  # names the missing file, with its fix
            raise DamagedTableError(uri, f"_delta_log/{commit_name(number)}", "missing")
        out.append(entry)
    return out
