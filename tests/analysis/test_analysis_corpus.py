"""The corpus: one SQL model per file under corpus/, its expected class, reasons and bounds in a header.

Header (leading ``--`` comment lines, YAML)::

    -- why: what the case shows
    -- sources: {raw.events: ts, dim.users: null}   # table -> time column (null: no time dimension)
    -- event_time_columns: {raw.events: [event_ts, day]}   # optional: event-time column, partition unit
    -- time_column: ds          # the model's output time column
    -- interval: 1d             # 1h, 1d, 7d (week), 31d (month), 92d, 366d, or 15m ...
    -- dialect: spark           # optional
    -- overrides: [allow_limit] # optional
    -- declared_lookback: 2     # optional, in intervals
    -- expect:
    --   class: Refused
    --   batch_limit: 1         # optional; default None
    --   reasons: [window_function@7, lookback_underivable]   # rule, or rule@line (line in this file)
    --   bounds: {raw.events: [PT30M, PT0S], dim.users: null}
    --   columns: {raw.events: event_ts}   # optional: the column each bound is in

The whole file is parsed, so reported lines are lines of the file.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from analysis_sql import parse_model_sql

from incremental_assets.analysis import analyze_query, describe_bound

CORPUS = Path(__file__).parent / "corpus"
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


def _header(text: str) -> dict:
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line[3:] if line.startswith("-- ") else line[2:])
    return yaml.safe_load("\n".join(lines))


def _interval(text: str) -> timedelta:
    match = re.fullmatch(r"(\d+)([mhd])", text)
    assert match, f"bad interval {text!r}"
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


CASES = sorted(CORPUS.glob("*.sql"))


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 60


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus_case(path: Path):
    text = path.read_text()
    case = _header(text)
    expect = case["expect"]
    dialect = case.get("dialect", "spark")
    analysis = _analysis(parse_model_sql(text, dialect), case, dialect)
    shown = "\n".join(f"  {r.rule}@{r.line}: {r.message}" for r in analysis.reasons)

    assert analysis.safety_class == expect["class"], shown
    assert analysis.batch_limit == expect.get("batch_limit"), shown
    assert analysis.refused == (expect["class"] == "Refused")

    expected_reasons = [str(r) for r in expect.get("reasons", [])]
    assert Counter(r.rule for r in analysis.reasons) == Counter(r.split("@")[0] for r in expected_reasons), shown
    for wanted in expected_reasons:
        if "@" in wanted:
            rule, line = wanted.split("@")
            assert any(r.rule == rule and r.line == int(line) for r in analysis.reasons), f"{wanted} not in\n{shown}"
    for reason in analysis.reasons:
        assert reason.message, reason

    bounds = {
        name: None if bound is None else [describe_bound(bound)["before"], describe_bound(bound)["after"]]
        for name, bound in analysis.bounds.items()
    }
    assert bounds == expect.get("bounds", {}), shown
    for name, column in (expect.get("columns") or {}).items():
        assert analysis.bounds[name].column == column, shown


def _analysis(query, case: dict, dialect: str):
    return analyze_query(
        query,
        model_name=case.get("model", "shop.model"),
        time_column=case["time_column"],
        time_columns=case["sources"],
        interval=_interval(case.get("interval", "1d")),
        overrides=frozenset(case.get("overrides", [])),
        declared_lookback=case.get("declared_lookback"),
        dialect=dialect,
        event_time_columns={name: tuple(v) for name, v in (case.get("event_time_columns") or {}).items()},
    )


def _analysed(query, case: dict, dialect: str) -> tuple:
    analysis = _analysis(query, case, dialect)
    bounds = {name: b and (b.before, b.after, b.column) for name, b in analysis.bounds.items()}
    return analysis.safety_class, analysis.batch_limit, sorted((r.rule, r.line) for r in analysis.reasons), bounds


def test_every_case_reads_the_same_as_the_loader_leaves_its_query():
    """The loader rewrites a query so that it keeps its dialect's meaning on Spark (DuckDB's date arithmetic,
    list indexes, functions Spark names otherwise); the analysis reads each case the same after those rewrites,
    in the case's dialect and in DuckDB's, where the case parses in it."""
    from sqlglot.errors import SqlglotError

    from incremental_assets.load.query import parse_model_body

    compared, differ = 0, []
    for path in CASES:
        text = path.read_text()
        case = _header(text)
        for dialect in dict.fromkeys((case.get("dialect", "spark"), "duckdb")):
            try:
                written = _analysed(parse_model_sql(text, dialect), case, dialect)
            except (SqlglotError, ValueError):
                continue  # not SQL of that dialect
            query = parse_model_body(text, dialect=dialect, this_model=case.get("model", "shop.model")).query
            loaded = _analysed(query, case, dialect)
            compared += 1
            if loaded != written:
                differ.append(f"{path.stem} ({dialect}): {written} as written, {loaded} as loaded")
    assert compared >= 2 * len(CASES) - 5
    assert differ == []
