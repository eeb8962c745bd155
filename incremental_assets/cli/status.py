"""``incremental-assets status``: covered ranges, gaps, failed and stale intervals, changed models.

Exit codes: 0; 1 when an interval Dagster records is not in its table (listed as lost, with the command
that computes it again); 2 for a damaged table log or a model file that does not load."""

from __future__ import annotations

import argparse
import json
import sys

from incremental_assets.errors import DamagedTableError, IncrementalAssetsError
from incremental_assets.model.intervals import format_instant


def cmd_status(args: argparse.Namespace) -> int:
    from incremental_assets import delta
    from incremental_assets.orchestration.instance import fail_dead_runs, project_instance
    from incremental_assets.orchestration.integrity import check_model
    from incremental_assets.orchestration.runner import parse_instant
    from incremental_assets.orchestration.staleness import stale_intervals
    from incremental_assets.orchestration.status import describe_windows, model_status
    from incremental_assets.orchestration.translator import ModelTranslator

    from incremental_assets.load.project import load_valid_models

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
    rows = []
    problems_by = {}
    stale_by = {}
    translator = ModelTranslator()
    damaged = 0
    for model in models:
        try:
            built = delta.built_with(project.settings.table_location(model.name))
            integrity = check_model(instance, project, model, translator)
        except DamagedTableError as exc:  # report it, and go on with the other models
            print(f"error: {exc.of_model(model.name)}", file=sys.stderr)
            damaged += 1
            continue
        st = model_status(instance, model, since=since, until=until, built_with=built, lost=integrity.lost)
        problems_by[model.name] = integrity.problems
        rows.append(st)
        stale = stale_by[model.name] = stale_intervals(instance, project, model, translator)
        if args.json:
            continue
        if not integrity.ok:
            where = describe_windows(integrity.lost) if integrity.lost else "its rows"
            print(f"{model.name}: NOT IN TABLE: {where} recorded but absent ({'; '.join(integrity.problems)}); {integrity.advice()}")
        if stale.windows:
            print(
                f"{model.name}: STALE: {', '.join(stale.causes)} changed after {describe_windows(stale.windows)} were computed; "
                "`run --auto` (or the automation sensor) recomputes them"
            )
        elif stale.causes:
            print(f"{model.name}: STALE: {', '.join(stale.causes)} changed since this table was written; `run --auto` runs it again")
        if not st.partitioned:
            if st.on_change:
                print(f"{model.name}: CHANGED since its table was built; the next run {st.on_change}")
            when = format_instant(st.last_materialized) if st.last_materialized else "never"
            detail = ", ".join(f"{k} {v}" for k, v in st.last_details.items())
            print(
                f"{model.name} ({model.kind.name}): last materialized {when}" + (f" ({detail})" if detail else "")
                + (", changed since: the next run rebuilds it" if st.changed and not st.on_change else "")
            )
            continue
        if st.changed:
            print(f"{model.name}: CHANGED since its table was built; the next run rebuilds {st.rebuild or 'it from its start'}")
        print(f"{model.name} ({model.interval_unit}): {st.intervals_done}/{st.intervals_expected} intervals up to {format_instant(st.expected.end) if st.expected else '-'}")
        print(f"  covered: {describe_windows(st.covered)}")
        print(f"  gaps:    {describe_windows(st.gaps)}")
        if st.lost:
            print(f"  lost:    {describe_windows(st.lost)} (recorded, but not in the table)")
        if st.failed:
            print(f"  failed:  {describe_windows(st.failed)}")
        if st.in_progress:
            print(f"  running: {describe_windows(st.in_progress)}")
        for line in consistency_warnings(project, instance, model, st):
            print(f"  warning: {line}")
    if args.json:
        def win(ws):
            return [{"start": w.start.isoformat(), "end": w.end.isoformat()} for w in ws]

        print(json.dumps([
            {"model": s.model, "partitioned": s.partitioned, "covered": win(s.covered), "gaps": win(s.gaps), "failed": win(s.failed),
             "lost": win(s.lost), "integrity": list(problems_by[s.model]), "intervals_done": s.intervals_done, "intervals_expected": s.intervals_expected, "changed": s.changed, "on_change": s.on_change,
             "stale": win(stale_by[s.model].windows), "upstream_changed": list(stale_by[s.model].causes),
             "rebuild": win([s.rebuild]) if s.rebuild else [],
             "last_materialized": s.last_materialized.isoformat() if s.last_materialized else None, "last_run": dict(s.last_details)}
            for s in rows
        ], indent=2))
    if damaged or invalid:
        return 2
    # Recorded intervals absent from their tables: what Dagster shows as done is not (the advice says the fix).
    return 1 if any(problems_by.values()) else 0


def check_range(since, until, names: tuple[str, str] = ("--since", "--until")) -> None:
    """Refuse a time range that holds no instant: its end is not after its start."""
    if since is not None and until is not None and until <= since:
        raise IncrementalAssetsError(
            f"{names[1]} {format_instant(until)} is not after {names[0]} {format_instant(since)}: the range holds no time "
            f"(fix: give {names[0]} the earlier instant, e.g. {names[0]} {format_instant(until)} {names[1]} {format_instant(since)})"
        )


def consistency_warnings(project, instance, model, st) -> list[str]:
    """Commits Dagster missed (a process killed between commit and record); recorded intervals the table
    lacks are reported by the integrity check."""
    from incremental_assets.orchestration.reconcile import unrecorded_commits
    from incremental_assets.orchestration.translator import ModelTranslator

    missed = unrecorded_commits(instance, project, model, ModelTranslator())
    return [
        f"Delta version {m.version} holds {len(m.partitions)} interval(s) in {m.window} that Dagster has not recorded; "
        "the next `run --auto` records them without recomputing"
        for m in missed
    ]
