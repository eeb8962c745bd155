"""Parsed model files kept between loads: a later load of an unchanged project parses no SQL.

A model file's parse is kept (pickled, with its fingerprint) under a key hashing everything the parse
reads: the file's path and text, the project's dialect, ``model_defaults`` and variables, the declared
source schemas, every file under ``macros/`` (Python and Jinja macros), the sqlglot version and the
source of the loading code (``incremental_assets.load`` and ``incremental_assets.model``). A parse that
resolved a relative time (``start '1 year ago'``) holds for the minute it was made in only, a seed's
(it reads its CSV) and one that logged a warning (said again at each load) are not kept.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "a.sql").write_text("MODEL (name s.a, kind FULL); SELECT 1 AS x")
>>> first = ParsedModels(d / ".cache"); m = first.parse(d / "a.sql", dialect="spark"); first.save()
>>> again = ParsedModels(d / ".cache").parse(d / "a.sql", dialect="spark")
>>> again is not m, again.query.sql(), again.fingerprint == m.fingerprint
(True, 'SELECT 1 AS x', True)
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping
from weakref import WeakKeyDictionary

import incremental_assets.load as load_package
import incremental_assets.model as model_package
from incremental_assets.load.cache import ResultCache, folder_digest, package_digest, result_key
from incremental_assets.load.macros.evaluator import MacroContext
from incremental_assets.load.model_file import parse_model_file, read_model_text
from incremental_assets.model import clock
from incremental_assets.model.kinds import Seed
from incremental_assets.model.sql_model import SqlModel

_MADE_BY: "WeakKeyDictionary[SqlModel, str]" = WeakKeyDictionary()


def parse_key(model: SqlModel) -> str | None:
    """What decided this very model (a digest of its file and everything its parse read), when a parse
    kept between loads made it; None for a model made otherwise or changed since (a changed model is a new
    value). A result computed from the model alone may be kept under it."""
    return _MADE_BY.get(model)


class ParsedModels:
    """One load's model parses, read from and added to ``folder``'s ``models.pickle`` (None: none kept)."""

    def __init__(self, folder: Path | None) -> None:
        self.cache = ResultCache(folder, "models", pickled=True)
        self._macro_keys: dict[int, tuple[MacroContext, str]] = {}

    def parse(
        self,
        path: Path,
        *,
        text: str | None = None,
        dialect: str,
        defaults: Mapping[str, str] | None = None,
        variables: Mapping[str, Any] | None = None,
        macros: MacroContext | None = None,
    ) -> SqlModel:
        """:func:`~incremental_assets.load.model_file.parse_model_file`'s model, the kept one when found."""
        if text is None:
            text = read_model_text(path)
        key = result_key(
            package_digest(load_package, model_package),
            str(path),
            text,
            dialect,
            dict(defaults or {}),
            dict(variables or {}),
            self._macros_key(macros),
        )
        found = self.cache.get(key)
        if found is not None and found[0] in (None, _minute()):
            _MADE_BY[found[1]] = key + (found[0] or "")
            return found[1]
        relative_before = clock.relative_count()
        with _logged() as records:
            model = parse_model_file(
                path, text=text, default_dialect=dialect, defaults=defaults, variables=variables, macros=macros
            )
        if not records.records and not isinstance(model.kind, Seed):
            _ = model.fingerprint  # computed once and kept with the model
            minute = _minute() if clock.relative_count() != relative_before else None
            self.cache.put(key, (minute, model))
            _MADE_BY[model] = key + (minute or "")
        return model

    def save(self) -> None:
        self.cache.save()

    def _macros_key(self, macros: MacroContext | None) -> str:
        """What a parse may read of the macro context: variables, schemas and the macro files."""
        if macros is None:
            return ""
        kept = self._macro_keys.get(id(macros))
        if kept is None or kept[0] is not macros:
            digest = result_key(
                dict(macros.variables),
                {name: dict(columns) for name, columns in macros.schemas.items()},
                str(macros.macros_dir),
                folder_digest(macros.macros_dir),
                sorted(macros.macros),
            )
            kept = self._macro_keys[id(macros)] = (macros, digest)
        return kept[1]


def _minute() -> str:
    return clock.now().replace(second=0, microsecond=0).isoformat()


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.records += 1


@contextmanager
def _logged() -> Iterator[_Count]:
    """Counts what the loading code logs inside the block."""
    handler = _Count()
    logger = logging.getLogger("incremental_assets")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
