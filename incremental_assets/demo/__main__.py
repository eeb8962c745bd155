"""``python -m incremental_assets.demo``: generate or append the example project's data."""

import argparse
from datetime import date
from pathlib import Path

from incremental_assets import demo
from incremental_assets.demo import append_demo_day, generate_demo_data


def _main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(demo.__doc__ or "").split("\n", 1)[0])
    parser.add_argument("project_dir", type=Path)
    parser.add_argument("--start", type=date.fromisoformat, default=date(2024, 1, 1))
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--orders-per-day", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--append-day", type=date.fromisoformat, help="append this day instead of regenerating")
    args = parser.parse_args(argv)
    if args.append_day:
        counts = append_demo_day(args.project_dir, args.append_day, orders_per_day=args.orders_per_day, seed=args.seed)
    else:
        counts = generate_demo_data(
            args.project_dir,
            start=args.start,
            days=args.days,
            orders_per_day=args.orders_per_day,
            seed=args.seed,
        )
    for name, rows in counts.items():
        print(f"{name}: {rows} rows")


_main()
