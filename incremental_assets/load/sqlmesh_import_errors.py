"""A project's Python file that failed to import, as one error naming the file, its line and, for a
``sqlmesh`` name the stand-in does not serve, that name.

>>> from incremental_assets.load.sqlmesh_shim import sqlmesh_names
>>> with sqlmesh_names(force=True):
...     try:
...         from sqlmesh.core.config import NoSuchConfig
...     except ImportError as exc:
...         print(unserved_name(exc))
sqlmesh.core.config.NoSuchConfig
"""

from __future__ import annotations

import re
import types
from typing import Any

from incremental_assets.load.sqlmesh_shim import is_sqlmesh_name


def unserved_name(exc: BaseException) -> str | None:
    """The ``sqlmesh`` name an import or attribute error is about (``sqlmesh.utils.date.to_ds``), if any."""
    if isinstance(exc, ModuleNotFoundError) and exc.name and is_sqlmesh_name(exc.name):
        return exc.name
    if isinstance(exc, ImportError) and exc.name and is_sqlmesh_name(exc.name):
        found = re.search(r"cannot import name '([^']+)'", str(exc))
        return f"{exc.name}.{found.group(1)}" if found else exc.name
    owner = getattr(exc, "obj", None)
    if isinstance(exc, AttributeError) and isinstance(owner, types.ModuleType) and is_sqlmesh_name(owner.__name__):
        return f"{owner.__name__}.{exc.name}"
    return None


def import_failure(path: Any, exc: BaseException, what: str) -> Any:
    """The :class:`ModelFileError` for a project file that failed to import: the file's own line that
    raised, and for a ``sqlmesh`` name not served here, that name."""
    import traceback

    from incremental_assets.errors import ModelFileError

    if isinstance(exc, SyntaxError):
        line = exc.lineno
    else:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if str(f.filename) == str(path)]
        line = frames[-1].lineno if frames else None
    name = unserved_name(exc)
    if name is not None:
        return ModelFileError(
            path,
            line,
            f"{name} is not available: SQLMesh is not installed here and its stand-in does not provide it",
            hint="install sqlmesh next to incremental_assets, or use only the names listed in docs/sqlmesh.md",
        )
    return ModelFileError(path, line, f"cannot import {what}: {type(exc).__name__}: {exc}")
