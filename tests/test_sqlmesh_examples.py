"""SQLMesh's own example projects (sushi, wursthall, ibis, multi), from the source distribution of the pinned
SQLMesh on the package index, run unchanged through our CLI (`validate`, `run --auto` over a fixed range,
`test`, the same `run --auto` again with nothing new) and give the tables real SQLMesh gives on DuckDB over the
same range.

The distribution is downloaded at test time into ``tests/.sqlmesh-examples`` (git-ignored, reused when present);
each example is copied into a temporary folder, once for SQLMesh and once for us. What the examples import is
installed where a user would: faker and ibis-framework into SQLMesh's venv (with SQLMesh's BigQuery extra, which
sushi's ``config.py`` needs to build its ``bigquery_config``, and the ``custom_materializations`` package of
the same ``examples/`` folder, which sushi's CUSTOM models name), and faker and ibis-framework into the
environment running our CLI, holding every package already installed there at its version.

Where an example is not deterministic, only what is deterministic is compared and the rest is named in
``NOT_COMPARED`` with the reason; nothing is skipped without a word.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path

import pytest

from sqlmesh_venv import SQLMESH_VERSION, VENV, installing, sqlmesh_python, text_rows

pytestmark = [pytest.mark.slow, pytest.mark.sqlmesh]

HERE = Path(__file__).parent
ROOT = HERE.parent
CACHE = HERE / ".sqlmesh-examples"
# ibis-framework 12.0.0 requires sqlglot>=23.4 (not 26.32.0), pandas<4, pyarrow>=10, numpy<3: it fits our
# sqlglot>=30,<31, pandas<3 and pyarrow<27, so it installs beside them without moving any of them.
EXAMPLE_REQUIREMENTS = ["faker==40.63.0", "ibis-framework[duckdb]==12.0.0"]
CLI_TIMEOUT = 600


@dataclass(frozen=True)
class Example:
    folders: tuple[str, ...]  # the project folders, relative to the example (multi: two repos as one)
    database: str  # SQLMesh's DuckDB file, relative to the example
    gateway: str | None = None  # SQLMesh's gateway with that file (the default ones are in memory)
    end: date | None = None  # the fixed range's exclusive end (None: today, UTC: relative starts)
    # Files of the example SQLMesh 0.236.4 itself fails to run on DuckDB: removed from SQLMesh's copy only.
    theirs_without: dict[str, str] = field(default_factory=dict)


EXAMPLES = {
    "sushi": Example(
        ("sushi",),
        "data/duckdb.db",
        "duckdb_persistent",
        theirs_without={
            "models/latest_order.sql": "its materialization custom_full_with_custom_kind asserts the model's kind is "
            "ExtendedCustomKind, which SQLMesh's loader does not give it (AssertionError)",
        },
    ),
    "wursthall": Example(("wursthall",), "duckdb.db", "duckdb_persistent", end=date(2022, 6, 8)),
    "ibis": Example(
        ("ibis",),
        "data/local.duckdb",
        end=date(2020, 1, 8),
        theirs_without={
            "models/ibis_full_model_python.py": "it opens SQLMesh's DuckDB file by path while SQLMesh holds it "
            "attached: "
            "'Unique file handle conflict' (BinderException)",
        },
    ),
    "multi": Example(("repo_1", "repo_2"), "db.duckdb"),
}

_UNSEEDED = "built from an unseeded random (Python's random / numpy) in sushi.orders and sushi.items"
# Tables compared by their columns only (and present on both sides), with why their rows cannot be compared.
NOT_COMPARED = {
    "sushi.orders": "random.randint / random.choices without a seed",
    "sushi.items": "random.randint, random.sample and np.random.uniform without a seed",
    "sushi.order_items": "items.sample(n) and np.random.randint without a seed, over the unseeded orders and items",
    "sushi.raw_marketing": "random.randint / random.sample without a seed (only numpy is seeded); updated_at is the "
    "execution time",
    "sushi.marketing": "SCD type 2 over sushi.raw_marketing (unseeded, stamped with the execution time)",
    "sushi.customers": _UNSEEDED + " and sushi.raw_marketing",
    "sushi.count_customers_active": _UNSEEDED + " and sushi.raw_marketing",
    "sushi.count_customers_inactive": _UNSEEDED + " and sushi.raw_marketing",
    "sushi.customer_revenue_by_day": _UNSEEDED,
    "sushi.customer_revenue_lifetime": _UNSEEDED,
    "sushi.top_waiters": _UNSEEDED,
    "sushi.waiter_revenue_by_day": _UNSEEDED,
    "sushi.waiter_as_customer_by_day": _UNSEEDED,
    "sushi.active_customers": _UNSEEDED + " and sushi.raw_marketing",
}
# Columns compared by presence only (NULL or not), with why their values cannot be compared.
_BY_POSITION = (
    "a registered customer is picked by its position in `SELECT id, register_ds FROM src.customer_details "
    "WHERE ...` without ORDER BY, so which id depends on the engine's row order"
)
PARTLY_COMPARED = {
    "src.order_item_details": {"customer_id": _BY_POSITION},
    "db.order_item_f": {"customer_id": _BY_POSITION},
    "db.order_f": {"customer_id": _BY_POSITION},
}
# sushi's CUSTOM models: their materializations come from the examples' custom_materializations package. With it
# installed they run (as FULL: each class only replaces the table with the query); without it `validate` refuses
# them, naming file, line and fix (test_custom_materializations_stay_refused), as SQLMesh itself cannot load them.
CUSTOM = {"sushi.active_customers": "models/active_customers.sql", "sushi.latest_order": "models/latest_order.sql"}
# Models of an example that fail on our side with one clear line naming the model, and why; the other models of
# the example run and are compared. The run exits 1 for them.
FAILING = {
    "ibis.ibis_full_model_python": "it opens data/local.duckdb, SQLMesh's own DuckDB file, with ibis and calls "
    "con.table(name=...), which ibis-framework 12 refuses (name is positional-only); "
    "SQLMesh 0.236.4 cannot run it either (see EXAMPLES['ibis'].theirs_without)",
}
# Tables on SQLMesh's side that are not models: what before_all / after_all create, external models.
NOT_MODELS = {"raw.demographics", "main.before_1", "main.before_2", "main.after_1", "main.after_2"}

# Run in SQLMesh's venv: every table and view of the virtual layer (not SQLMesh's own schemas), with its
# columns and rows.
DUMP = """
import datetime, decimal, duckdb, json, sys
def cell(v):  # decimals as numbers, aware timestamps as naive UTC (as our rows are read)
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, datetime.datetime) and v.tzinfo:
        v = v.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return str(v)
c = duckdb.connect(sys.argv[1], read_only=True)
out = {}
own = "table_schema = 'sqlmesh' OR starts_with(table_schema, 'sqlmesh__')"  # SQLMesh's own schemas
for catalog, schema, name in c.execute("SELECT table_catalog, table_schema, table_name FROM information_schema.tables "
                                       f"WHERE NOT ({own})").fetchall():
    result = c.execute(f'SELECT * FROM "{catalog}"."{schema}"."{name}"')
    out[f"{schema}.{name}"] = {"columns": [d[0] for d in result.description], "rows": result.fetchall()}
print(json.dumps(out, default=cell))
"""


def examples_folder() -> Path:
    """SQLMesh's ``examples/`` of the pinned version, from its source distribution (downloaded once)."""
    examples = CACHE / f"sqlmesh-{SQLMESH_VERSION}" / "examples"
    if examples.is_dir():
        return examples
    CACHE.mkdir(exist_ok=True)
    sdist = CACHE / f"sqlmesh-{SQLMESH_VERSION}.tar.gz"
    if not sdist.exists():
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"sqlmesh=={SQLMESH_VERSION}",
                "-d",
                str(CACHE),
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not sdist.exists():
            pytest.skip(f"cannot download SQLMesh's source distribution: {done.stderr.strip().splitlines()[-1:]}")
    prefix = f"sqlmesh-{SQLMESH_VERSION}/examples/"
    with tarfile.open(sdist) as tar:
        tar.extractall(CACHE, members=[m for m in tar.getmembers() if m.name.startswith(prefix)], filter="data")
    return examples


def _our_custom_materializations(folder: Path) -> Path:
    """The examples' custom_materializations package for our CLI, installed into a folder of its own (put on
    PYTHONPATH by :func:`our_cli`) so that sushi can also be run without it. ``--no-deps``: the package requires
    sqlmesh, which our environment does not need (its classes are read, never imported)."""
    target = CACHE / "ours-custom-materializations"
    if not any(target.glob("custom_materializations-*.dist-info")):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                str(target),
                str(folder / "custom_materializations"),
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot install custom_materializations: {done.stderr.strip().splitlines()[-1:]}")
    return target


def _our_requirements() -> None:
    """faker and ibis-framework in the environment running our CLI, every installed package held at its version."""
    probe = "import faker, ibis, ibis.backends.duckdb"
    if subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0:
        return
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"], capture_output=True, text=True, check=True
    ).stdout
    constraints = CACHE / "constraints.txt"
    constraints.write_text("".join(line + "\n" for line in frozen.splitlines() if "==" in line))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "-c", str(constraints), *EXAMPLE_REQUIREMENTS],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot install {EXAMPLE_REQUIREMENTS}: {done.stderr.strip().splitlines()[-1:]}")


@pytest.fixture(scope="module")
def examples() -> Path:
    with installing():
        folder = examples_folder()
        sqlmesh_python(
            f"sqlmesh[bigquery]=={SQLMESH_VERSION}",
            "google-cloud-bigquery>=3",
            *EXAMPLE_REQUIREMENTS,
            str(folder / "custom_materializations"),
            probe="import faker, ibis, google.cloud.bigquery, custom_materializations",
        )
        _our_requirements()
        _our_custom_materializations(folder)
    return folder


def _end(example: Example) -> date:
    return example.end or datetime.now(timezone.utc).date()


def _sqlmesh(cwd: Path, example: Example, *args: str) -> subprocess.CompletedProcess:
    paths = [a for folder in example.folders for a in ("-p", folder)] if len(example.folders) > 1 else []
    gateway = ["--gateway", example.gateway] if example.gateway else []
    done = subprocess.run(
        [str(VENV / "bin" / "sqlmesh"), *paths, *gateway, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
    )
    assert done.returncode == 0, f"sqlmesh {' '.join(args)} in {cwd}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done


def _project_dirs(root: Path, example: Example) -> list[Path]:
    return [root / folder for folder in example.folders] if len(example.folders) > 1 else [root]


def _copy(examples: Path, name: str, to: Path) -> Path:
    shutil.copytree(
        examples / name, to, ignore=shutil.ignore_patterns("__pycache__", "logs", ".cache", "*.duckdb", "*.db")
    )
    return to


def run_sqlmesh(examples: Path, name: str, root: Path) -> dict:
    """SQLMesh's plan over the fixed range (its execution time the range's end), its unit tests, and every table."""
    example = EXAMPLES[name]
    _copy(examples, name, root)
    for path in example.theirs_without:
        (root / path).unlink()
    (root / example.database).parent.mkdir(parents=True, exist_ok=True)
    _sqlmesh(root, example, "test")
    _sqlmesh(
        root,
        example,
        "plan",
        "--auto-apply",
        "--no-prompts",
        "--skip-tests",
        "--execution-time",
        _end(example).isoformat(),
    )
    dumped = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", DUMP, str(root / example.database)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(dumped.stdout)


@pytest.fixture(scope="module")
def theirs(examples, tmp_path_factory):
    """SQLMesh's tables per example, each example run once for the module."""
    done: dict[str, dict] = {}

    def tables(name: str) -> dict:
        if name not in done:
            done[name] = run_sqlmesh(examples, name, tmp_path_factory.mktemp("theirs") / name)
        return done[name]

    return tables


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_sqlmesh_runs_its_example(theirs, name):
    """The reference side: SQLMesh's plan and tests pass on DuckDB and give a non-empty table per model."""
    tables = theirs(name)
    models = {t: v for t, v in tables.items() if t not in NOT_MODELS}
    assert models and all(v["rows"] for v in models.values()), {t: len(v["rows"]) for t, v in models.items()}


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("INCREMENTAL_ASSETS_", "DAGSTER_", "SPARK_", "PYSPARK_"))
    }
    env.update(
        TZ="UTC", PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]), **extra
    )
    return env


def _cli(cwd: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "incremental_assets.cli", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
    )


@pytest.fixture(scope="module")
def spark_remote(tmp_path_factory):
    """One long-lived Spark Connect server (``incremental-assets spark start``) every example's commands use
    through ``INCREMENTAL_ASSETS_SPARK_REMOTE``: one JVM start for the module instead of one per command.
    Stopped by its PID, also when a test fails."""
    home = tmp_path_factory.mktemp("spark-server")
    (home / "models").mkdir()
    _ok(_cli(home, ["spark", "start", "--project", str(home)], clean_env()), "spark start")
    status = json.loads(_cli(home, ["spark", "status", "--json", "--project", str(home)], clean_env()).stdout)
    try:
        yield status["url"]
    finally:
        _cli(home, ["spark", "stop", "--project", str(home)], clean_env())
        if status.get("pid") and Path(f"/proc/{status['pid']}").exists():
            os.kill(status["pid"], signal.SIGKILL)


def our_cli(root: Path, example: Example, remote: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m incremental_assets.cli <args> --project <folder> ...``, in the example's folder."""
    projects = [a for folder in _project_dirs(root, example) for a in ("--project", str(folder))]
    env = clean_env(INCREMENTAL_ASSETS_SPARK_REMOTE=remote)
    env["PYTHONPATH"] = os.pathsep.join([str(CACHE / "ours-custom-materializations"), env["PYTHONPATH"]])
    return _cli(root, [*args, *projects], env)


def _ok(done: subprocess.CompletedProcess, what: str) -> None:
    assert done.returncode == 0, f"{what}: exit {done.returncode}\n{done.stdout[-4000:]}{done.stderr[-4000:]}"
    assert "Traceback" not in done.stdout + done.stderr, what


def our_tables(root: Path, example: Example, names: list[str], request) -> dict[str, dict]:
    """Each model's columns and rows on our side: its Delta table, or a VIEW model's query over them."""
    from deltalake import DeltaTable

    from incremental_assets import delta
    from incremental_assets.load.settings import load_settings

    from helpers import table_rows

    dirs = _project_dirs(root, example)
    warehouse = load_settings(dirs[0]).warehouse
    out, views = {}, []
    for name in names:
        uri = delta.table_uri(warehouse, name)
        if (Path(uri) / "_delta_log").is_dir():
            # our bookkeeping columns (ia_interval, ia_day, SCD type 2's ia_bucket) are not the model's
            internal = tuple(f.name for f in DeltaTable(uri).schema().fields if f.name.startswith("ia_"))
            columns = [f.name for f in DeltaTable(uri).schema().fields if f.name not in internal]
            out[name] = {"columns": columns, "rows": table_rows(uri, drop=internal)}
        else:
            views.append(name)
    if views:  # loaded here as our CLI loads it: with the packages it was given
        request.getfixturevalue("monkeypatch").syspath_prepend(str(CACHE / "ours-custom-materializations"))
        out.update(_view_tables(request.getfixturevalue("spark"), dirs, views))
    return out


def _view_tables(spark, dirs: list[Path], names: list[str]) -> dict[str, dict]:
    from incremental_assets.load.project import load_project
    from incremental_assets.plan.run_plan import plan_run
    from incremental_assets.spark.executor import Executor

    project = load_project(dirs if len(dirs) > 1 else dirs[0])
    ex = Executor(spark, project)
    out = {}
    for name in names:
        model = project.model(name)
        if model.has_table:
            continue  # a table model without a Delta table: reported missing by the comparison
        plan = plan_run(project, model, None)
        ex.register(plan)
        frame = spark.sql(plan.sql)
        out[name] = {"columns": frame.columns, "rows": [tuple(r) for r in frame.collect()]}
    return out


def compare(theirs: dict[str, dict], ours: dict[str, dict]) -> list[str]:
    """Every difference, one line per table: missing tables, other columns, other rows (the first few)."""
    problems = []
    for name, table in sorted(theirs.items()):
        if name not in ours:
            problems.append(f"{name}: no table on our side")
            continue
        mine = ours[name]
        if [c.lower() for c in mine["columns"]] != [c.lower() for c in table["columns"]]:
            problems.append(f"{name}: columns {mine['columns']} != SQLMesh's {table['columns']}")
            continue
        if name in NOT_COMPARED:
            continue
        a, b = _comparable(name, mine), _comparable(name, table)
        if a != b:
            only_ours, only_theirs = sorted(set(a) - set(b))[:3], sorted(set(b) - set(a))[:3]
            problems.append(
                f"{name}: {len(a)} rows != SQLMesh's {len(b)}; only ours {only_ours}; only SQLMesh's {only_theirs}"
            )
    return problems


def _comparable(name: str, table: dict) -> list[tuple[str, ...]]:
    """The rows as text, each column of PARTLY_COMPARED reduced to whether it is NULL."""
    partly = {i for i, c in enumerate(table["columns"]) if c.lower() in PARTLY_COMPARED.get(name, {})}
    return text_rows(
        tuple(("<set>" if v is not None else None) if i in partly else v for i, v in enumerate(row))
        for row in table["rows"]
    )


def run_ours(examples: Path, name: str, root: Path, remote: str) -> None:
    """What a user runs: validate, run --auto up to the fixed range's end, test, and the same run --auto again
    with nothing new (every table compared afterwards, so the second run must leave them as they were)."""
    example = EXAMPLES[name]
    _copy(examples, name, root)
    _ok(our_cli(root, example, remote, "validate"), "validate")
    _ran_as_expected(name, our_cli(root, example, remote, "run", "--auto", "--end", _end(example).isoformat()))
    _ok(our_cli(root, example, remote, "test"), "test")
    _ran_as_expected(name, our_cli(root, example, remote, "run", "--auto", "--end", _end(example).isoformat()))


def _ran_as_expected(name: str, ran: subprocess.CompletedProcess) -> None:
    failing = [model for model in FAILING if model.split(".")[0] == name]
    if failing:  # each failing model said in one line; the others ran
        output = ran.stdout + ran.stderr
        assert ran.returncode == 1 and "Traceback" not in output, output[-4000:]
        for model in failing:
            assert re.search(rf"{re.escape(model)}\b.*FAILED", output), (model, output[-4000:])
    else:
        _ok(ran, "run --auto")


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_our_cli_runs_the_example_unchanged(examples, theirs, spark_remote, name, tmp_path, request):
    example = EXAMPLES[name]
    reference = {t: v for t, v in theirs(name).items() if t not in NOT_MODELS}
    run_ours(examples, name, tmp_path / name, spark_remote)
    ours = our_tables(tmp_path / name, example, sorted(reference), request)
    problems = compare(reference, ours)
    assert not problems, "\n".join(problems)
    if (
        name == "sushi"
    ):  # SQLMesh cannot run latest_order (EXAMPLES['sushi'].theirs_without): ours holds the latest order
        latest = our_tables(tmp_path / name, example, ["sushi.latest_order", "sushi.orders"], request)
        newest = max(r[latest["sushi.orders"]["columns"].index("event_date")] for r in latest["sushi.orders"]["rows"])
        assert [r[-1] for r in latest["sushi.latest_order"]["rows"]] == [newest]


def test_our_cli_runs_the_project_sqlmesh_init_makes_unchanged(spark_remote, tmp_path, request):
    """The project a SQLMesh user starts from (``sqlmesh init duckdb``: a SEED, an INCREMENTAL_BY_TIME_RANGE and a
    FULL model, an audit, a unit test), made by the pinned SQLMesh, run unchanged through our CLI: the same tables
    as SQLMesh's own plan."""
    made = tmp_path / "made"
    made.mkdir()
    done = subprocess.run(
        [str(sqlmesh_python().parent / "sqlmesh"), "init", "duckdb"], cwd=made, capture_output=True, text=True
    )
    assert done.returncode == 0 and (made / "models" / "incremental_model.sql").is_file(), done.stdout + done.stderr
    example = Example((".",), "db.db")
    root_theirs, root_ours = (shutil.copytree(made, tmp_path / side) for side in ("theirs", "ours"))
    _sqlmesh(root_theirs, example, "test")
    _sqlmesh(root_theirs, example, "plan", "--auto-apply", "--no-prompts", "--skip-tests")
    dumped = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", DUMP, str(root_theirs / "db.db")], capture_output=True, text=True
    )
    theirs = json.loads(dumped.stdout)
    assert set(theirs) == {f"sqlmesh_example.{m}" for m in ("seed_model", "incremental_model", "full_model")}
    _ok(our_cli(root_ours, example, spark_remote, "validate"), "validate")
    _ok(our_cli(root_ours, example, spark_remote, "run", "--auto"), "run --auto")
    _ok(our_cli(root_ours, example, spark_remote, "test"), "test")
    problems = compare(theirs, our_tables(root_ours, example, sorted(theirs), request))
    assert not problems, "\n".join(problems)


def test_custom_materializations_stay_refused(examples, tmp_path):
    """sushi unchanged, without the examples' custom_materializations package in our environment: `validate` names
    each CUSTOM model's file and line and its materialization, with the fix, exit 2."""
    root = _copy(examples, "sushi", tmp_path / "sushi")
    done = _cli(root, ["validate", "--project", str(root)], clean_env())
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr
    for name, path in CUSTOM.items():
        line = next((x for x in (done.stdout + done.stderr).splitlines() if f"{path}:" in x and "kind CUSTOM" in x), "")
        assert re.search(rf"{path}:\d+: kind CUSTOM runs materialization '\w+'.* \(fix: ", line), (name, done.stdout)


# Run by both interpreters: every model of a project as our loader reads it, as JSON.
LOADED = """
import inspect, json, sys
from incremental_assets.load.project import load_project
from incremental_assets.load.sqlmesh_shim import real_sqlmesh_installed
project = load_project(sys.argv[1:])
def audit(a):
    return [a.name, {k: [x.sql() for x in v] if isinstance(v, tuple) else v.sql() for k, v in sorted(a.args.items())}]
models = {name: {
    "type": type(m).__name__, "kind": repr(m.kind), "columns": dict(m.columns), "depends_on": sorted(m.depends_on),
    "audits": [audit(a) for a in m.audits], "query": m.query.sql(), "start": str(m.start), "cron": m.cron,
    "execute": list(inspect.signature(m.execute).parameters) if getattr(m, "execute", None) else None,
    "fingerprint": m.fingerprint,
} for name, m in sorted(project.models.items())}
print(json.dumps({"real_sqlmesh": real_sqlmesh_installed(), "models": models}))
"""


def _loaded(python: Path | str, dirs: list[Path], pythonpath: list[Path]) -> dict:
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *map(str, pythonpath)])
    done = subprocess.run(
        [str(python), "-c", LOADED, *map(str, dirs)], capture_output=True, text=True, env=env, timeout=CLI_TIMEOUT
    )
    assert done.returncode == 0, f"{python}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_installed_sqlmesh_loads_the_example_as_its_stand_in_does(examples, name, tmp_path):
    """With SQLMesh installed, its own classes evaluate config.py and record the @model declarations; the
    project loads into the same models (kinds, columns, upstreams, audits, queries, fingerprints, execute's
    arguments) as with the stand-in, on SQLMesh's pinned sqlglot, in SQLMesh's venv (no Dagster, no Spark)."""
    python = sqlmesh_python("pyyaml", probe="import yaml")
    example = EXAMPLES[name]
    dirs = _project_dirs(_copy(examples, name, tmp_path / name), example)
    with_sqlmesh = _loaded(python, dirs, [])
    stand_in = _loaded(sys.executable, dirs, [CACHE / "ours-custom-materializations"])
    assert (with_sqlmesh["real_sqlmesh"], stand_in["real_sqlmesh"]) == (True, False)
    assert with_sqlmesh["models"] and with_sqlmesh["models"] == stand_in["models"]


def test_installed_sqlmesh_loads_our_python_model_project_as_its_stand_in_does(tmp_path):
    """Declarations the examples do not make: audits by name, is_sql with pre_statements, column descriptions,
    kinds as dicts with a time column and format and as kind objects with a batch size."""
    python = sqlmesh_python("pyyaml", probe="import yaml")
    root = shutil.copytree(HERE / "sqlmesh_python_project", tmp_path / "project")
    with_sqlmesh, stand_in = _loaded(python, [root], []), _loaded(sys.executable, [root], [])
    assert (with_sqlmesh["real_sqlmesh"], stand_in["real_sqlmesh"]) == (True, False)
    assert len(with_sqlmesh["models"]) >= 6 and with_sqlmesh["models"] == stand_in["models"]
