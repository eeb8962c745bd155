"""A project file's text: every file a project holds (models, configs, sources, macros, Python) is read as
UTF-8 through :func:`read_utf8`, so a file in another encoding is one error naming its line and byte; a YAML
file that does not parse is one error naming its line (:func:`yaml_error`, :func:`yaml_mapping`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

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
            path,
            line,
            f"byte 0x{data[exc.start]:02x} at offset {exc.start} (line {line}, column {column}) is not "
            "UTF-8: the file is in another encoding",
            hint="save the file as UTF-8 (an editor's Save with Encoding, or `iconv -t utf-8`)",
        ) from None


_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where PyYAML was built with it


def yaml_load(text: str) -> Any:
    """``yaml.safe_load`` with libyaml's parser when there is one; a document it refuses is parsed again by
    PyYAML's own, so that errors read (and name lines) the same either way."""
    try:
        return yaml.load(text, Loader=_FAST_LOADER)
    except yaml.YAMLError:
        return yaml.safe_load(text)


def yaml_compose(text: str) -> yaml.Node | None:
    """The document's node tree (lines in each node's ``start_mark``), parsed as :func:`yaml_load` parses."""
    try:
        return yaml.compose(text, Loader=_FAST_LOADER)
    except yaml.YAMLError:
        return yaml.compose(text, Loader=yaml.SafeLoader)


def yaml_value(node: yaml.Node) -> Any:
    """The Python value of a node of :func:`yaml_compose`'s tree, as ``safe_load`` of its text gives it."""
    loader = _FAST_LOADER("")
    try:
        return loader.construct_document(node)
    finally:
        loader.dispose()


def yaml_error(path: Path, exc: yaml.YAMLError) -> ModelFileError:
    """A YAML file that does not parse, as an error naming the file and the line of the problem."""
    mark = getattr(exc, "problem_mark", None)
    return ModelFileError(
        path, mark.line + 1 if mark else None, f"invalid YAML: {getattr(exc, 'problem', None) or exc}"
    )


def yaml_mapping(text: str, path: Path, what: str) -> dict[str, Any]:
    """A YAML file's text that must hold a mapping (an empty file holds ``{}``); ``what`` names the file's
    content in the error when it holds something else.

    >>> yaml_mapping("a: 1", Path("c.yaml"), "the config")
    {'a': 1}
    >>> for text in ("a: 1\\nb: c: d", "- 1"):
    ...     try: yaml_mapping(text, Path("c.yaml"), "the config")
    ...     except ModelFileError as e: print(e)
    c.yaml:2: invalid YAML: mapping values are not allowed here
    c.yaml:1: the config must be a mapping of keys to values
    """
    try:
        loaded = yaml_load(text)
    except yaml.YAMLError as exc:
        raise yaml_error(path, exc) from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ModelFileError(path, 1, f"{what} must be a mapping of keys to values")
    return loaded or {}
