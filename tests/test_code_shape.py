"""The package's code keeps a shape the next engineer can carry: short functions, and every silenced type
error says which error and why."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "incremental_assets"
MAX_FUNCTION_LINES = 60
# `# type: ignore[code]  # reason`: the error code in brackets, then a comment saying why.
EXPLAINED_IGNORE = re.compile(r"#\s*type:\s*ignore\[[\w,\s-]+\]\s+#\s*\S")


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, int]]:
    """(name, first line, length) of each function longer than ``limit`` lines, from its ``def`` to its last
    line, docstring and nested functions included.

    >>> long_functions("def f():\\n    x = 1\\n    return x\\n", limit=2)
    [('f', 1, 3)]
    """
    return [
        (node.name, node.lineno, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > limit
    ]


def unexplained_ignores(source: str) -> list[tuple[int, str]]:
    """(line, comment) of each ``type: ignore`` comment without an error code and a reason after it.

    >>> unexplained_ignores("x = f()  # type: ignore\\ny = g()  # type: ignore[arg-type]  # g is untyped\\n")
    [(1, '# type: ignore')]
    """
    comments = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    return [
        (token.start[0], token.string)
        for token in comments
        if re.search(r"type:\s*ignore", token.string) and not EXPLAINED_IGNORE.search(token.string)
    ]


def test_the_shape_checks_catch_what_they_look_for():
    assert long_functions("def f():\n" + "    pass\n" * 60) == [("f", 1, 61)]
    assert long_functions("def f():\n" + "    pass\n" * 59) == []
    nested = "def outer():\n    def inner():\n" + "        pass\n" * 58 + "    return inner\n"
    assert long_functions(nested) == [("outer", 1, 61)]
    assert unexplained_ignores("x = 1  # type: ignore[assignment]\n") == [(1, "# type: ignore[assignment]")]
    assert unexplained_ignores("x = 1  # type: ignore[assignment]  # narrowed above\n") == []
    assert unexplained_ignores("text = '# type: ignore'\n") == []


def test_no_function_in_the_package_is_over_60_lines():
    long = {
        f"{path.relative_to(PACKAGE.parent)}:{line} {name}": length
        for path in _sources()
        for name, line, length in long_functions(path.read_text())
    }
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them into named helpers): {long}"


def test_every_type_ignore_in_the_package_names_its_error_and_says_why():
    bare = {
        f"{path.relative_to(PACKAGE.parent)}:{line}": comment
        for path in _sources()
        for line, comment in unexplained_ignores(path.read_text())
    }
    assert not bare, f"`# type: ignore` without `[code]  # reason` after it: {bare}"
