"""A project file's text: every file a project holds (models, configs, sources, macros, Python) is read as
UTF-8 through :func:`read_utf8`, so a file in another encoding is one error naming its line and byte."""

from __future__ import annotations

from pathlib import Path

from incremental_assets.errors import ModelFileError


def read_utf8(path: Path) -> str:
    """A project file's text; not UTF-8, the error names the line and byte offset of the first bad byte.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "m.sql"
    >>> _ = p.write_bytes("MODEL (name s.m);\\n-- café".encode("latin-1"))
    >>> try: read_utf8(p)
    ... except ModelFileError as e: print(e.message)
    byte 0xe9 at offset 24 (line 2, column 7) is not UTF-8: the file is in another encoding
    """
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ModelFileError(
            path, line, f"byte 0x{data[exc.start]:02x} at offset {exc.start} (line {line}, column {column}) is not UTF-8: the file is in another encoding",
            hint="save the file as UTF-8 (an editor's Save with Encoding, or `iconv -t utf-8`)",
        ) from None
