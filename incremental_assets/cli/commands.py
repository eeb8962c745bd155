"""``incremental-assets``: a thin command line over the same functions the Dagster assets call."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from incremental_assets.cli.diff import add_diff_command
from incremental_assets.cli.environments import add_env_command, cmd_run_env
from incremental_assets.cli.maintain import add_maintain_command
from incremental_assets.cli.plan import add_plan_command
from incremental_assets.cli.promote import add_promote_command
from incremental_assets.cli.restate import add_restate_command
from incremental_assets.cli.status import check_range, cmd_status
from incremental_assets.cli.verify import add_verify_command
from incremental_assets.cli.window_notes import check_window_reaches
from incremental_assets.errors import IncrementalAssetsError, ProjectError
from incremental_assets.model.intervals import TimeWindow, format_instant
from incremental_assets.model.settings import read_env_settings
from incremental_assets.plan.analyses import analysis_of

if TYPE_CHECKING:
    from incremental_assets.orchestration.explain import Explanation


def _project(args: argparse.Namespace):
    from incremental_assets.load.project import load_project

    return load_project(getattr(args, "projects", None) or args.project)


def cmd_validate(args: argparse.Namespace) -> int:
    """Load and check every model: ``ok`` lines on stdout, file:line errors of refused models on stderr."""
    from incremental_assets.orchestration.explain import explain_model, safety_class_text

    project = _project(args)
    refused = 0
    for model in project.ordered():
        analysis = analysis_of(project, model.name)
        unit = f", {model.interval_unit}" if model.is_incremental else ""
        rel = project.relative_path(model.path)
        if analysis is not None and analysis.refused:
            refused += 1
            for reason in analysis.reasons:
                print(
                    f"{rel}:{reason.line or model.header_line}: error: {model.name}: [{reason.rule}] {reason.message}",
                    file=sys.stderr,
                )
            continue
        cls = f", {safety_class_text(analysis)}" if analysis is not None else ""
        print(f"ok  {model.name} ({model.kind.name}{unit}{cls})  {rel}")
    for model in project.models.values():
        if model.name not in project.order:
            print(
                f"ok  {model.name} ({model.kind.name}, {explain_model(project, model).safety_class})  "
                f"{project.relative_path(model.path)}"
            )
    if refused:
        print(
            f"{refused} model(s) refused by the safety analysis: fix the SQL, allow the construct in the MODEL header "
            "(physical_properties (allow_distinct = true), ...), or run with --allow-downgrade",
            file=sys.stderr,
        )
        return 1
    print(f"{len(project.models)} models, {len(project.sources)} sources: valid")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    """Print each model's (or one model's) kind, safety class, reasons, source bounds, partitions, backfill policy."""
    from incremental_assets.orchestration.explain import explain_model

    project = _project(args)
    models = [project.model(args.model)] if args.model else project.ordered()
    explained = [explain_model(project, m) for m in models]
    if args.json:
        infos = [e.to_json() for e in explained]
        print(json.dumps(infos if not args.model else infos[0], indent=2))
        return 0
    for one in explained:
        _print_explanation(one)
    return 0


def _print_explanation(explained: Explanation) -> None:
    """One model's ``explain`` as text."""
    from incremental_assets.orchestration.explain import describe_source

    print(f"{explained.model}  ({explained.kind}, {explained.file})")
    print(f"  safety class:    {explained.safety_class}")
    if explained.write:
        print(f"  write:           {explained.write}")
    for r in explained.reasons:
        print(f"  reason:          [{r.rule}] line {r.line}: {r.message}")
    for name, bound in explained.sources.items():
        print(f"  reads {name}: {_bound_text(describe_source(bound))}")
    if explained.partitions:
        p = explained.partitions
        print(f"  partitions:      {p.interval_unit} from {p.first_key} on {p.time_column}")
    print(f"  backfill policy: {explained.backfill_policy}")


def _bound_text(bound: dict | str) -> str:
    """``before PT30M, after PT0S on event_ts (whole event_date partitions: 1 before, 0 after)``."""
    if not isinstance(bound, dict):
        return bound
    text = f"before {bound['before']}, after {bound['after']}" + (f" on {bound['column']}" if "column" in bound else "")
    parts = bound.get("partitions")
    if parts:
        text += f" (whole {parts['column']} partitions: {parts['before']} before, {parts['after']} after)"
    return text


def cmd_render(args: argparse.Namespace) -> int:
    """Print the SQL a model runs for a window (``--start``/``--end``, needed for an incremental model)."""
    from incremental_assets.orchestration.runner import parse_instant
    from incremental_assets.plan.run_plan import plan_run

    project = _project(args)
    model = project.model(args.model)
    window = None
    if model.is_incremental:
        if not (args.start and args.end):
            raise IncrementalAssetsError(f"model {model.name} is incremental: give --start and --end")
        window = TimeWindow(parse_instant(args.start, "start"), parse_instant(args.end, "end"))
    print(plan_run(project, model, window, allow_downgrade=args.allow_downgrade).render())
    return 0


def _runner(project):
    from incremental_assets.orchestration.build_definitions import build_definitions
    from incremental_assets.orchestration.instance import project_instance
    from incremental_assets.orchestration.runner import Runner

    instance = project_instance(project)
    return Runner(project, instance, build_definitions(project))


def cmd_run(args: argparse.Namespace) -> int:
    """Materialize the selected models; exit 1 when a run failed, 2 when its input must be fixed."""
    from incremental_assets.orchestration.runner import parse_instant

    if not args.auto and bool(args.start) != bool(args.end) and not (args.full_refresh and not args.start):
        raise IncrementalAssetsError("give both --start and --end, or --auto")
    if args.forward_only and args.full_refresh:
        raise IncrementalAssetsError(
            "--forward-only keeps the built intervals, --full-refresh rebuilds them: give one of them"
        )
    project = _project(args)
    models = project.select(" ".join(args.selection) if args.selection else None)
    if args.env:
        return cmd_run_env(args, project, models)
    start = parse_instant(args.start, "start")
    end = parse_instant(args.end, "end")
    if not args.auto and not args.full_refresh and start is None and any(m.is_incremental for m in models):
        raise IncrementalAssetsError(
            "incremental models need --start S --end E, or --auto to fill the missing intervals"
        )
    if start is not None and end is not None:
        check_range(start, end, ("--start", "--end"))
        if not args.auto and not args.full_refresh:
            for note in check_window_reaches(models, start, end):
                print(f"warning: {note}", file=sys.stderr)
    runner = _runner(project)
    print(f"running {len(models)} model(s): {', '.join(m.name for m in models)}", flush=True)
    report = runner.run(
        models,
        start=start,
        end=end,
        auto=args.auto,
        allow_downgrade=args.allow_downgrade,
        full_refresh=args.full_refresh,
        forward_only=args.forward_only,
        progress=lambda line: print(line, flush=True),
    )
    failed = [r for r in report.records if not r.success]
    ok = len(report.records) - len(failed)
    print(f"{ok} run(s) succeeded, {len(failed)} failed")
    if any(r.bad_input for r in failed):
        return 2  # input the user must fix, said in the failed run's line
    return 0 if not failed else 1


def cmd_vacuum(args: argparse.Namespace) -> int:
    """Delete replaced files and dead runs' staging folders of each model's table (``--dry-run`` lists them)."""
    from datetime import timedelta

    from incremental_assets import delta

    project = _project(args)
    models = [project.model(args.model)] if args.model else project.ordered()
    verb = "would remove" if args.dry_run else "removed"
    for model in models:
        uri = project.settings.table_location(model.name)
        if not delta.exists(uri):
            continue
        result = delta.vacuum(
            uri,
            retention_hours=args.retention_hours,
            staging_age=timedelta(hours=args.staging_age_hours),
            dry_run=args.dry_run,
        )
        print(
            f"{model.name}: {verb} {len(result.removed_files)} replaced file(s), {len(result.orphan_dirs)} "
            "staging folder(s) of dead runs"
        )
        if args.verbose:
            for path in result.removed_files + result.orphan_dirs:
                print(f"  {path}")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """Print past runs, newest first, from the project's Dagster instance."""
    from incremental_assets.orchestration.history import run_history
    from incremental_assets.orchestration.instance import project_instance
    from incremental_assets.orchestration.runner import parse_instant

    project = _project(args)
    check_range(parse_instant(args.since, "since"), parse_instant(args.until, "until"))
    entries = run_history(
        project_instance(project),
        project,
        args.model,
        limit=args.limit,
        since=parse_instant(args.since, "since"),
        until=parse_instant(args.until, "until"),
    )
    for entry in entries:
        print(entry.line())
    if not entries:
        print("no runs recorded yet")
    return 0


def cmd_test(args: argparse.Namespace) -> int:
    """Run the model unit tests on Spark; exit 1 when one fails."""
    from incremental_assets.spark.connect_server import spark_remote
    from incremental_assets.spark.model_tests import load_model_tests, run_model_test
    from incremental_assets.spark.session import build_spark_session

    project = _project(args)
    tests = load_model_tests(project)
    if args.name:
        tests = [t for t in tests if t.name in args.name]
    if not tests:
        print("no model tests found under tests/")
        return 0
    spark = build_spark_session(project.settings.spark_config(), remote=spark_remote(project.settings))
    failed = 0
    for test in tests:
        outcome = run_model_test(spark, project, test)
        where = f"{test.model}, {test.path.name}" if test.model else test.path.name
        print(f"{'ok  ' if outcome.passed else 'FAIL'} {test.name} ({where})")
        for failure in outcome.failures:
            print("    " + failure.replace("\n", "\n    "))
        failed += not outcome.passed
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


def _demo_instant(text: str | None):
    """``now`` (the last complete hour before the clock) or an ISO-8601 hour boundary."""
    from incremental_assets.demo import last_complete_hour
    from incremental_assets.orchestration.runner import parse_instant

    if text is None:
        return None
    return last_complete_hour() if text.strip().lower() == "now" else parse_instant(text, "until")


def _future_hours_note(start: datetime, end: datetime, asked_end: datetime | None) -> str:
    """What an append cut back to the clock left out: how many hours, and the flag that appends them."""
    if asked_end is None:
        return ""
    future = int((asked_end - max(start, end)).total_seconds() // 3600)
    return (
        f"; stopped at {format_instant(end)}, the clock's last complete hour: the other {future} hour(s) asked, "
        f"up to {format_instant(asked_end)}, would be in the future (--allow-future appends them)"
    )


def cmd_demo_data(args: argparse.Namespace) -> int:
    """Generate the example project's source data, or with ``--append`` add the hours after its end."""
    from datetime import timedelta

    from incremental_assets.demo import append_demo_hours, generate_demo_data

    until = _demo_instant(args.until)
    try:
        if args.append:
            if args.start or args.days is not None:
                raise IncrementalAssetsError(
                    "--append adds hours after the data's end: give --hours N or --until (default: now), "
                    "not --start/--days"
                )
            result = append_demo_hours(
                args.project, hours=args.hours, until=until, orders_per_day=args.orders_per_day, ahead=args.ahead
            )
            stopped = _future_hours_note(result.start, result.end, result.asked_end)
            if not result.hours:
                print(f"nothing to append: the data already reaches {format_instant(result.start)}{stopped}")
                return 0
            print(
                f"appended {result.hours} hour(s) [{format_instant(result.start)}, {format_instant(result.end)}): "
                + ", ".join(f"{name} {n:,} rows" for name, n in result.rows.items())
                + stopped
            )
            print(
                f"  quiet hours (no orders): {len(result.quiet_hours)}; late orders: {result.late_orders}"
                + (f" for {', '.join(format_instant(h) for h in result.late_hours)}" if result.late_hours else "")
            )
            return 0
        if args.hours is not None:
            raise IncrementalAssetsError("--hours needs --append")
        days = args.days if args.days is not None else 365
        if until is not None:
            start = date.fromisoformat(args.start) if args.start else until.date() - timedelta(days=days)
        else:
            start = date.fromisoformat(args.start or "2024-01-01")
        counts = generate_demo_data(
            args.project, start=start, days=days, orders_per_day=args.orders_per_day, until=until
        )
    except ValueError as exc:
        raise IncrementalAssetsError(str(exc)) from None
    for name, n in counts.items():
        print(f"{name}: {n:,} rows")
    if until is not None:
        print(f"data from {start.isoformat()} up to {format_instant(until)}")
    return 0


AddCommand = Callable[[str, str], argparse.ArgumentParser]  # adds a subcommand with --project, returns its parser

PROJECT_HELP = (
    "project folder (holds models/); default: the current directory. Repeat it to load several folders as one "
    "project (SQLMesh's -p repo_1 -p repo_2); settings and warehouse are the first folder's"
)


def build_parser() -> argparse.ArgumentParser:
    """The ``incremental-assets`` argument parser: one subcommand per command, each with ``--project``."""
    parser = argparse.ArgumentParser(
        prog="incremental-assets", description="SQL models as incremental Dagster assets on Spark and Delta Lake"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--project", action="append", type=Path, help=PROJECT_HELP)
        return p

    _add_build_commands(add)
    _add_inspect_commands(add)
    add_verify_command(sub, add)
    add_plan_command(sub, add)
    add_diff_command(sub, add)
    add_promote_command(sub, add)
    add_env_command(sub, add)
    add_restate_command(sub, add)
    add_maintain_command(sub, add)
    _add_history_and_vacuum(add)
    _add_test_and_demo_data(add)

    from incremental_assets.cli.spark_server import add_spark_command

    add_spark_command(add)
    return parser


def _add_build_commands(add: AddCommand) -> None:
    """``validate``, ``render`` and ``run``."""
    add("validate", "load and check every model; exit non-zero with file:line diagnostics").set_defaults(
        func=cmd_validate
    )

    p = add("render", "print the exact SQL a model would run for a window")
    p.add_argument("model")
    p.add_argument("--start")
    p.add_argument("--end")
    p.add_argument("--allow-downgrade", action="store_true")
    p.set_defaults(func=cmd_render)

    p = add("run", "materialize models (recorded in the project's Dagster instance)")
    p.add_argument("selection", nargs="*", help="models: name, +name (with upstreams), name+ (with downstreams), tag:x")
    p.add_argument("--start", help="window start (inclusive), e.g. 2024-01-01")
    p.add_argument("--end", help="window end (exclusive)")
    p.add_argument(
        "--auto", action="store_true", help="run only the missing intervals, up to the last complete one (or --end)"
    )
    p.add_argument(
        "--allow-downgrade",
        action="store_true",
        help="run models the safety analysis refuses as a full refresh (with a warning); not persisted",
    )
    p.add_argument(
        "--full-refresh",
        action="store_true",
        help="rebuild the selected models from their start (one atomic commit per model)",
    )
    p.add_argument(
        "--env",
        help="with --auto: build the changed models and what they break in environment NAME, apart from production",
    )
    p.add_argument(
        "--forward-only",
        action="store_true",
        help="apply every change of the selected models to new intervals only: built intervals are kept, "
        "nothing downstream is restated",
    )
    p.set_defaults(func=cmd_run)


def _add_inspect_commands(add: AddCommand) -> None:
    """``explain`` and ``status``."""
    p = add("explain", "kind, safety class and reasons, per-source bounds (ISO-8601), partitions and backfill policy")
    p.add_argument("model", nargs="?")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_explain)

    p = add("status", "covered ranges, gaps and failed intervals, from Dagster's partition status")
    p.add_argument("model", nargs="?")
    p.add_argument("--since")
    p.add_argument("--until")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)


def _add_history_and_vacuum(add: AddCommand) -> None:
    """``history`` and ``vacuum``."""
    p = add("history", "past runs, newest first: windows, rows, durations and status, from the Dagster instance")
    p.add_argument("model", nargs="?")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--since", help="only runs created at or after this time")
    p.add_argument("--until", help="only runs created before this time")
    p.set_defaults(func=cmd_history)

    p = add("vacuum", "delete replaced data files older than the retention, and staging folders of dead runs")
    p.add_argument("model", nargs="?")
    p.add_argument(
        "--retention-hours",
        type=int,
        default=168,
        help="keep files a version younger than this needs (time travel); default 168 (7 days)",
    )
    p.add_argument(
        "--staging-age-hours",
        type=float,
        default=24.0,
        help="staging folders made on another host count as dead after this age; default 24",
    )
    p.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    p.add_argument("-v", "--verbose", action="store_true", help="list every path")
    p.set_defaults(func=cmd_vacuum)


def _add_test_and_demo_data(add: AddCommand) -> None:
    """``test`` and ``demo-data``."""
    p = add("test", "run the model unit tests (tests/**/*.yaml, SQLMesh's format) on Spark")
    p.add_argument("name", nargs="*", help="only these tests")
    p.set_defaults(func=cmd_test)

    p = add(
        "demo-data", "generate the example project's source data (deterministic), or append new hours to it in place"
    )
    p.add_argument("--start", help="first day (default 2024-01-01; with --until: --days before it)")
    p.add_argument("--days", type=int, help="days to generate (default 365); ignored with both --start and --until")
    p.add_argument(
        "--until", help="generate (or with --append: append) up to this hour boundary; `now` = the last complete hour"
    )
    p.add_argument(
        "--append",
        action="store_true",
        help="add the hours after the data's end to the sources in place (default: up to now)",
    )
    p.add_argument(
        "--hours", type=int, help="with --append: add this many hours (at most up to the last complete hour)"
    )
    p.add_argument(
        "--allow-future",
        "--ahead",
        dest="ahead",
        action="store_true",
        help="with --append: allow hours after the last complete hour (data from the future)",
    )
    p.add_argument("--orders-per-day", type=int, default=200)
    p.set_defaults(func=cmd_demo_data)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; errors are one ``error:`` line on stderr and exit 2 (1 for a bug of ours)."""
    args = build_parser().parse_args(argv)
    args.projects = getattr(args, "project", None) or [Path(".")]
    args.project = args.projects[0]  # settings, warehouse, Dagster home and the Spark server are the first folder's
    try:
        from incremental_assets.delta.snapshots import one_snapshot_per_table

        with one_snapshot_per_table():  # each table's log opened once per command, again after a commit
            return args.func(args)
    except ProjectError as exc:
        for error in exc.errors:
            print(f"error: {error.render()}", file=sys.stderr)
        print(f"{len(exc.errors)} error(s)", file=sys.stderr)
        return 2
    except IncrementalAssetsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of our output went away (`... | head`): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:  # a failure no check foresaw: still one line; the trace on request
        if read_env_settings().debug:
            raise
        first = (str(exc).strip().splitlines() or [""])[0][:500]
        print(
            f"error: unexpected {type(exc).__name__}: {first} (fix: this is a bug of incremental_assets, please report "
            "it with the command; INCREMENTAL_ASSETS_DEBUG=1 prints the Python trace)",
            file=sys.stderr,
        )
        return 1


def console_main() -> int:
    """The ``incremental-assets`` process: ``main`` with the garbage collector set for a short-lived command.

    Dagster, SQLAlchemy, pandas and Spark's client leave ~300,000 objects after import that live until the
    process ends; walking them on every full collection, and once more at exit, cost a year's backfill
    0.5-0.9 s of collection and ~1 s of exit. Collections are made rarer and, at the end, what is left is
    moved out of the collector's reach (it is still freed by reference counting as the interpreter exits).
    """
    gc.set_threshold(50_000, 20, 100)
    try:
        return main()
    finally:
        gc.freeze()


if __name__ == "__main__":
    sys.exit(console_main())
