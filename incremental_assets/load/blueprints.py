"""SQLMesh blueprints: one model file, several models, each with its own values of the blueprint variables.

``blueprints ((customer := acme, region := 'eu'), (customer := globex, region := 'us'))`` in the MODEL header
makes one model per entry. In each, ``@{customer}`` becomes the value's text without quotes (for names:
``name @{customer}.orders``) and ``@customer`` the value as written (an identifier or a literal in the
query); the header's ``blueprints`` property itself is dropped.

>>> text = ("MODEL (name @{c}.orders, kind FULL, blueprints ((c := acme, n := 1), (c := globex, n := 2)));"
...         "\\nSELECT @n AS n")
>>> [t.split(";")[0] + " | " + t.split("\\n")[1] for t in expand_blueprints(text, "m.sql")]
['MODEL (name acme.orders, kind FULL) | SELECT 1 AS n', 'MODEL (name globex.orders, kind FULL) | SELECT 2 AS n']
"""

from __future__ import annotations

import re
from pathlib import Path

from incremental_assets.errors import ModelFileError
from incremental_assets.load.header import Items, Literal, Pair, parse_header, split_model_file


def _values(entry: object, path: str | Path, line: int) -> dict[str, tuple[str, str]]:
    """One blueprint: {variable: (text as written, text without quotes)}."""
    pairs = entry.items if isinstance(entry, Items) else (entry,)
    out = {}
    for pair in pairs:
        if not isinstance(pair, Pair):
            raise ModelFileError(
                path,
                getattr(pair, "line", line),
                f"cannot read blueprint '{getattr(pair, 'text', pair)}'",
                hint="write blueprints ((name := value, ...), ...)",
            )
        bare = str(pair.value.value) if isinstance(pair.value, Literal) else pair.value.text
        out[pair.key.lower()] = (pair.value.text, bare)
    return out


def _newlines(match: re.Match[str]) -> str:
    return "\n" * match.group(0).count("\n")


def expand_blueprints(text: str, path: str | Path) -> list[str]:
    """The model file's text once per blueprint (or just the text, when it declares none)."""
    if "blueprints" not in text.lower():
        return [text]
    split = split_model_file(text, path)
    header = parse_header(split.header_text, path, split.header_line - 1)
    prop = next((p for p in header.properties if p.key == "blueprints"), None)
    if prop is None:
        return [text]
    entries = prop.value.items if isinstance(prop.value, Items) else (prop.value,)
    if entries and all(isinstance(e, Pair) for e in entries):
        entries = (prop.value,)  # a single blueprint written without its own parentheses
    # Drop the property (and its comma) from the header, keeping the lines.
    start = split.header_text.find(prop.value.text, split.header_text.lower().find("blueprints"))
    key_at = split.header_text.lower().rfind("blueprints", 0, start)
    removed = split.header_text[key_at : start + len(prop.value.text)]
    header_text = (
        split.header_text[:key_at] + "\n" * removed.count("\n") + split.header_text[start + len(prop.value.text) :]
    )
    header_text = re.sub(r",\s*,", lambda m: "," + _newlines(m), header_text)
    header_text = re.sub(r",\s*(?=\)\s*$)", _newlines, header_text)
    body = text.replace(split.header_text, header_text, 1)
    out = []
    for entry in entries:
        expanded = body
        for name, (written, bare) in sorted(_values(entry, path, prop.line).items(), key=lambda kv: -len(kv[0])):
            expanded = re.sub(r"@\{\s*" + re.escape(name) + r"\s*\}", bare, expanded, flags=re.IGNORECASE)
            expanded = re.sub(r"@" + re.escape(name) + r"\b", written, expanded, flags=re.IGNORECASE)
        out.append(expanded)
    return out
