"""``incremental-assets promote NAME [MODEL ...]``: production takes an environment's tables, recomputing nothing."""

from __future__ import annotations

import argparse
import time
from typing import Callable


def cmd_promote(args: argparse.Namespace) -> int:
    """Production takes an environment's tables, recomputing nothing."""
    from incremental_assets.load.project import load_project
    from incremental_assets.orchestration.instance import project_instance
    from incremental_assets.orchestration.promote import prepare, promote

    project = load_project(getattr(args, "projects", None) or args.project)
    instance = project_instance(project)
    began = time.perf_counter()
    promotion = prepare(project, instance, args.name, args.models)
    done = promote(project, instance, promotion, progress=lambda line: print(line, flush=True))
    print(
        f"promoted {len(done)} table(s) of environment {args.name} in {time.perf_counter() - began:.2f}s, "
        "nothing recomputed"
    )
    kept_tables = [m.name for m in promotion.models if promotion.forward_only(m)]
    if kept_tables:
        print(
            "  forward-only, production kept its tables (new intervals use the new definition): "
            + ", ".join(kept_tables)
        )
    if promotion.kept:
        print(f"  unchanged downstream (they read none of the changed columns): {', '.join(promotion.kept)}")
    return 0


def add_promote_command(sub, add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """The ``promote`` command."""
    p = add("promote", "production takes an environment's tables without recomputing them (one Delta commit per table)")
    p.add_argument("name", help="the environment")
    p.add_argument("models", nargs="*", help="only these models (default: every model the environment built)")
    p.set_defaults(func=cmd_promote)
