"""``incremental-assets diff MODEL --env NAME``: an environment's table of a model against production's."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Callable

from incremental_assets.errors import IncrementalAssetsError

if TYPE_CHECKING:
    from incremental_assets.model.project import Project
    from incremental_assets.model.sql_model import SqlModel


def env_table(project: Project, model_name: str, env: str) -> tuple[SqlModel, str, str]:
    """(model, production uri, environment uri) of a model the environment built; one clear error otherwise."""
    from incremental_assets import delta
    from incremental_assets.delta.environment import env_root, read_manifest

    model = project.model(model_name)
    manifest = read_manifest(project.settings.warehouse, env)
    if manifest is None:
        raise IncrementalAssetsError(
            f"no environment named {env} (fix: build it with `incremental-assets run --auto --env {env}`)"
        )
    if model.name not in {m.lower() for m in manifest["models"]}:
        read = model.name in {m.lower() for m in manifest.get("reads") or {}}
        why = "it reads production's table in place" if read else "it is not part of it"
        raise IncrementalAssetsError(
            f"environment {env} did not build {model.name}: {why}; it built: "
            f"{', '.join(sorted(manifest['models'])) or 'nothing'}"
        )
    env_uri = delta.table_uri(env_root(project.settings.warehouse, env), model.name)
    if not delta.exists(env_uri):
        raise IncrementalAssetsError(
            f"environment {env} has no table for {model.name} at {env_uri} (fix: `incremental-assets run "
            f"--auto --env {env}`)"
        )
    return model, delta.table_uri(project.settings.warehouse, model.name), env_uri


def print_diff(name: str, env: str, diff) -> None:
    """One model's differences between an environment's table and production's, as text."""
    if diff.equal:
        print(f"{name}: environment {env} equals production")
        return
    print(f"{name}: environment {env} differs from production")
    for what in ("added", "removed", "changed"):
        for column in diff.schema.get(what, []):
            print(f"  column {what}: {column[0]} {' -> '.join(column[1:])}")
    differing = [c for c in diff.counts if c["production"] != c["environment"]]
    total_p, total_e = sum(c["production"] for c in diff.counts), sum(c["environment"] for c in diff.counts)
    print(
        f"  rows: production {total_p:,}, environment {total_e:,}; {len(differing)} of {len(diff.counts)} "
        "interval(s) differ in count"
    )
    for c in differing[:10]:
        print(f"    {c['interval'] or 'table'}: production {c['production']:,}, environment {c['environment']:,}")
    matched = f"matched on {', '.join(diff.grain)}" if diff.grain else "matched as whole rows (no grain)"
    print(
        f"  {matched}: {diff.only_production:,} only in production, {diff.only_environment:,} only in the "
        f"environment, {diff.changed:,} changed"
    )
    for kind, rows in diff.examples.items():
        for row in rows:
            print(f"    {kind.replace('_', ' ')}: {json.dumps(row, default=str)}")


def cmd_diff(args: argparse.Namespace) -> int:
    """Compare a model's table in an environment with production's; exit 1 when they differ."""
    from incremental_assets import delta
    from incremental_assets.load.project import load_project
    from incremental_assets.spark.connect_server import spark_remote
    from incremental_assets.spark.diff import diff_tables
    from incremental_assets.spark.session import build_spark_session

    project = load_project(getattr(args, "projects", None) or args.project)
    model, prod_uri, env_uri = env_table(project, args.model, args.env)
    if not delta.exists(prod_uri):  # a model new in the environment: every row is the environment's alone
        rows = delta.open_table(env_uri).to_pyarrow_dataset().count_rows()
        if args.json:
            print(json.dumps({"model": model.name, "environment": args.env, "new": True, "rows": rows}, indent=2))
        else:
            print(
                f"{model.name}: new in environment {args.env}, production has no table yet; "
                f"{rows:,} rows in the environment"
            )
        return 1
    spark = build_spark_session(project.settings.spark_config(), remote=spark_remote(project.settings))
    diff = diff_tables(spark, prod_uri, env_uri, model.grains)
    if args.json:
        print(json.dumps({"model": model.name, "environment": args.env, **diff.as_json()}, indent=2, default=str))
    else:
        print_diff(model.name, args.env, diff)
    return 0 if diff.equal else 1


def add_diff_command(sub, add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """The ``diff`` command."""
    p = add(
        "diff",
        "compare an environment's table of a model with production's: schema, rows per interval, rows by "
        "grain; exit 1 when they differ",
    )
    p.add_argument("model")
    p.add_argument("--env", required=True, help="the environment")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_diff)
