"""A project's ``macros/*.py``: the ``@macro()`` functions its SQL calls as ``@name(...)``.

The files are imported as the package ``macros`` (so ``from macros.utils import between`` works, as in
SQLMesh) with the ``sqlmesh`` names of :mod:`~incremental_assets.load.sqlmesh_shim`; ``macros`` is
removed from ``sys.modules`` afterwards, so projects loaded one after another never share modules.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp()); (d / "macros").mkdir()
>>> _ = (d / "macros" / "m.py").write_text(
...     "from sqlmesh import macro\\n@macro()\\ndef Twice(evaluator, x):\\n    return x * 2\\n")
>>> macros, errors = load_macros(d)
>>> sorted(macros), errors
(['twice'], [])
"""

from __future__ import annotations

import importlib
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from incremental_assets.errors import ModelFileError
from incremental_assets.load.sqlmesh_shim import macro_names

PACKAGE = "macros"


@contextmanager
def _project_package(directory: Path) -> Iterator[None]:
    """The project folder first on ``sys.path``, and no other project's ``macros`` package imported."""
    saved = {n: sys.modules.pop(n) for n in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]}
    sys.path.insert(0, str(directory))
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path.remove(str(directory))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]
        sys.modules.update(saved)


def _module_name(folder: Path, path: Path) -> str:
    parts = path.relative_to(folder).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join((PACKAGE, *parts))


def _load_error(path: Path, exc: BaseException) -> ModelFileError:
    """One line naming the file and line that failed to import, and the fix."""
    line = getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) else None
    if line is None:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == path.resolve()]
        line = frames[-1].lineno if frames else None
    if isinstance(exc, ImportError) and (exc.name or "").startswith("sqlmesh"):
        return ModelFileError(
            path, line, str(exc), hint="use only these sqlmesh names, or compute the value with sqlglot"
        )
    return ModelFileError(
        path, line, f"cannot load the macros file: {type(exc).__name__}: {exc}", hint="fix the Python code"
    )


def load_macros(directory: str | Path) -> tuple[dict[str, Callable[..., Any]], list[ModelFileError]]:
    """Import every ``macros/**/*.py`` of the project; the ``@macro()`` functions by lower-cased name."""
    folder = Path(directory) / PACKAGE
    if not folder.is_dir():
        return {}, []
    errors: list[ModelFileError] = []
    with macro_names() as registered, _project_package(Path(directory)):
        for path in sorted(folder.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            try:
                importlib.import_module(_module_name(folder, path))
            except Exception as exc:  # a user's file: report it as a file error, never a traceback
                errors.append(_load_error(path, exc))
        return dict(registered), errors


def macro_source(function: Callable[..., Any]) -> str:
    """``path:line`` where a macro function is defined."""
    code = getattr(function, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code else getattr(function, "__name__", "?")
