"""Where an environment's tables live and what its manifest says (see docs/model-lifecycle.md).

An environment NAME keeps its tables at ``<warehouse>/__env/NAME/<schema>/<table>`` and, after each of
its runs, a manifest ``<warehouse>/__env/NAME/environment.json``: per model built there its fingerprint,
category, the production table's Delta version the build was planned against and the intervals it holds,
and the production version of each upstream model it read in place.
"""

from __future__ import annotations

import json
import re
from typing import Any

from incremental_assets.delta.files import filesystem
from incremental_assets.errors import StorageError

ENV_DIR = "__env"
MANIFEST = "environment.json"
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]*")


def env_root(warehouse: str, name: str) -> str:
    """The folder of an environment's tables.

    >>> env_root("/w/", "dev")
    '/w/__env/dev'
    """
    return f"{warehouse.rstrip('/')}/{ENV_DIR}/{name}"


def read_manifest(warehouse: str, name: str) -> dict[str, Any] | None:
    """The environment's manifest (None: no such environment, or never built)."""
    fs, base = filesystem(f"{env_root(warehouse, name)}/{MANIFEST}")
    try:
        with fs.open_input_stream(base) as handle:
            value = json.loads(handle.read().decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot read the manifest of environment {name} ({env_root(warehouse, name)}/{MANIFEST}): {exc}") from None
    if not isinstance(value, dict) or not isinstance(value.get("models"), dict):
        raise StorageError(f"{env_root(warehouse, name)}/{MANIFEST}: not an environment manifest (no \"models\" object); build it again with `run --auto --env {name}`")
    return value


def environment_names(warehouse: str) -> list[str]:
    """The environments with a manifest under ``warehouse``."""
    from pyarrow import fs as pafs

    fs, base = filesystem(f"{warehouse.rstrip('/')}/{ENV_DIR}")
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except OSError:
        return []
    names = [i.base_name for i in infos if i.type == pafs.FileType.Directory and NAME_PATTERN.fullmatch(i.base_name)]
    return sorted(n for n in names if fs.get_file_info(f"{base}/{n}/{MANIFEST}").type == pafs.FileType.File)
