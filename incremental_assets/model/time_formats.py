"""strftime formats (Python's, SQLMesh's) and the Spark SQL that formats or parses time the same way."""

from __future__ import annotations

from typing import Iterator

_SPARK_PATTERN = {
    "%Y": "yyyy",
    "%m": "MM",
    "%d": "dd",
    "%H": "HH",
    "%M": "mm",
    "%S": "ss",
    "%f": "SSSSSS",
    "%j": "DDD",
    "%y": "yy",
}


def _spark_pattern_parts(fmt: str) -> Iterator[tuple[str, bool]]:
    """``fmt`` cut into Spark datetime pattern pieces, each with whether it is a literal letter (which a
    Spark pattern must quote, as it would read it as a field)."""
    i = 0
    while i < len(fmt):
        token = fmt[i : i + 2]
        if token in _SPARK_PATTERN:
            yield _SPARK_PATTERN[token], False
            i += 2
        else:
            yield fmt[i], fmt[i].isalpha()
            i += 1


def strftime_to_spark(fmt: str) -> str:
    """Translate a Python/SQLMesh strftime format into a Spark datetime pattern.

    >>> strftime_to_spark("%Y-%m-%dT%H")
    "yyyy-MM-dd'T'HH"
    """
    return "".join(f"'{text}'" if letter else text for text, letter in _spark_pattern_parts(fmt))


def spark_format_sql(fmt: str, instant: str) -> str:
    """Spark SQL formatting the timestamp (or date) the Spark SQL ``instant`` computes as ``strftime(fmt)``
    does; literal letters are concatenated rather than quoted in the pattern, so ``fmt`` (one of ours, never
    a user's) adds no quote to the SQL.

    >>> print(spark_format_sql("%Y-%m-%dT%H", "ts"))
    concat(date_format(ts, 'yyyy-MM-dd'), 'T', date_format(ts, 'HH'))
    """
    pieces: list[str] = []
    pattern = ""
    for text, letter in _spark_pattern_parts(fmt):
        if not letter:
            pattern += text
            continue
        if pattern:
            pieces.append(f"date_format({instant}, '{pattern}')")
            pattern = ""
        pieces.append(f"'{text}'")
    if pattern:
        pieces.append(f"date_format({instant}, '{pattern}')")
    return pieces[0] if len(pieces) == 1 else f"concat({', '.join(pieces)})"
