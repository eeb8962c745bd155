"""``run --auto --env NAME``, ``env list`` and ``env drop NAME``: the project's changes built apart from production."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, TypedDict

from incremental_assets.errors import IncrementalAssetsError


def cmd_run_env(args: argparse.Namespace, project, models) -> int:
    """Build environment ``args.env``: what the plan against production says, over production's intervals."""
    from incremental_assets.orchestration.environments import build_environment
    from incremental_assets.orchestration.instance import project_instance
    from incremental_assets.orchestration.runner import parse_instant

    if not args.auto or args.start or args.full_refresh:
        raise IncrementalAssetsError(
            "--env builds what the plan against production says over the intervals production holds: give "
            "--auto (and --end), "
            f"not --start or --full-refresh (fix: incremental-assets run --auto --env {args.env})"
        )
    instance = project_instance(project)
    selection = models if args.selection else None
    build = build_environment(
        project,
        args.env,
        instance,
        selection=selection,
        end=parse_instant(args.end, "end"),
        progress=lambda line: print(line, flush=True),
    )
    failed = [r for r in build.report.records if not r.success]
    read = [m.name for m in project.ordered() if m.has_table and m.name not in build.plan.models]
    print(
        f"environment {args.env}: {len(build.plan.models)} model(s) built apart "
        f"({', '.join(build.plan.models) or 'none'}); "
        f"{len(read)} read from production in place"
    )
    print(
        f"{len(build.built)} model(s) built now, {len(build.current)} already current"
        + (f", {len(build.idle)} with no complete interval yet" if build.idle else "")
        + "; "
        f"{len(build.report.records) - len(failed)} run(s) succeeded, {len(failed)} failed"
    )
    if any(r.bad_input for r in failed):
        return 2
    return 1 if failed else 0


class _EnvironmentRow(TypedDict):
    name: str
    models: list[str]
    reads: list[str]
    updated: str | None
    bytes: int
    files: int


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def cmd_env_list(args: argparse.Namespace) -> int:
    """List the environments with their models and size (``--json`` for JSON)."""
    import json

    from incremental_assets.delta.environment import environment_names, environment_size, read_manifest
    from incremental_assets.load.project import load_project

    project = load_project(args.projects)
    warehouse = project.settings.warehouse
    rows: list[_EnvironmentRow] = []
    for name in environment_names(warehouse):
        manifest = read_manifest(warehouse, name) or {}
        size, files = environment_size(warehouse, name)
        rows.append(
            {
                "name": name,
                "models": sorted(manifest.get("models") or {}),
                "reads": sorted(manifest.get("reads") or {}),
                "updated": manifest.get("updated"),
                "bytes": size,
                "files": files,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        print(
            f"{row['name']}: {len(row['models'])} model(s), updated "
            f"{row['updated'] or 'never (no manifest)'}, {_size(row['bytes'])} in {row['files']} file(s)"
        )
        if row["models"]:
            print(f"  built:   {', '.join(row['models'])}")
        if row["reads"]:
            print(f"  reads from production: {', '.join(row['reads'])}")
    if not rows:
        print("no environments (build one with: incremental-assets run --auto --env dev)")
    return 0


def cmd_env_drop(args: argparse.Namespace) -> int:
    """Remove an environment's tables and wipe its Dagster records; files production took are kept."""
    from incremental_assets.delta.environment import drop_environment, environment_names
    from incremental_assets.load.project import load_project
    from incremental_assets.model.environment import KEY_PREFIX, check_name
    from incremental_assets.orchestration.instance import project_instance

    name = check_name(args.name)
    project = load_project(args.projects)
    if name not in environment_names(project.settings.warehouse):
        raise IncrementalAssetsError(f"no environment named '{name}' (fix: `incremental-assets env list` shows them)")
    dropped = drop_environment(project.settings.warehouse, name)
    instance = project_instance(project)
    keys = instance.get_asset_keys(prefix=[KEY_PREFIX, name])
    if keys:
        instance.wipe_assets(list(keys))
    print(
        f"environment {name} dropped: {dropped.removed} file(s) removed, Dagster records of {len(keys)} asset(s) wiped"
    )
    if dropped.kept:
        print(
            f"  kept {len(dropped.kept)} file(s) a production table references (taken into production by a promotion)"
        )
    return 0


def add_env_command(sub, add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """The ``env`` command and its actions ``list`` and ``drop``."""
    text = "environments: the project's changes built apart from production (build one with run --auto --env NAME)"
    p = sub.add_parser("env", help=text, description=text)
    actions = p.add_subparsers(dest="env_action", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        a = actions.add_parser(name, help=help_text, description=help_text)
        a.add_argument(
            "--project",
            action="append",
            type=Path,
            help="project folder (holds models/); default: the current directory",
        )
        return a

    listed = action("list", "the environments: models, when updated, size")
    listed.add_argument("--json", action="store_true")
    listed.set_defaults(func=cmd_env_list)
    dropped = action("drop", "remove an environment's tables, manifest and Dagster records (production untouched)")
    dropped.add_argument("name")
    dropped.set_defaults(func=cmd_env_drop)
