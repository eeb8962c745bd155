"""SQLMesh custom materializations (the class a ``kind CUSTOM (materialization 'name')`` runs), read
from their source without importing it.

SQLMesh finds the class by its ``NAME`` (or class name), lower-cased, among the direct subclasses of
``CustomMaterialization`` the project's ``materializations/`` folder defines and the classes installed
packages register under the entry point group ``sqlmesh.materializations``; an entry point wins over a
project class of the same name. Here the same places are searched, but each module is parsed with
:mod:`ast` and never executed: an entry point's module file is located from its top-level package's
search locations (``importlib.util.find_spec`` of a top-level name runs no code, whereas a dotted name
would import the parent packages).

A class runs here only when its writes are provably those of a FULL model: it subclasses
``CustomMaterialization`` directly, its body holds nothing but a docstring, ``NAME`` and the methods
``insert`` (required), ``create`` and ``delete``, and, ignoring docstrings, ``assert`` and ``pass``:

- ``insert`` only calls ``self._replace_query_for_model(...)`` or ``self.adapter.replace_query(...)``
  with its own query parameter as the query and its parameters or constants as the other arguments;
- ``create`` and ``delete`` only call ``super().create(...)`` / ``super().delete(...)``.

Anything else (``self.adapter.execute``, ``insert_append``, ``merge``, a loop, another method, a base
class of the project's own) is reported with its file and line.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> _ = (folder / "m.py").write_text(
...     "from sqlmesh import CustomMaterialization\\n"
...     "class Full(CustomMaterialization):\\n"
...     "    NAME = 'my_full'\\n"
...     "    def insert(self, table_name, query_or_df, model, is_first_insert, render_kwargs, **kwargs):\\n"
...     "        self._replace_query_for_model(model, table_name, query_or_df, render_kwargs)\\n"
...     "class Append(CustomMaterialization):\\n"
...     "    def insert(self, table_name, query_or_df, model, is_first_insert, render_kwargs, **kwargs):\\n"
...     "        self.adapter.insert_append(table_name, query_or_df)\\n")
>>> find_materialization("MY_FULL", [folder]).problem is None
True
>>> found = find_materialization("append", [folder])
>>> found.class_name, found.line, found.problem  # doctest: +NORMALIZE_WHITESPACE
('Append', 6,
 "m.py:8: insert calls self.adapter.insert_append(...), which is not a replacement of the table by the model's query")
>>> find_materialization("nowhere", [folder]) is None
True
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

GROUP = "sqlmesh.materializations"
BASE = "CustomMaterialization"
_REPLACE_CALLS = {"_replace_query_for_model": 2, "replace_query": 1}  # method -> position of the query argument
_OWN_METHODS = ("insert", "create", "delete")


@dataclass(frozen=True)
class Materialization:
    """A class found for a materialization name; ``problem`` is None when it writes as a FULL model."""

    name: str
    class_name: str
    path: Path
    line: int
    origin: str  # "installed package <distribution>" or "entry point <name>"; "" for the project's folder
    problem: str | None


def find_materialization(name: str, folders: list[Path]) -> Materialization | None:
    """The class SQLMesh would run for ``name``: the last match in its order (the project's
    ``materializations`` folders, then installed entry points), or None when nothing defines it."""
    found = None
    for candidate in [*_folder_classes(folders), *_entry_point_classes()]:
        if candidate.name == name.lower():
            found = candidate
    return found


def _folder_classes(folders: list[Path]) -> list[Materialization]:
    out = []
    for folder in folders:
        for file in sorted(folder.glob("*.py")) if folder.is_dir() else []:
            tree, error = _parse(file)
            if tree is None:
                continue  # SQLMesh could not import it either; a class it would define is not found
            imported = _names_from_sqlmesh(tree)
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and any(_base_name(b) == BASE for b in node.bases):
                    out.append(_materialization(node, file, "", imported))
    return out


def _entry_point_classes() -> list[Materialization]:
    out = []
    for ep in importlib.metadata.entry_points(group=GROUP):
        dist = getattr(getattr(ep, "dist", None), "name", None)
        origin = f"installed package {dist}" if dist else f"entry point {ep.name}"
        module, _, attr = ep.value.partition(":")
        attr = attr.strip()
        file = _module_file(module.strip())
        if file is None:
            out.append(
                Materialization(
                    ep.name.lower(), attr, Path(module), 0, origin, f"the source of module {module} cannot be found"
                )
            )
            continue
        tree, error = _parse(file)
        classes = {n.name: n for n in (tree.body if tree else []) if isinstance(n, ast.ClassDef)}
        if tree is not None and attr in classes:
            out.append(_materialization(classes[attr], file, origin, _names_from_sqlmesh(tree)))
        else:
            why = error or f"{file.name} does not define class {attr} itself"
            out.append(Materialization(ep.name.lower(), attr, file, 1, origin, why))
    return out


def _module_file(dotted: str) -> Path | None:
    """The source file of a module, found from its top-level package without importing anything."""
    top, *rest = dotted.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: no parent package to import
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    locations = [Path(p) for p in (spec.submodule_search_locations or [])]
    for index, part in enumerate(rest):
        last = index == len(rest) - 1
        candidates = [loc / f"{part}.py" for loc in locations] if last else []
        candidates += [loc / part / "__init__.py" for loc in locations]
        file = next((c for c in candidates if c.is_file()), None)
        if last:
            return file
        locations = [loc / part for loc in locations if (loc / part).is_dir()]
    return None


def _parse(file: Path) -> tuple[ast.Module | None, str | None]:
    stat = file.stat()
    return _parse_cached(file, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=256)
def _parse_cached(file: Path, _mtime: int, _size: int) -> tuple[ast.Module | None, str | None]:
    try:
        return ast.parse(file.read_text(encoding="utf-8"), filename=str(file)), None
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
        return None, f"{file.name} cannot be read: {exc}"


def _names_from_sqlmesh(tree: ast.Module) -> set[str]:
    """Local names bound to sqlmesh's CustomMaterialization (``from sqlmesh import CustomMaterialization``)."""
    return {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlmesh"
        for alias in node.names
        if alias.name == BASE
    }


def _base_name(base: ast.expr) -> str | None:
    """The last name of a ``CustomMaterialization`` base, also written ``[Kind]`` or ``sqlmesh.``-qualified."""
    if isinstance(base, ast.Subscript):
        base = base.value
    if isinstance(base, ast.Name):
        return base.id
    if isinstance(base, ast.Attribute):
        return base.attr
    return None


def _materialization(node: ast.ClassDef, file: Path, origin: str, imported: set[str]) -> Materialization:
    name = node.name
    for stmt in node.body:
        if (constant := _name_assigned(stmt)) is not None and isinstance(constant.value, str):
            name = constant.value
    return Materialization(name.lower(), node.name, file, node.lineno, origin, _problem(node, file, imported))


def _problem(node: ast.ClassDef, file: Path, imported: set[str]) -> str | None:
    """Why the class may do more than replace the table with the model's query; None when it does not."""
    at = f"{file.name}:{node.lineno}"
    bases = [b for b in node.bases if not (isinstance(b, ast.Name) and b.id in ("object",))]
    direct = len(bases) == 1 and _is_sqlmesh_base(bases[0], imported) and not node.keywords
    if not direct:
        return f"{at}: class {node.name} does not subclass sqlmesh's {BASE} alone, so methods it inherits are not known"
    if node.decorator_list:
        return f"{at}: class {node.name} is decorated"
    methods: dict[str, ast.FunctionDef] = {}
    for stmt in node.body:
        if _is_inert(stmt) or _name_assigned(stmt) is not None:
            continue
        if isinstance(stmt, ast.FunctionDef) and stmt.name in _OWN_METHODS and not stmt.decorator_list:
            methods[stmt.name] = stmt
            continue
        what = f"method {stmt.name}" if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) else "a statement"
        return f"{file.name}:{stmt.lineno}: class {node.name} defines {what} besides NAME, insert, create and delete"
    if "insert" not in methods:
        return f"{at}: class {node.name} defines no insert"
    for method in methods.values():
        problem = _method_problem(method, file)
        if problem:
            return problem
    return None


def _is_sqlmesh_base(base: ast.expr, imported: set[str]) -> bool:
    target = base.value if isinstance(base, ast.Subscript) else base
    if isinstance(target, ast.Name):
        return target.id in imported
    return (
        isinstance(target, ast.Attribute)
        and target.attr == BASE
        and isinstance(target.value, ast.Name)
        and target.value.id == "sqlmesh"
    )


def _is_inert(stmt: ast.stmt) -> bool:
    """A docstring, ``pass``, ``assert`` or a bare ``return``: nothing written."""
    if isinstance(stmt, (ast.Pass, ast.Assert)) or (isinstance(stmt, ast.Return) and stmt.value is None):
        return True
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _name_assigned(stmt: ast.stmt) -> ast.Constant | None:
    """The constant of ``NAME = "..."`` or ``NAME: str = "..."``, else None."""
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        return None
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    if all(isinstance(t, ast.Name) and t.id == "NAME" for t in targets) and isinstance(stmt.value, ast.Constant):
        return stmt.value
    return None


def _method_problem(method: ast.FunctionDef, file: Path) -> str | None:
    params = [a.arg for a in (*method.args.posonlyargs, *method.args.args, *method.args.kwonlyargs)]
    params += [a.arg for a in (method.args.vararg, method.args.kwarg) if a is not None]
    positional = [a.arg for a in (*method.args.posonlyargs, *method.args.args)][1:]  # without self
    query = positional[1] if method.name == "insert" and len(positional) > 1 else None
    for stmt in method.body:
        if _is_inert(stmt):
            continue
        call = stmt.value if isinstance(stmt, (ast.Expr, ast.Return)) else None
        at = f"{file.name}:{stmt.lineno}: {method.name}"
        if not isinstance(call, ast.Call):
            return f"{at} runs `{_short(stmt)}`, not only a replacement of the table by the model's query"
        called = _called(call)
        if method.name == "insert" and called in ("self._replace_query_for_model", "self.adapter.replace_query"):
            problem = _arguments_problem(call, _REPLACE_CALLS[called.rsplit(".", 1)[1]], query, set(params))
        elif called == f"super().{method.name}":
            problem = _arguments_problem(call, None, None, set(params))
        else:
            only = "" if method.name == "insert" else f" (only super().{method.name}(...) may be called here)"
            return (
                f"{at} calls {called or _short(call.func)}(...), which is not a replacement of the table by "
                f"the model's query{only}"
            )
        if problem:
            return f"{at} calls {called}(...) {problem}"
    return None


def _arguments_problem(call: ast.Call, query_at: int | None, query: str | None, params: set[str]) -> str | None:
    """The replacement must get the model's query (the method's query parameter) and, otherwise, only
    the method's own parameters or constants."""
    given = None
    for index, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred) or not _plain(arg, params):
            return f"with the argument `{_short(arg)}`, not one of its own parameters"
        if index == query_at:
            given = arg
    for keyword in call.keywords:
        if keyword.arg is None:
            if not (isinstance(keyword.value, ast.Name) and keyword.value.id in params):
                return f"with `**{_short(keyword.value)}`, not its own keyword arguments"
        elif not _plain(keyword.value, params):
            return f"with {keyword.arg}=`{_short(keyword.value)}`, not one of its own parameters"
        elif keyword.arg == "query_or_df":
            given = keyword.value
    if query_at is not None and not (isinstance(given, ast.Name) and given.id == query):
        return (
            f"with `{_short(given) if given is not None else 'no query'}` as the query, not the model's query ({query})"
        )
    return None


def _plain(arg: ast.expr, params: set[str]) -> bool:
    return (isinstance(arg, ast.Name) and arg.id in params) or isinstance(arg, ast.Constant)


def _called(call: ast.Call) -> str | None:
    """``self.adapter.replace_query`` or ``super().create`` for those shapes, else None."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value
    if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super" and not owner.args:
        return f"super().{func.attr}"
    parts = [func.attr]
    while isinstance(owner, ast.Attribute):
        parts.append(owner.attr)
        owner = owner.value
    if isinstance(owner, ast.Name):
        return ".".join([owner.id, *reversed(parts)])
    return None


def _short(node: ast.AST) -> str:
    text = ast.unparse(node).splitlines()[0] if node is not None else ""
    return text if len(text) <= 60 else text[:57] + "..."
