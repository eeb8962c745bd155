"""``incremental-assets restate MODEL --start S --end E``: recompute chosen intervals and what reads them."""

from __future__ import annotations

import argparse
from typing import Callable

from incremental_assets.errors import IncrementalAssetsError
from incremental_assets.model.intervals import TimeWindow, intervals
from incremental_assets.plan.restate import INTERVALS, REBUILD, Restatement


def describe(restatement: Restatement) -> list[str]:
    """What a restatement recomputes, one line per model, as ``plan`` shows it."""
    lines = []
    for item in restatement.models:
        why = f"reads {', '.join(item.because)}" if item.because else "chosen"
        if item.how == INTERVALS:
            count = sum(len(intervals(w, item.model.unit)) for w in item.windows)
            what = f"{', '.join(map(str, item.windows))}: {count} interval(s)"
        else:
            what = "the whole table, rebuilt from scratch" if item.how == REBUILD else "the whole table (unpartitioned)"
        lines.append(f"  {item.model.name}: {what} ({why})")
    lines += [f"  {note}" for note in restatement.skipped]
    return lines


def cmd_restate(args: argparse.Namespace) -> int:
    """Recompute chosen intervals of models and the downstream intervals that read them (``--dry-run``: only say so)."""
    from incremental_assets.load.project import load_project
    from incremental_assets.orchestration import restate
    from incremental_assets.orchestration.build_definitions import build_definitions
    from incremental_assets.orchestration.instance import project_instance
    from incremental_assets.orchestration.runner import Runner, parse_instant

    start, end = parse_instant(args.start, "start"), parse_instant(args.end, "end")
    assert start is not None and end is not None
    if start >= end:
        raise IncrementalAssetsError(f"--start {args.start} must be before --end {args.end}")
    project = load_project(args.projects)
    chosen = [project.model(name) for name in args.models]
    window = TimeWindow(start, end)
    runner = Runner(project, project_instance(project), build_definitions(project))
    restatement = restate.plan(runner, chosen, window)
    print(f"restate {window} of {', '.join(m.name for m in chosen)}, then what reads it:")
    print("\n".join(describe(restatement)), flush=True)
    if args.dry_run:
        return 0
    if args.backfill:
        backfill_id = restate.submit_backfill(
            runner, restatement, title=f"restate {', '.join(m.name for m in chosen)} {window}"
        )
        print(
            f"submitted Dagster backfill {backfill_id} ({len(restatement.models)} asset(s)); the dagster-daemon runs it"
        )
        return 0
    report = restate.execute(runner, restatement, progress=lambda line: print(line, flush=True))
    failed = [r for r in report.records if not r.success]
    print(f"{len(report.records) - len(failed)} run(s) succeeded, {len(failed)} failed")
    if any(r.bad_input for r in failed):
        return 2
    return 0 if not failed else 1


def add_restate_command(sub, add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """The ``restate`` command."""
    p = add(
        "restate",
        "recompute chosen intervals of models (current definition, forward_only too) and exactly the "
        "downstream intervals that read them",
    )
    p.add_argument("models", nargs="+", metavar="MODEL")
    p.add_argument("--start", required=True, help="first interval to recompute (inclusive), e.g. 2024-01-01")
    p.add_argument("--end", required=True, help="end of the last interval (exclusive)")
    p.add_argument("--dry-run", action="store_true", help="only print what would be recomputed")
    p.add_argument(
        "--backfill",
        action="store_true",
        help="submit it as one Dagster backfill that the dagster-daemon runs, and print its id",
    )
    p.set_defaults(func=cmd_restate)
