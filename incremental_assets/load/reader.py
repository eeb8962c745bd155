"""Header values -> typed Python values, every failure a ModelFileError naming the file and line."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from incremental_assets.errors import ModelFileError, WindowError
from incremental_assets.load.header import Items, Literal, Name, Value
from incremental_assets.model import clock
from incremental_assets.model.intervals import relative_instant, to_utc


class HeaderReader:
    """Interprets header values for one file, raising errors with that file's path and lines."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, line: int | None, message: str, hint: str | None = None) -> ModelFileError:
        return ModelFileError(self.path, line, message, hint=hint)

    def text(self, v: Value, what: str) -> str:
        if isinstance(v, Literal) and isinstance(v.value, str):
            return v.value
        if isinstance(v, Name):
            return v.value
        raise self.fail(v.line, f"{what} must be a name or a quoted string, found {v.text}")

    def flag(self, v: Value, what: str) -> bool:
        if isinstance(v, Literal) and isinstance(v.value, bool):
            return v.value
        if isinstance(v, (Name, Literal)) and str(getattr(v, "value", "")).lower() in ("true", "false"):
            return str(v.value).lower() == "true"
        raise self.fail(v.line, f"{what} must be true or false, found {v.text}")

    def integer(self, v: Value, what: str, minimum: int = 0) -> int:
        if isinstance(v, Literal) and isinstance(v.value, int) and not isinstance(v.value, bool) and v.value >= minimum:
            return v.value
        raise self.fail(v.line, f"{what} must be a whole number >= {minimum}, found {v.text}")

    def names(self, v: Value, what: str) -> tuple[str, ...]:
        if isinstance(v, Items):
            return tuple(self.text(i, what) for i in v.items)
        return (self.text(v, what),)

    def instant(self, v: Value, what: str, now: datetime | None = None) -> datetime:
        """A date, a timestamp, epoch milliseconds, or a relative time SQLMesh accepts (``'1 year ago'``,
        ``'yesterday'``), which counts from ``now`` (the load time)."""
        if isinstance(v, Literal) and isinstance(v.value, int) and not isinstance(v.value, bool):
            return to_utc(datetime.utcfromtimestamp(v.value / 1000))
        raw = self.text(v, what)
        relative = relative_instant(raw, now or clock.now())
        if relative is not None:
            return relative
        try:
            return to_utc(raw)
        except WindowError as exc:
            if "precise" in str(exc):
                raise self.fail(v.line, f"{what} {exc}") from None
            raise self.fail(
                v.line,
                f"{what} '{raw}' is not a date",
                hint="write it as 'YYYY-MM-DD', or relative as SQLMesh does ('1 year ago', '2 months ago', "
                "'yesterday')",
            ) from None
