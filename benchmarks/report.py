"""RESULTS.md and its plots, written from one invocation of the runner (its JSON file).

    .venv/bin/python benchmarks/report.py benchmarks/results.json

Every figure of RESULTS.md comes from that file: the targets' verdicts are computed here from the figures,
not written by hand. Plots (SVG, next to RESULTS.md) show the curves a table hides: cost against history
length, against the number of models, against rows, against a table's commits, and per cycle over a year.
Earlier runs, the A/B measurement of each change and the investigations behind them are in HISTORY.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from svg_axes import line_plot  # noqa: E402

Lines = list[str]


def s(value: float | None, digits: int = 2) -> str:
    """Seconds as the tables print them."""
    return "-" if value is None else f"{value:.{digits}f} s"


def x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(head: list[str], rows: list[list[str]], right_from: int = 1) -> Lines:
    align = ["---" if i < right_from else "---:" for i in range(len(head))]
    return ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"] + [
        "| " + " | ".join(row) + " |" for row in rows
    ]


def verdict(met: bool) -> str:
    return "**met**" if met else "**not met**"


def plot(out: Path, name: str, series: list[tuple[str, list[tuple[float, float]]]], **labels: str) -> str:
    """Write one plot next to RESULTS.md; the Markdown that shows it."""
    (out / name).write_text(line_plot(series, **labels))
    return f"![{labels['title']}]({name})"


def variant(automation: dict, name: str) -> dict | None:
    """An automation variant by its name (``server_up``), with or without the "after" of an A/B run."""
    for key, value in automation.items():
        if isinstance(value, dict) and key.split()[-1] == name:
            return value
    return None


# --- the targets ----------------------------------------------------------------------------------------------


def targets(r: dict) -> Lines:
    rows: list[list[str]] = []

    def add(target: str, check: Callable[[], tuple[bool, str]]) -> None:
        try:
            met, text = check()
        except (KeyError, TypeError, IndexError, ZeroDivisionError):
            rows.append([target, "not measured in this run"])
            return
        rows.append([target, f"{verdict(met)}: {text}"])

    def incremental() -> tuple[bool, str]:
        found = r["incremental"]["rows"]
        parts = [f"1/{1 / row['ratio_day_to_full']:.1f} ({row['days']} days)" for row in found]
        last = found[-1]["ratio_day_to_full"]
        improving = all(a["ratio_day_to_full"] >= b["ratio_day_to_full"] for a, b in zip(found, found[1:]))
        return last <= 1 / 20 and improving, ", ".join(parts)

    def backfill() -> tuple[bool, str]:
        b = r["backfill"]
        return b[
            "single_run_over_floor"
        ] <= 1.3, f"{x(b['single_run_over_floor'])} ({s(b['single_run_s'])} vs {s(b['floor_s'])})"

    def scale() -> tuple[bool, str]:
        by = {row["models"]: row for row in r["scale"]["sizes"]}
        one, five = by[1000]["again"]["load_s"], by[5000]["again"]["load_s"]
        first = f"a first load, nothing kept: {s(by[1000]['load_s'])} and {s(by[5000]['load_s'])}"
        return one <= 2 and five <= 10, f"a later load {s(one)} (1,000 models) and {s(five)} (5,000); {first}"

    def bookkeeping() -> tuple[bool, str]:
        b = r["bookkeeping"]
        sqlite = b["in_process"]["after"]["run_ms_per_extra_partition"]
        postgres = b["postgres"]["ours"]["ms_per_extra_partition"]
        return max(
            sqlite, postgres
        ) <= 2, f"{sqlite:.2f} ms a partition in a run (SQLite), {postgres:.2f} ms (Postgres)"

    def hourly() -> tuple[bool, str]:
        b = r["bookkeeping"]
        sqlite, postgres = b["cli_s"]["after"]["hourly_over_daily"], b["postgres_cli_s"]["hourly_over_daily"]
        return max(sqlite, postgres) <= 1.5, f"{x(sqlite)} on SQLite, {x(postgres)} on Postgres"

    def new_day_5() -> tuple[bool, str]:
        up = r["spark_server"]["new_day_server_up_s"]
        return up < 5, f"{s(up)} ({s(r['spark_server']['new_day_server_down_s'])} without the server)"

    def new_day_1() -> tuple[bool, str]:
        sp = r["spark_server"]
        cli, own, in_process = sp["new_day_ab_cli_s"], sp["new_day_ab_cli_own_process_s"], sp["new_day_ab_in_process_s"]
        return cli <= 1.0 and cli <= 2 * in_process, (
            f"{s(cli)} handed to the command server, {x(cli / in_process)} the same day as one in-process run "
            f"({s(in_process)}); {s(own)} for the command in its own process (in turns, section 6)"
        )

    def cli_year() -> tuple[bool, str]:
        sp = r["spark_server"]
        ratio = sp["cli_year_server_up_over_in_process"]
        return ratio <= 1.3, f"{x(ratio)} ({s(sp['cli_year_server_up_s'])} vs {s(sp['in_process_year_s'])})"

    def first_query() -> tuple[bool, str]:
        sp = r["spark_server"]
        ratio = sp["cli_year_first_after_start_s"] / sp["cli_year_server_up_s"]
        return ratio <= 1.3, (
            f"{x(ratio)}: the CLI's first year after `spark start` {s(sp['cli_year_first_after_start_s'])}, "
            f"later ones {s(sp['cli_year_server_up_s'])}"
        )

    def sqlmesh() -> tuple[bool, str]:
        p = r["peer"]
        year, day = p["backfill_sqlmesh_over_ours"], p["day_sqlmesh_over_ours"]
        where = "both on the same long-lived Spark" if p.get("sqlmesh_spark") else "each starting its own JVM"
        return min(year, day) >= 2, f"SQLMesh / ours {x(year)} on the year, {x(day)} on one day ({where})"

    def dbt() -> tuple[bool, str]:
        p = r["peer"]
        return p["backfill_dbt_over_ours"] >= 10, f"dbt-spark / ours {x(p['backfill_dbt_over_ours'])} on the backfill"

    def growth() -> tuple[bool, str]:
        g = r["growth"]
        marginal = [m["year_s_per_extra_million_rows"] for m in g["marginal"]]
        linear = max(marginal) <= 2 * min(marginal) if marginal else False
        flat = g["new_day_time_ratio"] <= 1.3 and g["python_peak_ratio"] <= 1.3
        return linear and flat, (
            f"at {g['rows_ratio']:.1f}x the rows: {', '.join(f'{m:.2f}' for m in marginal)} s per extra million rows, "
            f"one day {x(g['new_day_time_ratio'])}, Python memory {x(g['python_peak_ratio'])}, the JVM's resident "
            f"peak {x(g['jvm_peak_ratio'])}"
        )

    def arrival(limit_up: float, limit_down: float | None) -> Callable[[], tuple[bool, str]]:
        def check() -> tuple[bool, str]:
            a = r["automation"]
            up, down = variant(a, "server_up"), variant(a, "server_down")
            parts, met = [], True
            for name, found, limit in (("long-lived Spark", up, limit_up), ("a JVM per run", down, limit_down)):
                if found is None:
                    met = False
                    continue
                hour, late = (found[k]["arrival_to_settled_seconds"] for k in ("new_hour", "late_rows"))
                met = met and (limit is None or max(hour, late) <= limit)
                parts.append(f"{name}: new hour {s(hour, 1)}, late rows {s(late, 1)}")
            return met, "; ".join(parts)

        return check

    def year() -> tuple[bool, str]:
        y = r["year"]
        first, last = y["median_cycle_first"], y["median_cycle_last"]
        own = [k for k in first if k not in ("total", "spark")]
        bookkeeping = sum(last[k] for k in own) / sum(first[k] for k in own)
        return y["last_over_first"] <= 1.2, (
            f"the last week's median cycle {x(y['last_over_first'])} the first week's ({s(last['total'])} vs "
            f"{s(first['total'])}); without the Spark work ({s(first['spark'])} -> {s(last['spark'])}) "
            f"{x(bookkeeping)}"
        )

    add("one new day costs at most 1/20 of a full refresh of a year, improving as history grows", incremental)
    add("single-run backfill within 1.3x of the plain-Spark floor", backfill)
    add("1,000 models load in at most 2 s, 5,000 in at most 10 s (issue 29, 3)", scale)
    add("Dagster's bookkeeping at most ~2 ms per partition, SQLite and Postgres", bookkeeping)
    add("the same data as an hourly and a daily model, 90 days, `run --auto`: at most 1.5x", hourly)
    add("one new day end to end under 5 s with the long-lived Spark up", new_day_5)
    add(
        "one new day through the CLI with the long-lived Spark: at most 1.0 s, at most 2x in process (issue 29, 2)",
        new_day_1,
    )
    add("the CLI's year backfill within 1.3x of the in-process single run", cli_year)
    add("the first large query after `spark start` within 1.3x of a warm one (issue 29, 4)", first_query)
    add("at least 2x faster than SQLMesh on the year and on one day, on equal terms (issue 29, 5)", sqlmesh)
    add("dbt-spark microbatch at least 10x slower on the backfill", dbt)
    add("growth: backfill time linear in rows, one day and Python memory flat", growth)
    add(
        "new data to every downstream model through the real daemon under 60 s with the long-lived Spark (issue 14)",
        arrival(60, None),
    )
    add(
        "new data and late rows to every model settled: 10 s with the long-lived Spark, 40 s without (issue 29, 1)",
        arrival(10, 40),
    )
    add("a year of hourly operation: the last week's cycle within 1.2x of the first's", year)
    return ["## Targets", "", *table(["target", "result in this run"], rows, right_from=2)]


# --- the sections -----------------------------------------------------------------------------------------------


def incremental(r: dict, out: Path) -> Lines:
    found = r["rows"]
    rows = [
        [
            f"{row['days']} days",
            s(row["full_refresh_s"]),
            s(row["one_new_day_s"]),
            f"1/{1 / row['ratio_day_to_full']:.1f}",
        ]
        for row in found
    ]
    picture = plot(
        out,
        "plot-history-length.svg",
        [
            ("full refresh of the history", [(row["days"], row["full_refresh_s"]) for row in found]),
            ("one new day", [(row["days"], row["one_new_day_s"]) for row in found]),
        ],
        x_label="days of history",
        y_label="seconds",
        title="Cost against history length (shop.order_lines, in process)",
    )
    return [
        "`shop.order_lines` (a three-way join; 5,000 orders a day) through `Executor.execute` in one warm Spark "
        "session: a full refresh of the whole history as one window against replacing the last day.",
        "",
        *table(["history", "full refresh", "one new day", "one day costs"], rows),
        "",
        picture,
    ]


def backfill(r: dict, out: Path) -> Lines:
    rows = [
        [
            "the plain floor: the rendered query over the same inputs, a partitioned `df.write.parquet`",
            s(r["floor_s"]),
            "1x",
        ],
        [
            "a single-run backfill: one window, staged write, one Delta commit",
            s(r["single_run_s"]),
            x(r["single_run_over_floor"]),
        ],
        [
            f"{r['per_interval_measured_runs']} one-day runs, one after the other",
            s(r["per_interval_runs_s"], 1),
            x(r["per_interval_over_floor"]),
        ],
    ]
    return [
        f"{r['days']} days of the same model, three ways, in one process and session:",
        "",
        *table(["what", "time", "ratio to the floor"], rows),
    ]


OVERHEAD_PATHS = {
    "bare": "bare query: registered inputs, `spark.sql`, plain parquet write (warm session)",
    "executor": "`Executor.execute` (pushdown, interval key, staged write, Delta commit), same process",
    "dagster": "in-process Dagster run (what every CLI interval is), same process",
    "cli": "`incremental-assets run` in a fresh process (Python, Dagster, project load, JVM start)",
    "dagster_cli": "`dagster asset materialize` in a fresh process",
    "connect_cli": "the CLI with the project's long-lived Spark up (`incremental-assets spark start`)",
}


def overhead(r: dict, out: Path) -> Lines:
    sec, ratio = r["seconds"], r["ratio_to_bare"]
    rows = [
        [label, s(sec[k]), "1x" if k == "bare" else x(ratio.get(k))] for k, label in OVERHEAD_PATHS.items() if k in sec
    ]
    rows.append(
        [
            "one CLI command over 1 vs 8 one-day intervals",
            f"{s(sec['cli_1_interval'])} vs {s(sec['cli_8_intervals'])}",
            f"{s(sec['cli_per_extra_interval'])} per extra interval",
        ]
    )
    return [
        "One day (5,000 orders) of `shop.order_lines` without audits; medians.",
        "",
        *table(["path", "median", "ratio to bare"], rows),
    ]


def scale(r: dict, out: Path) -> Lines:
    found = r["sizes"]
    rows = []
    for row in found:
        again = row["again"]
        rows.append(
            [
                f"{row['models']:,}",
                f"{s(row['parse_s'])} / {s(row['analyse_s'])} / {s(row['definitions_s'])}",
                s(row["load_s"]),
                f"{s(again['parse_s'])} / {s(again['analyse_s'])} / {s(again['definitions_s'])}",
                f"**{s(again['load_s'])}**",
                f"{row['max_rss_mb']:.0f} MB",
            ]
        )
    picture = plot(
        out,
        "plot-models.svg",
        [
            ("a first load (nothing kept)", [(row["models"], row["load_s"]) for row in found]),
            (
                "a later load (parsed models kept by file contents)",
                [(row["models"], row["again"]["load_s"]) for row in found],
            ),
            ("target: 2 ms per model", [(row["models"], row["models"] * 0.002) for row in found]),
        ],
        x_label="models in the project",
        y_label="seconds to load (median of fresh processes)",
        title="Loading a project against its number of models",
    )
    return [
        "Generated projects (incremental chains with joins and 7-day self-join lookbacks, FULL roll-ups), each "
        "size loaded in fresh processes: parse, safety analysis, Dagster Definitions; median of "
        f"{found[0].get('reps', '?')} first loads, then a later load of the same files.",
        "",
        *table(
            [
                "models",
                "first load: parse / analyse / Definitions",
                "first load",
                "later load: parse / analyse / Definitions",
                "later load",
                "peak RSS",
            ],
            rows,
        ),
        "",
        picture,
    ]


def bookkeeping(r: dict, out: Path) -> Lines:
    cli = r["cli_s"]
    rows = [
        [name, s(v["daily"]), s(v["hourly"]), x(v["hourly_over_daily"]), f"{v['ms_per_extra_partition']:.2f} ms"]
        for name, v in (
            ("Dagster's SQLite event log, one file per hour", cli["before"]),
            ("the project's batched event log, one file per hour", cli["hour_files"]),
            ("the project's batched event log, one file per day (the default)", cli["after"]),
            ("the same on PostgreSQL", r["postgres_cli_s"]),
        )
    ]
    store = [
        [name, s(v["one_partition_s"]), s(v["240_partitions_s"]), f"{v['ms_per_extra_partition']:.2f} ms"]
        for group in ("sqlite_options", "postgres")
        for name, v in r[group].items()
    ]
    return [
        f"The same data as a daily and as an hourly model, {r['days']} days ({r['partitions']['daily']} and "
        f"{r['partitions']['hourly']:,} partitions), `run --auto` each:",
        "",
        *table(["event log and layout", "daily", "hourly", "hourly / daily", "per extra partition"], rows),
        "",
        "Recording materializations of an asset with no work, one partition against 240:",
        "",
        *table(["storage", "1 partition", "240 partitions", "per extra partition"], store),
    ]


def spark_server(r: dict, out: Path) -> Lines:
    rows = [
        ["`incremental-assets spark start` (JVM, warm-up)", s(r["server_start_s"]), "paid once"],
        ["the CLI's year, the server's first large query", s(r["cli_year_first_after_start_s"]), "-"],
        [
            "the CLI's year, server up (median)",
            s(r["cli_year_server_up_s"]),
            f"{x(r['cli_year_server_up_over_in_process'])} the in-process year",
        ],
        ["the same year as one in-process single run", s(r["in_process_year_s"]), "1x"],
        ["the CLI's year, server down", s(r["cli_year_server_down_s"]), "-"],
        ["one new day, `run --auto`, server up (the command server)", f"**{s(r['new_day_server_up_s'])}**", "-"],
        [
            "one new day, server down",
            s(r["new_day_server_down_s"]),
            f"{x(r['new_day_down_over_up'])} the day with the server",
        ],
    ]
    if "new_day_ab_cli_s" in r:
        every = r.get("new_day_ab_every_run_s", {})
        for key, label in (
            ("in_process", "one new day, in process (`Executor.execute`, warm session), in turns with:"),
            ("cli", "one new day, the command handed to the command server"),
            ("cli_own_process", "one new day, the same command in its own process"),
        ):
            runs = ", ".join(f"{t:.2f}" for t in every.get(key, []))
            rows.append([label, s(r[f"new_day_ab_{key}_s"]), f"every run: {runs}"])
    without = r.get("cli_year_without_s", {})
    rows += [[f"the CLI's year without {k.replace('_', ' ')}", s(v), "-"] for k, v in without.items()]
    return [
        f"One project ({r['days']} days of `shop.order_lines`, {r['orders_per_day']:,} orders a day); every command "
        "in a fresh process.",
        "",
        *table(["what", "median", "ratio"], rows),
    ]


def automation(r: dict, out: Path) -> Lines:
    rows = []
    for name in ("server_up", "server_down"):
        found = variant(r, name)
        if found is None:
            continue
        for arrival in ("new_hour", "late_rows"):
            a = found[arrival]
            runs = a.get("runs_computed", [])
            span = [f"{run['started']:.1f}-{run['ended']:.1f} s" for run in runs]
            rows.append(
                [
                    "long-lived Spark" if found.get("spark_server") else "a JVM per run",
                    arrival.replace("_", " "),
                    f"**{s(a['arrival_to_settled_seconds'], 1)}**",
                    str(a["runs"]),
                    ", ".join(span),
                ]
            )
    return [
        "The example shop, 37 days; the real `dagster-daemon` with the project's instance and the automation "
        "sensor on. Two arrivals on the same daemon: the last hour of a Saturday (completing the day and the "
        "week), then late rows for a Tuesday long computed. Measured from the append to every model settled "
        "(nothing queued or running, the automation finding nothing more to do). One sample of each.",
        "",
        *table(
            ["Spark", "arrival", "to every model settled", "runs", "each run: started-ended after the arrival"],
            rows,
            right_from=2,
        ),
    ]


def peer(r: dict, out: Path) -> Lines:
    rows = [["ours (`incremental-assets`)", s(r["backfill_ours_s"], 1), s(r["day_ours_s"])]]
    if "backfill_sqlmesh_s" in r:
        rows.append(
            [
                "SQLMesh (`sqlmesh plan` backfill; one new day)",
                f"{s(r['backfill_sqlmesh_s'], 1)} ({x(r['backfill_sqlmesh_over_ours'])})",
                f"{s(r['day_sqlmesh_s'])} ({x(r['day_sqlmesh_over_ours'])}); "
                f"`sqlmesh run` {s(r.get('day_sqlmesh_run_s'))}",
            ]
        )
    if "backfill_dbt_s" in r:
        rows.append(
            [
                "dbt-spark microbatch",
                f"{s(r['backfill_dbt_s'], 1)} ({x(r['backfill_dbt_over_ours'])})",
                f"{s(r['day_dbt_s'])} ({x(r['day_dbt_over_ours'])})",
            ]
        )
    notes = [f"* ours: {r.get('ours_spark', 'a local Spark started by each command')}"]
    notes += [f"* {k.replace('_', ' ')}: {r[k]}" for k in ("peer_sqlmesh", "sqlmesh_spark", "peer") if k in r]
    checks = [k for k in ("sqlmesh_check", "dbt_check") if k in r]
    notes.append(f"* every peer's table checked equal to ours on two days ({', '.join(checks)})")
    return [
        f"The same model body, the same data ({r['days']} days, {r['orders_per_day']:,} orders a day), every "
        "side as a command in a fresh process; medians, the sides interleaved.",
        "",
        *table(["side", f"{r['days']}-day backfill", "one new day"], rows),
        "",
        *notes,
    ]


def growth(r: dict, out: Path) -> Lines:
    sizes = r["sizes"]
    rows = [
        [
            f"{size['orders_per_day']:,}",
            f"{size['year_rows'] / 1e6:.1f} M",
            s(size["year"]["seconds"], 1),
            f"{size['year_s_per_million_rows']:.2f} s",
            s(size["new_day"]["seconds"]),
            f"{size['year']['python_peak_mb']} MB",
            f"{size['year']['jvm_peak_mb']:,} / {size['new_day']['jvm_peak_mb']:,} MB",
        ]
        for size in sizes
    ]
    millions = [size["year_rows"] / 1e6 for size in sizes]
    picture = plot(
        out,
        "plot-rows.svg",
        [
            ("the year's backfill (CLI)", list(zip(millions, [size["year"]["seconds"] for size in sizes]))),
            ("one new day (CLI)", list(zip(millions, [size["new_day"]["seconds"] for size in sizes]))),
        ],
        x_label="rows of the year (millions)",
        y_label="seconds (fresh process, JVM start included)",
        title="Cost against rows",
    )
    return [
        f"The same year ({r['days']} days) at several sizes; the CLI's backfill and one new day in fresh processes.",
        "",
        *table(
            [
                "orders a day",
                "rows of the year",
                "year backfill",
                "per million rows",
                "one new day",
                "Python peak",
                "JVM resident peak (year / day)",
            ],
            rows,
        ),
        "",
        picture,
    ]


def changes(r: dict, out: Path) -> Lines:
    rows = [
        [f"before the column-level plan (`{r['baseline']}`)", s(r["before_s"])],
        ["this checkout", f"**{s(r['after_s'])}** ({x(r['speedup'])} faster)"],
    ]
    return [
        f"One column added to `shop.order_lines` after a year ({r['days']} days, {r['orders_per_day']:,} orders a "
        "day); `run --auto` of the change:",
        "",
        *table(["product", "`run --auto` of the change"], rows),
    ]


def log_history(r: dict, out: Path) -> Lines:
    found = r["rows"]
    rows = [
        [
            f"{row['commits']:,}",
            f"{row['open_before_ms']:.0f} / {row['open_after_ms']:.0f} ms",
            f"{row['check_full_ms']:.0f} / {row['check_since_ms']:.0f} ms",
            f"{row['plan_ms']:.0f} ms",
            str(row["log_files_after"]),
        ]
        for row in found
    ]
    picture = plot(
        out,
        "plot-commits.svg",
        [
            ("integrity check reading the whole log", [(row["commits"], row["check_full_ms"]) for row in found]),
            ("integrity check from its last look", [(row["commits"], row["check_since_ms"]) for row in found]),
            ("opening the table (checkpoints)", [(row["commits"], row["open_after_ms"]) for row in found]),
            ("the plan of `run --auto`", [(row["commits"], row["plan_ms"]) for row in found]),
        ],
        x_label="commits in the table's log",
        y_label="milliseconds",
        title="Cost against a table's history",
    )
    return [
        "An hourly table with 10 to 3,000 commits: opening it and the integrity check, without and with "
        "checkpoints and the check's last look.",
        "",
        *table(
            [
                "commits",
                "open: no checkpoints / checkpoints",
                "integrity: whole log / from last look",
                "plan",
                "log files",
            ],
            rows,
        ),
        "",
        picture,
    ]


def year(r: dict, out: Path) -> Lines:
    ran = r["what_ran"]
    phases = [k for k in r["median_cycle_first"] if k != "total"]
    rows = [
        [phase, s(r["median_cycle_first"][phase], 3), s(r["median_cycle_last"][phase], 3)]
        for phase in [*phases, "total"]
    ]
    equal = all(v.get("equal") for v in r.get("recompute", {}).values())
    days = r.get("days", [])
    last = days[-1] if days else {}
    lines = [
        f"{ran.get('simulated_hours', '?'):,} simulated hours: the first and last "
        f"{ran.get('first_hourly_days')} / {ran.get('last_hourly_days')} days hourly (append, late and empty hours, "
        f"`run --auto --end <hour>`, daily maintenance), {ran.get('forward_days')} days between fast-forwarded.",
        "",
        *table(["phase of a cycle (median)", "first week", "last week"], rows),
        "",
        f"* last / first: **{x(r['last_over_first'])}**; the tables equal a recompute: {'yes' if equal else 'no'}",
    ]
    if last:
        lines.append(
            f"* at the end: {last.get('active_files')} active files for {last.get('day')} days, "
            f"{last.get('log_checkpoints')} checkpoints, Dagster storage "
            f"{last.get('dagster_bytes_per_partition', 0) / 1000:.1f} KB a partition, the process "
            f"{last.get('rss_mb')} MB, the JVM {last.get('jvm_rss_mb')} MB resident"
        )
    if (out / "year-cost-per-cycle.svg").exists():
        lines += ["", "![cost per cycle over the year](year-cost-per-cycle.svg)"]
    return lines


SECTIONS: list[tuple[str, str, Callable[[dict, Path], Lines]]] = [
    ("incremental", "Incremental against a full refresh", incremental),
    ("backfill", "Backfill execution", backfill),
    ("overhead", "Per-run overhead", overhead),
    ("scale", "Scale of the project", scale),
    ("bookkeeping", "Dagster's bookkeeping per partition", bookkeeping),
    ("spark_server", "A long-lived Spark (`incremental-assets spark start`)", spark_server),
    ("automation", "New data through the daemon alone", automation),
    ("peer", "Against peers", peer),
    ("growth", "Growth with the data", growth),
    ("changes", "A change of a model: one column added after a year", changes),
    ("log_history", "A table's history: checkpoints and the integrity check", log_history),
    ("year", "A year of hourly operation", year),
]


def head(r: dict) -> Lines:
    m = r["machine"]
    v = m["versions"]
    loads = ", ".join(
        f"{name} {r[name]['load_average_after'][0]:.1f}"
        for name, _, _ in SECTIONS
        if isinstance(r.get(name), dict) and "load_average_after" in r[name]
    )
    return [
        "# Benchmark results",
        "",
        "Written by `benchmarks/report.py` from **one invocation of the runner on an otherwise idle machine**; "
        "nothing below is edited by hand"
        + (
            " (a scenario measured again in an invocation of its own says so in its section)"
            if any(isinstance(v, dict) and "invocation" in v for v in r.values())
            else ""
        )
        + ". Raw figures: [`results.json`](results.json); how each scenario works: "
        "[docs/benchmarks.md](../docs/benchmarks.md); earlier runs, the A/B measurement of each change and the "
        "investigations behind the figures: [HISTORY.md](HISTORY.md).",
        "",
        "    "
        + " ".join(
            [*(f"{k}={v}" for k, v in sorted(r.get("environment", {}).items())), ".venv/bin/python", r["command"]]
        ),
        "",
        f"Started {r['started']}, finished {r.get('finished', '?')}; load average "
        f"{r['load_average_at_start'][0]:.1f} at the start, after each scenario: {loads} (the benchmark's own "
        f"work on {m['cpus']} cores). Medians of "
        f"{r['reps']} repetitions where not said otherwise, {r['orders_per_day']:,} orders a day.",
        "",
        f"Machine: {m['cpus']} vCPU ({m['cpu_model']}), {m['memory_gb']} GB RAM, {m['platform']}, Python "
        f"{m['python']}, {m['java']}, Spark {v['pyspark']} local[2] (driver memory 4g), deltalake "
        f"{v['deltalake']}, dagster {v['dagster']}, sqlglot {v['sqlglot']}.",
        "",
    ]


def render(results: dict, out: Path) -> str:
    lines = head(results) + targets(results) + [""]
    for number, (key, title, section) in enumerate(SECTIONS, start=1):
        lines += [f"## {number}. {title}", ""]
        found = results.get(key)
        if not isinstance(found, dict):
            lines += ["Not run in this invocation.", ""]
        elif "error" in found:
            lines += [f"Failed in this invocation: `{found['error'].splitlines()[0][:300]}`", ""]
        else:
            apart = found.get("invocation")  # a scenario measured again in an invocation of its own
            try:
                lines += [*section(found, out), "", f"({found.get('scenario_seconds', '?')} s for the scenario.)", ""]
                lines += [f"**Measured in an invocation of its own:** {apart}", ""] if apart else []
            except (KeyError, TypeError, IndexError) as exc:  # a runner older than this report
                lines += [f"This run's figures lack what the section shows ({type(exc).__name__}: {exc}).", ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> None:
    source = Path(argv[0]) if argv else HERE / "results.json"
    results: dict[str, Any] = json.loads(source.read_text())
    (HERE / "RESULTS.md").write_text(render(results, HERE))
    print(f"written {HERE / 'RESULTS.md'} from {source}")


if __name__ == "__main__":
    main(sys.argv[1:])
