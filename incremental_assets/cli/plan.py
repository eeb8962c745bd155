"""``incremental-assets plan``: what a change of the project would recompute, changing nothing."""

from __future__ import annotations

import argparse
import json
from typing import Callable

from incremental_assets.plan.changes import UNCHANGED, ModelChange


def _ranges(change: ModelChange) -> str:
    if change.recompute == ((None, None),):
        return "the whole table" + (f" (~{change.rows:,} rows)" if change.rows is not None else "")
    spans = ", ".join(f"[{s}, {e})" for s, e in change.recompute)
    rows = f", ~{change.rows:,} rows" if change.rows is not None else ""
    return f"{spans}: {change.partitions} partition(s){rows}"


def print_plan(changes: list[ModelChange], environment: str | None, held: dict[str, bool] | None = None) -> None:
    """The plan's changes by category as text, and with an environment what it holds built."""
    if environment:
        print(
            f"environment {environment}: the plan compares the project with production; the environment builds "
            f"{len(held or {})} model(s), every other model is read from production in place"
        )
    shown = [c for c in changes if c.category != UNCHANGED or c.change != "unchanged"]
    for change in shown:
        print(f"{change.name}: {change.change}, {change.category}")
        if environment and held is not None:
            where = (
                (
                    "built with the current definition"
                    if held[change.name]
                    else "not built with the current definition yet"
                )
                if change.name in held
                else "read from production"
            )
            print(f"  in {environment}: {where}")
        for reason in change.reasons:
            print(f"  {reason}")
        for what, names in change.columns.items():
            print(f"  columns {what}: {', '.join(names)}")
        print(f"  recomputes: {_ranges(change) if change.recompute else 'nothing already built'}")
        if change.diff:
            print("\n".join(f"    {line}" for line in change.diff.splitlines()))
    unchanged = len(changes) - len(shown)
    total_rows = sum(c.rows or 0 for c in changes if c.recompute)
    print(f"{len(shown)} model(s) changed or affected, {unchanged} unchanged; ~{total_rows:,} row(s) to recompute")


def cmd_plan(args: argparse.Namespace) -> int:
    """Say what a change of the models would recompute, changing nothing."""
    from incremental_assets import delta
    from incremental_assets.load.project import load_project
    from incremental_assets.plan.changes import plan_changes
    from incremental_assets.plan.definition import project_definitions

    project = load_project(getattr(args, "projects", None) or args.project)
    warehouse = project.settings.warehouse
    tables = delta.production_tables(project)
    names = {m.lower() for m in project.models}
    removed = [t for t in delta.table_names(warehouse) if t.lower() not in names]
    changes = plan_changes(
        project, project_definitions(project), tables, forward_only=args.forward_only, removed=removed
    )
    held = None
    if args.env:
        from incremental_assets.orchestration.environments import environment_state, plan_environment

        held = environment_state(project, plan_environment(project, args.env, tables=tables, changes=changes))
    if args.json:
        models = [c.as_json() for c in changes]
        if held is not None:
            for model in models:
                model["environment"] = {"builds": model["name"] in held, "built": held.get(model["name"], False)}
        print(json.dumps({"environment": args.env, "models": models}, indent=2))
    else:
        print_plan(changes, args.env, held)
    return 0


def add_plan_command(sub, add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """The ``plan`` command."""
    p = add(
        "plan",
        "what a change of the models would recompute, by category (breaking, non-breaking, ...); changes nothing",
    )
    p.add_argument(
        "--env",
        help="also say, per model, whether environment NAME holds it built with the current definition (the "
        "plan compares with production)",
    )
    p.add_argument(
        "--forward-only",
        action="store_true",
        help="apply every change to new intervals only: nothing built is recomputed",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)
