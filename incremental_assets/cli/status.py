"""``incremental-assets status``: covered ranges, gaps, failed and stale intervals, changed models.

Exit codes: 0; 1 when an interval Dagster records is not in its table (listed as lost, with the command
that computes it again); 2 for a damaged table log or a model file that does not load."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from incremental_assets.errors import IncrementalAssetsError
from incremental_assets.model.intervals import describe_windows, format_instant

if TYPE_CHECKING:
    from incremental_assets.orchestration.status_report import StatusRow


def cmd_status(args: argparse.Namespace) -> int:
    """Print each model's status as text, or as JSON with ``--json``; exit 1 when a recorded interval is
    not in its table, 2 for a damaged table log or a model file that does not load."""
    from incremental_assets.load.project import load_valid_models
    from incremental_assets.orchestration.instance import fail_dead_runs, project_instance
    from incremental_assets.orchestration.runner import parse_instant
    from incremental_assets.orchestration.status_report import DamagedTable, status_rows

    since, until = parse_instant(args.since, "since"), parse_instant(args.until, "until")
    check_range(since, until)
    project, invalid = load_valid_models(getattr(args, "projects", None) or args.project)
    for error in invalid:  # said first; every valid model's status follows
        print(f"error: {error.render()}", file=sys.stderr)
    if args.model and args.model.lower() not in project.models and invalid:
        return 2
    instance = project_instance(project)
    fail_dead_runs(instance)  # a killed CLI run's intervals show as failed, not as running
    models = [project.model(args.model)] if args.model else project.ordered()
    rows, damaged = [], 0
    for row in status_rows(instance, project, models, since=since, until=until, warnings=not args.json):
        if isinstance(row, DamagedTable):  # reported, and the other models follow
            print(f"error: {row.message}", file=sys.stderr)
            damaged += 1
            continue
        rows.append(row)
        if not args.json:
            print_status(row)
    if args.json:
        print(json.dumps([row.to_json() for row in rows], indent=2))
    if damaged or invalid:
        return 2
    # Recorded intervals absent from their tables: what Dagster shows as done is not (the advice says the fix).
    return 1 if any(row.integrity.problems for row in rows) else 0


def print_status(row: StatusRow) -> None:
    """One model's status as text: what is not in its table or stale first, then its intervals or last run."""
    model, integrity, stale = row.model, row.integrity, row.stale
    if not integrity.ok:
        where = describe_windows(integrity.lost) if integrity.lost else "its rows"
        print(
            f"{model.name}: NOT IN TABLE: {where} recorded but absent ({'; '.join(integrity.problems)}); "
            f"{integrity.advice()}"
        )
    if stale.windows:
        print(
            f"{model.name}: STALE: {', '.join(stale.causes)} changed after "
            f"{describe_windows(stale.windows)} were computed; "
            "`run --auto` (or the automation sensor) recomputes them"
        )
    elif stale.causes:
        print(
            f"{model.name}: STALE: {', '.join(stale.causes)} changed since this table was written; `run "
            "--auto` runs it again"
        )
    if row.status.partitioned:
        _print_intervals(row)
    else:
        _print_last_run(row)


def _print_last_run(row: StatusRow) -> None:
    """An unpartitioned model: whether it changed, and its last materialization."""
    model, st = row.model, row.status
    if st.on_change:
        print(f"{model.name}: CHANGED since its table was built; the next run {st.on_change}")
    when = format_instant(st.last_materialized) if st.last_materialized else "never"
    detail = ", ".join(f"{k} {v}" for k, v in st.last_details.items())
    print(
        f"{model.name} ({model.kind.name}): last materialized {when}"
        + (f" ({detail})" if detail else "")
        + (", changed since: the next run rebuilds it" if st.changed and not st.on_change else "")
    )


def _print_intervals(row: StatusRow) -> None:
    """A partitioned model: whether it changed, its intervals done, covered, missing, lost, failed and running."""
    model, st = row.model, row.status
    if st.changed:
        print(
            f"{model.name}: CHANGED since its table was built; the next run rebuilds "
            f"{st.rebuild or 'it from its start'}"
        )
    print(
        f"{model.name} ({model.interval_unit}): {st.intervals_done}/{st.intervals_expected} intervals up "
        f"to {format_instant(st.expected.end) if st.expected else '-'}"
    )
    print(f"  covered: {describe_windows(st.covered)}")
    print(f"  gaps:    {describe_windows(st.gaps)}")
    if st.lost:
        print(f"  lost:    {describe_windows(st.lost)} (recorded, but not in the table)")
    if st.failed:
        print(f"  failed:  {describe_windows(st.failed)}")
    if st.in_progress:
        print(f"  running: {describe_windows(st.in_progress)}")
    for line in row.warnings:
        print(f"  warning: {line}")


def check_range(since, until, names: tuple[str, str] = ("--since", "--until")) -> None:
    """Refuse a time range that holds no instant: its end is not after its start."""
    if since is not None and until is not None and until <= since:
        raise IncrementalAssetsError(
            f"{names[1]} {format_instant(until)} is not after {names[0]} {format_instant(since)}: the "
            "range holds no time "
            f"(fix: give {names[0]} the earlier instant, e.g. {names[0]} {format_instant(until)} "
            f"{names[1]} {format_instant(since)})"
        )
