"""``incremental-assets verify``: Dagster's record checked against every table, with what to do."""

from __future__ import annotations

import argparse
import sys

from incremental_assets.errors import DamagedTableError
from incremental_assets.model.intervals import describe_windows


def cmd_verify(args: argparse.Namespace) -> int:
    """Exit 0 when every recorded interval is in its table, 1 when some are not, 2 when a log is damaged."""
    from incremental_assets import delta
    from incremental_assets.load.project import load_project
    from incremental_assets.orchestration.instance import project_instance
    from incremental_assets.orchestration.integrity import check_model
    from incremental_assets.orchestration.translator import ModelTranslator

    project = load_project(getattr(args, "projects", None) or args.project)
    instance = project_instance(project)
    models = [project.model(args.model)] if args.model else project.ordered()
    translator = ModelTranslator()
    found, damaged = 0, 0
    for model in models:
        try:
            result = check_model(instance, project, model, translator, files=True, readable=args.files)
            files = (
                len(delta.snapshot_files(project.settings.table_location(model.name)))
                if result.table_version is not None
                else 0
            )
        except DamagedTableError as exc:
            print(f"error: {exc.of_model(model.name)}", file=sys.stderr)
            damaged += 1
            continue
        if result.ok and result.recorded_version is None:
            print(f"{model.name}: nothing recorded with a Delta version yet")
            continue
        if result.ok:
            what = "readable" if args.files else "present"
            print(f"{model.name}: ok: Delta version {result.table_version}, {files} file(s) {what}")
            continue
        found += 1
        where = f"intervals {describe_windows(result.lost)}" if result.lost else "its rows"
        print(f"{model.name}: recorded but not in the table: {where}")
        for problem in result.problems:
            print(f"  {problem}")
        print(f"  fix: {result.advice()}")
    if damaged:
        return 2
    return 1 if found else 0


def add_verify_command(sub: argparse._SubParsersAction, add) -> None:
    """The ``verify`` command."""
    p = add("verify", "check Dagster's record against the tables: every recorded interval's rows and files present")
    p.add_argument("model", nargs="?")
    p.add_argument(
        "--files",
        action="store_true",
        help="also open every data file the tables reference (reads each Parquet footer)",
    )
    p.set_defaults(func=cmd_verify)
