"""One exception tree for everything a user can get wrong or the engine can refuse.

Every error that comes from a file says which file and line, and what to do about it, so the CLI
can print ``path:line: message`` and the user can jump straight to the problem.
"""

from __future__ import annotations

import re
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class IncrementalAssetsError(Exception):
    """Base class of every error this package raises on purpose."""


class ModelFileError(IncrementalAssetsError):
    """A project file (model, sources.yaml, settings) is invalid.

    >>> str(ModelFileError("models/a.sql", 3, "unknown kind FOO", hint="use FULL"))
    'models/a.sql:3: unknown kind FOO (fix: use FULL)'
    """

    def __init__(self, path: str | Path | None, line: int | None, message: str, *, hint: str | None = None):
        self.path = str(path) if path is not None else None
        self.line = line
        self.message = _ANSI.sub("", message)  # parsers underline the bad token with terminal escapes
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        where = self.path or "<input>"
        if self.line is not None:
            where = f"{where}:{self.line}"
        text = f"{where}: {self.message}"
        if self.hint:
            text += f" (fix: {self.hint})"
        return text


class ModelQueryError(ModelFileError):
    """A model's query names what its inputs do not have (a column, a function): its file and line."""


class ProjectError(IncrementalAssetsError):
    """Several file errors found while loading a project, reported together."""

    def __init__(self, errors: list[ModelFileError]):
        self.errors = errors
        super().__init__("\n".join(e.render() for e in errors))


class WindowError(IncrementalAssetsError):
    """A requested run window is not valid for a model (misaligned, before start, empty)."""


class UnsafeIncrementalError(IncrementalAssetsError):
    """The safety analysis refused to run a model incrementally."""


class StorageError(IncrementalAssetsError):
    """A Delta table could not be written or read as required."""


class SourceDataError(IncrementalAssetsError):
    """A data file of a source (or of a model's table) cannot be read as declared: which file, which column, the fix."""


class DamagedTableError(StorageError):
    """A table's Delta log cannot be read: which table, which file, and what to do.

    >>> log_file = "_delta_log/00000000000000000003.json"
    >>> error = DamagedTableError("/w/shop/orders", log_file, "truncated", model="shop.orders")
    >>> print(error)  # doctest: +NORMALIZE_WHITESPACE
    table /w/shop/orders (model shop.orders): its Delta log is damaged: _delta_log/00000000000000000003.json:
    truncated. Nothing was read or written. Restore that file from a backup, or move /w/shop/orders aside and rebuild
    it with `incremental-assets run shop.orders --full-refresh`
    """

    def __init__(self, uri: str, file: str | None, problem: str, *, model: str | None = None, newest: bool = False):
        self.uri, self.file, self.problem, self.model, self.newest = uri, file, problem, model, newest
        where = f"table {uri}" + (f" (model {model})" if model else "")
        damage = f"{file}: {problem}" if file else problem
        rebuild = f"`incremental-assets run {model or '<model>'} --full-refresh`"
        restore = "Restore that file from a backup, or move" if file else "Move"
        text = (
            f"{where}: its Delta log is damaged: {damage}. Nothing was read or written. {restore} {uri} aside "
            f"and rebuild it with {rebuild}"
        )
        if newest and file:
            # The newest commit only: without it the table is its previous version, whole.
            text += (
                "; or delete that file: the table falls back to the version before it, and "
                "`incremental-assets run --auto` computes again the intervals that commit held"
            )
        super().__init__(text)

    def of_model(self, model: str) -> "DamagedTableError":
        """The same error, naming the model whose table it is."""
        return DamagedTableError(self.uri, self.file, self.problem, model=model, newest=self.newest)


class TranslatorError(IncrementalAssetsError):
    """A project's ModelTranslator returned what a model cannot run with (e.g. partitions that are not time windows)."""


class SelectionError(IncrementalAssetsError):
    """A model selection names no known model."""


class DuplicateKeyError(IncrementalAssetsError):
    """A keyed model's query returned more than one row for some unique key; nothing was committed."""


class AuditFailedError(IncrementalAssetsError):
    """A blocking audit found failing rows; the window was not committed."""


class SparkServerError(IncrementalAssetsError):
    """The project's local Spark Connect server could not be started, reached or stopped."""

    def __init__(self, message: str, *, hint: str | None = None):
        self.hint = hint
        super().__init__(f"{message} (fix: {hint})" if hint else message)


class PromotionRefusedError(IncrementalAssetsError):
    """An environment cannot be promoted as it stands (production moved on since it was built, or it
    lacks what production holds); nothing was committed."""
