"""``incremental-assets maintain``: compaction, checkpoints, vacuum and the purge of old runs, as the
maintenance jobs do them on their schedules."""

from __future__ import annotations

import argparse


def cmd_maintain(args: argparse.Namespace) -> int:
    """Compact, checkpoint and vacuum each model's table, and with ``--purge-runs`` delete old Dagster runs."""
    from datetime import timedelta

    from incremental_assets.load.project import load_project
    from incremental_assets.orchestration.instance import project_instance
    from incremental_assets.orchestration.maintenance import maintain_model, purge_runs
    from incremental_assets.orchestration.translator import ModelTranslator

    project = load_project(getattr(args, "projects", None) or args.project)
    instance = project_instance(project)
    everything = not (args.compact or args.vacuum or args.purge_runs)
    compact, vacuum = args.compact or everything, args.vacuum or everything
    models = [project.model(args.model)] if args.model else [m for m in project.ordered() if m.has_table]
    prefix = "(dry run) " if args.dry_run else ""
    translator = ModelTranslator()
    for model in models:
        for line in maintain_model(
            project, instance, model, translator, compact=compact, vacuum=vacuum, dry_run=args.dry_run
        ):
            print(f"{prefix}{model.name}: {line}")
    if args.purge_runs:
        days = args.older_than_days or project.settings.maintenance.run_retention_days
        result = purge_runs(instance, timedelta(days=days), dry_run=args.dry_run)
        verb = "would delete" if args.dry_run else "deleted"
        print(
            f"{prefix}Dagster: {verb} {len(result.runs)} run(s) older than {days} days with their events; "
            f"kept {result.kept} holding a partition's latest record"
        )
    return 0


def add_maintain_command(sub: argparse._SubParsersAction, add) -> None:
    """The ``maintain`` command."""
    p = add(
        "maintain",
        "compact small files (no data change), checkpoint, vacuum old files and staging folders; "
        "with --purge-runs also delete old Dagster runs",
    )
    p.add_argument("model", nargs="?", help="only this model's table")
    p.add_argument(
        "--compact",
        action="store_true",
        help="compact (complete days of hourly tables, small files of others); checkpoints when due",
    )
    p.add_argument(
        "--vacuum",
        action="store_true",
        help="delete replaced files older than maintenance.retention_hours and dead runs' staging folders",
    )
    p.add_argument(
        "--purge-runs",
        action="store_true",
        help="delete Dagster runs older than maintenance.run_retention_days and their events, "
        "keeping the runs that hold each partition's latest record",
    )
    p.add_argument("--older-than-days", type=int, help="with --purge-runs: instead of maintenance.run_retention_days")
    p.add_argument("--dry-run", action="store_true", help="only say what would be done")
    p.set_defaults(func=cmd_maintain)
