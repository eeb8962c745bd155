"""SQL text read before any parser sees it: where comments end and where parentheses stand, strings,
quoted identifiers and comments skipped.

The MODEL header is cut from its query by the parenthesis closing ``MODEL (``, and a query nesting too
deep is refused before sqlglot recurses into it; both walk the text with :func:`parentheses`.

>>> text = "-- a (\\nMODEL (name 'x)'); SELECT 1"
>>> i = skip_space_and_comments(text, 0); text[i:i + 5]
'MODEL'
>>> list(parentheses(text, i))
[(13, '('), (23, ')')]
"""

from __future__ import annotations

import re
from typing import Iterator

QUOTES = "'\"`"
_NEXT = re.compile(r"""[()'"`]|--|/\*""")


def skip_space_and_comments(text: str, i: int) -> int:
    """The index of the first character at or after ``i`` that is neither white space nor in a comment."""
    n = len(text)
    while i < n:
        if text[i].isspace():
            i += 1
        elif text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            break
    return i


def parentheses(text: str, start: int = 0) -> Iterator[tuple[int, str]]:
    """Each ``(`` and ``)`` from ``start`` on with its index, outside strings, quoted identifiers and comments.

    A quote left open ends the walk: it comes last, as its index and quote character (a backslash escapes
    the character after it inside quotes).

    >>> list(parentheses("f('(', `)`) /* ) */ -- (\\n)"))
    [(1, '('), (10, ')'), (25, ')')]
    >>> list(parentheses("(a = 'b)"))
    [(0, '('), (5, "'")]
    """
    n = len(text)
    i = start
    while (found := _NEXT.search(text, i)) is not None:
        i, token = found.start(), found.group()
        if token in "()":
            yield i, token
            i += 1
        elif token in QUOTES:
            j = i + 1
            while j < n and text[j] != token:
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                yield i, token
                return
            i = j + 1
        else:
            i = skip_space_and_comments(text, i)
