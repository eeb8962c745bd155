"""`plan`'s categories against SQLMesh's own automatic categorisation, on a corpus of changes to one model
of a small SQLMesh project (tests/plan_project, loaded by both unchanged): add a column, change an
expression, change a filter, rename a column, change a join, change the description.

Where SQLMesh says a downstream model is indirect-breaking and we say indirect-non-breaking (column
level), SQLMesh's own recompute proves it: after SQLMesh applies the change, that model's rows are the
rows it had before.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from test_sqlmesh_differential import HERE, _sqlmesh_python

from incremental_assets.load.project import load_project
from incremental_assets.plan.changes import TableState, plan_changes
from incremental_assets.plan.definition import project_definitions

pytestmark = [pytest.mark.slow, pytest.mark.sqlmesh]

PROJECT = HERE / "plan_project"
HEADER = "MODEL (name s.daily, kind FULL, description '{description}');\n"
BODY = (
    "SELECT e.k AS k, COUNT(*) AS n, SUM(e.v) AS {total} FROM raw.events AS e JOIN raw.kinds AS d ON e.k = "
    "d.k{on} WHERE e.v >= {low} GROUP BY e.k"
)


def daily(description="per key", total="total", on="", low="0", extra="") -> str:
    return HEADER.format(description=description) + BODY.format(total=total + extra, on=on, low=low)


CASES = {
    "add a column": daily(extra=", MAX(e.v) AS top"),
    "change an expression": daily().replace("COUNT(*) AS n", "COUNT(*) * 10 AS n"),
    "change a filter": daily(low="2"),
    "rename a column": daily(total="amount"),
    "change a join": daily(on=" AND d.active"),
    "change the description": daily(description="rows per key"),
}

# Run in SQLMesh's venv: for each case, on a fresh copy of the project, apply it, change the file, and
# print SQLMesh's category per new snapshot and each table's rows before and after applying the change.
SQLMESH_CATEGORIES = """
import json, shutil, sys, tempfile, pathlib
from sqlmesh import Context

spec = json.loads(pathlib.Path(sys.argv[1]).read_text())
out = {}
for case, text in spec["cases"].items():
    root = pathlib.Path(tempfile.mkdtemp()) / "project"
    shutil.copytree(spec["project"], root)
    ctx = Context(paths=str(root))
    ctx.plan(auto_apply=True, no_prompts=True)
    rows = lambda: {t: sorted(map(list, ctx.engine_adapter.fetchall(f"SELECT * FROM {t}"))) for t in spec["tables"]}
    before = rows()
    (root / "models" / "daily.sql").write_text(text)
    ctx.load()
    plan = ctx.plan(auto_apply=False, no_prompts=True)
    categories = {
        ".".join(p.strip('"') for p in s.name.split(".")[-2:]): s.change_category.name
        for s in plan.new_snapshots
        if s.change_category
    }
    ctx.apply(plan)
    out[case] = {"categories": categories, "before": before, "after": rows()}
    shutil.rmtree(root.parent)
print(json.dumps(out, default=str))
"""


def ours(tmp_path, text: str) -> dict[str, str]:
    """Our categories: the tables as built by the project, the model file then changed."""
    root = tmp_path / "ours"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(PROJECT, root)
    built = load_project(root)
    stored = project_definitions(built)
    tables = {m.name: TableState(True, m.fingerprint, stored[m.name]) for m in built.ordered() if m.has_table}
    (root / "models" / "daily.sql").write_text(text)
    changed = load_project(root)
    return {
        c.name: c.category
        for c in plan_changes(changed, project_definitions(changed), tables)
        if c.category != "unchanged"
    }


def test_plan_agrees_with_sqlmesh_and_is_finer_only_where_sqlmesh_recompute_proves_it(tmp_path):
    python = _sqlmesh_python()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"project": str(PROJECT), "tables": ["s.daily", "s.totals", "s.keys"], "cases": CASES}))
    script = tmp_path / "categories.py"
    script.write_text(SQLMESH_CATEGORIES)
    done = subprocess.run(
        [str(python), str(script), str(spec)], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    finer = []
    for case, text in CASES.items():
        sqlmesh = {name: category.lower().replace("_", "-") for name, category in theirs[case]["categories"].items()}
        mine = ours(tmp_path, text)
        assert set(mine) == set(sqlmesh), (case, mine, sqlmesh)
        for name, category in mine.items():
            if category == sqlmesh[name]:
                continue
            # Finer, never coarser: SQLMesh's recompute of the model left its rows as they were.
            assert (category, sqlmesh[name]) == ("indirect-non-breaking", "indirect-breaking"), (
                case,
                name,
                category,
                sqlmesh[name],
            )
            assert theirs[case]["after"][name] == theirs[case]["before"][name], (case, name)
            finer.append((case, name))
    assert mine == {"s.daily": "metadata", "s.totals": "metadata", "s.keys": "metadata"}
    assert sorted(finer) == [
        ("change an expression", "s.keys"),
        ("rename a column", "s.keys"),
        ("rename a column", "s.totals"),
    ]
