"""The package's shape: the pure core imports no engine, stages import only stages before them, no
module imports itself back through others (lazy imports inside functions included), and each engine
has one home (``delta`` alone uses deltalake, ``spark`` alone uses pyspark)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "incremental_assets"
PURE_STAGES = ("model", "load", "analysis", "plan")
# demo/ generates the example project's sources (Delta tables no model writes) for the CLI.
# The order data flows in: a stage may import from stages before it, never after it.
STAGES = ("errors", "model", "load", "analysis", "plan", "delta", "spark", "orchestration", "demo", "cli")
# The package root and the workspace entry point, which nothing of ours imports.
TOP = {"__init__", "definitions"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Package modules ``path`` imports anywhere in it (top level, functions, TYPE_CHECKING blocks)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name in known:
                found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(path, known) - {name} for name, path in mods.items()}


def stage_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if state.get(nxt) is None and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if state.get(node) is None and (cycle := visit(node)):
            return cycle
    return None


def test_pure_core_imports_neither_dagster_nor_pyspark():
    pure = [m for m in modules() if stage_of(m) in PURE_STAGES or m == "incremental_assets.errors"]
    assert len(pure) > 20
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in pure)
        + "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('dagster', 'pyspark', 'deltalake', 'py4j'))\n"
        + "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"the pure core pulled in engines: {out}"


def test_no_import_cycles_lazy_imports_included():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_a_cycle_is_found_when_there_is_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_stages_import_only_stages_before_them():
    wrong = []
    for module, deps in graph().items():
        here = stage_of(module)
        if here in TOP:
            continue
        for dep in deps:
            there = stage_of(dep)
            if there in TOP or there == here or dep == "incremental_assets":
                if there in TOP and dep != "incremental_assets":
                    wrong.append(f"{module} imports {dep}")
                continue
            if STAGES.index(there) > STAGES.index(here):
                wrong.append(f"{module} ({here}) imports {dep} ({there})")
    assert not wrong, "imports against the flow:\n" + "\n".join(sorted(wrong))


@pytest.mark.parametrize("engine, home", [("deltalake", "delta"), ("pyspark", "spark"), ("dagster", "orchestration")])
def test_each_engine_has_one_home(engine, home):
    users = []
    for module, path in modules().items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n.split(".")[0] == engine for n in names) and stage_of(module) not in (home, "demo"):
                users.append(module)
    assert not users, f"{engine} is used outside {home}/: {sorted(set(users))}"


def test_modules_stay_small():
    big = {m: n for m, p in modules().items() if (n := len(p.read_text().splitlines())) > 550}
    assert not big, f"modules over 550 lines: {big}"
