"""Fuzzing every file a user writes: a model file, sources.yaml, incremental_assets.yaml and the unit-test
YAML. Any input gives a model (or settings, sources, tests) or a diagnostic naming the file, never a
traceback. ``IA_FUZZ_EXAMPLES`` sets the cases per target (default 150; e.g. 20000 for a long run)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from incremental_assets.errors import IncrementalAssetsError, ModelFileError, ProjectError
from incremental_assets.load.model_file import parse_model_file
from incremental_assets.load.project import load_project
from incremental_assets.load.settings import load_settings
from incremental_assets.load.sources import load_sources
from incremental_assets.spark.model_tests import load_model_tests

EXAMPLES = int(os.environ.get("IA_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)

# Pieces of real headers, so the fuzzer reaches deep into the parser, not only its first check.
TOKENS = [
    "MODEL",
    "(",
    ")",
    ",",
    ";",
    "name",
    "s.a",
    "kind",
    "FULL",
    "VIEW",
    "INCREMENTAL_BY_TIME_RANGE",
    "time_column",
    "ds",
    "start",
    "end",
    "'2024-01-01'",
    "'2024-13-45'",
    "'yesterday'",
    "cron",
    "'@daily'",
    "'@hourly'",
    "interval_unit",
    "hour",
    "day",
    "week",
    "lookback",
    "batch_size",
    "2",
    "-1",
    "0",
    "1e9",
    "[",
    "]",
    "=",
    "'",
    '"',
    "columns",
    "(a INT, b STRING)",
    "grain",
    "audits",
    "owner",
    "tags",
    "dialect",
    "duckdb",
    "nonsense",
    "allow_window_functions",
    "true",
    "--",
    "/*",
    "*/",
    "\n",
    " ",
    "\t",
    "SELECT",
    "1",
    "FROM",
    "raw.events",
    "@start_ds",
    "@end_dt",
    "WHERE",
    "ds BETWEEN @start_ds AND @end_ds",
    "time_format",
    "'%Y-%m-%d'",
    "@",
    "\\",
    "\x00",
    "é",
]
header_text = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(TOKENS), max_size=40).map(" ".join),
    st.lists(st.sampled_from(TOKENS), max_size=40).map("".join),
)
VALID = (
    "MODEL (name s.a, kind INCREMENTAL_BY_TIME_RANGE (time_column ds, lookback 1), start '2024-01-01', "
    "cron '@daily');\n"
    "SELECT ds, COUNT(*) AS n FROM raw.events WHERE ds BETWEEN @start_ds AND @end_ds GROUP BY ds\n"
)


@st.composite
def mutated_valid(draw) -> str:
    """A valid model file with a slice removed, duplicated or replaced by a header token."""
    text = VALID
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 12)))
        text = text[:i] + draw(st.one_of(st.just(""), st.sampled_from(TOKENS), st.just(text[i:j] * 2))) + text[j:]
    return text


yaml_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.sampled_from(
        [
            "raw.events",
            "delta",
            "csv",
            "parquet",
            "ts",
            "hour",
            "day",
            "data/x",
            "s3://b/x",
            "2024-01-01",
            "bigint",
            "local[1]",
            "sc://h",
            "a\x00b",
        ]
    ),
)
yaml_data = st.recursive(
    yaml_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(
                st.sampled_from(
                    [
                        "name",
                        "location",
                        "format",
                        "columns",
                        "time_column",
                        "interval_unit",
                        "sources",
                        "warehouse",
                        "spark",
                        "conf",
                        "master",
                        "remote",
                        "timezone",
                        "dialect",
                        "dagster_home",
                        "model",
                        "inputs",
                        "outputs",
                        "query",
                        "ctes",
                        "vars",
                        "start",
                        "end",
                        "rows",
                        "s.a",
                        "raw.events",
                        "test_a",
                    ]
                ),
                st.text(max_size=8),
            ),
            inner,
            max_size=5,
        ),
    ),
    max_leaves=20,
)
yaml_text = st.one_of(st.text(max_size=200), yaml_data.map(lambda d: yaml.safe_dump(d, allow_unicode=True)))


def _diagnosed(exc: Exception, path: Path) -> None:
    """Only our errors, each naming the file the user must fix."""
    assert isinstance(exc, IncrementalAssetsError), f"{type(exc).__name__}: {exc}"
    errors = exc.errors if isinstance(exc, ProjectError) else [exc]
    for error in errors:
        assert isinstance(error, ModelFileError), f"{type(error).__name__}: {error}"
        assert error.path and Path(error.path).name == path.name, error.render()


@FUZZ
@given(text=st.one_of(header_text, mutated_valid()))
def test_model_files_parse_or_name_file_and_line(text):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "a.sql"
        path.write_text(text, encoding="utf-8")
        try:
            parse_model_file(path)
        except Exception as exc:  # judged below: only diagnostics with file and line
            _diagnosed(exc, path)
            assert (
                exc.line is not None
                or "not UTF-8" in exc.message
                or "no MODEL" in exc.message
                or "empty" in exc.message
            ), exc.render()


LOADERS = {
    "sources.yaml": lambda path: load_sources(path, path.parent),
    "incremental_assets.yaml": lambda path: load_settings(path.parent, environ={}),
}


@pytest.mark.parametrize("name", sorted(LOADERS))
@FUZZ
@given(text=yaml_text)
def test_sources_and_settings_yaml_load_or_name_the_file(name, text):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(text, encoding="utf-8", errors="replace")
        try:
            LOADERS[name](path)
        except Exception as exc:
            _diagnosed(exc, path)


@FUZZ
@given(text=yaml_text)
def test_unit_test_yaml_loads_or_names_the_file(text):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "models").mkdir()
        (root / "models" / "a.sql").write_text(VALID.replace("raw.events", "s.b"))
        (root / "models" / "b.sql").write_text("MODEL (name s.b, kind FULL); SELECT CAST('2024-01-01' AS DATE) AS ds\n")
        (root / "tests").mkdir()
        path = root / "tests" / "test_a.yaml"
        path.write_text(text, encoding="utf-8", errors="replace")
        project = load_project(root)
        try:
            load_model_tests(project)
        except Exception as exc:
            _diagnosed(exc, path)
