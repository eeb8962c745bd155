"""The cached column types and lineage: a second load reads them back, and editing a model file, a macro
or a setting (a config variable) or a source's declared columns gives the edited types, never the cached ones;
the same for the parsed models a later load reads back."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from incremental_assets.load.project import load_project
from incremental_assets.model import clock
from incremental_assets.orchestration.table_metadata import project_columns
from incremental_assets.plan.analyses import analyses

FILES = {
    "config.yaml": "variables: {factor: 2}\n",
    "sources.yaml": "- name: raw.orders\n  location: data/orders\n  format: delta\n  columns: {id: bigint, qty: int, "
    "price: double}\n",
    "macros/units.py": "from sqlmesh import macro\n\n@macro()\ndef units(evaluator, col):\n    return f'{col} * 2'\n",
    "models/a.sql": "MODEL (name s.a, kind FULL);\nSELECT o.id, @units(o.qty) AS units, o.qty * @VAR('factor') AS "
    "scaled "
    "FROM raw.orders AS o\n",
    "models/b.sql": "MODEL (name s.b, kind FULL);\nSELECT a.id, SUM(a.units) AS total FROM s.a AS a GROUP BY a.id\n",
}


def _types(root: Path) -> dict[str, dict[str, str]]:
    return {name: dict(c.types) for name, c in project_columns(load_project(root)).items()}


def test_second_load_reads_the_cache_and_every_edit_changes_the_result(make_project, monkeypatch):
    monkeypatch.delenv("INCREMENTAL_ASSETS_CACHE_DIR", raising=False)
    root = make_project(FILES)
    first = _types(root)
    assert first == {
        "s.a": {"id": "bigint", "units": "int", "scaled": "int"},
        "s.b": {"id": "bigint", "total": "bigint"},
    }
    cache = root / ".cache" / "incremental_assets" / "columns.json"
    assert cache.is_file()
    written = cache.stat().st_mtime_ns
    assert _types(root) == first and cache.stat().st_mtime_ns == written  # all found: nothing written

    (root / "sources.yaml").write_text(FILES["sources.yaml"].replace("id: bigint", "id: int"))
    assert _types(root)["s.b"]["id"] == "int"  # a source's declared columns reach the models reading it, and theirs
    (root / "models/a.sql").write_text(FILES["models/a.sql"].replace("o.id,", "CAST(o.id AS STRING) AS id,"))
    assert _types(root)["s.b"]["id"] == "string"  # the edited model, and the model reading it
    (root / "macros/units.py").write_text(FILES["macros/units.py"].replace("{col} * 2", "{col} * 2.5"))
    assert _types(root)["s.a"]["units"] == "double"
    (root / "config.yaml").write_text("variables: {factor: 1.5}\n")
    assert _types(root)["s.a"]["scaled"] == "double"


def test_cache_off_writes_nothing(make_project, monkeypatch):
    monkeypatch.setenv("INCREMENTAL_ASSETS_CACHE_DIR", "off")
    root = make_project(FILES)
    assert _types(root)["s.a"]["id"] == "bigint"
    assert not (root / ".cache").exists()


PARSED = {
    **FILES,
    "config.yaml": "variables: {factor: 2}\nmodel_defaults: {owner: ann}\n",
    "models/a.sql": "MODEL (name s.a, kind FULL);\nSELECT @STAR(raw.orders), @units(o.qty) AS units, "
    "@VAR('factor') AS f FROM raw.orders AS o\n",
    "models/r.sql": "MODEL (name s.r, kind INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2 days ago');\n"
    "SELECT CAST(NULL AS DATE) AS ds FROM s.a WHERE 1 = 0 AND @start_ds <= @end_ds\n",
}


def _parsed(root: Path) -> dict[str, object]:
    project = load_project(root)
    a, r = project.models["s.a"], project.models["s.r"]
    return {"a": a.query.sql(dialect="spark"), "owner": a.owner, "fingerprint": a.fingerprint, "start": r.start}


def test_a_later_load_reads_the_parsed_models_and_every_edit_gives_the_edited_model(make_project, monkeypatch):
    """The kept parse is keyed by all the parse reads: the file, the macros, the variables, the model defaults,
    the sources' columns and, for a relative start, the clock's minute."""
    monkeypatch.delenv("INCREMENTAL_ASSETS_CACHE_DIR", raising=False)
    root = make_project(PARSED)
    with clock.pinned(datetime(2024, 3, 5, 10, tzinfo=timezone.utc)):
        first = _parsed(root)
        kept = root / ".cache" / "incremental_assets" / "models.pickle"
        written = kept.stat().st_mtime_ns
        assert _parsed(root) == first and kept.stat().st_mtime_ns == written  # every model found: nothing written
    assert first["a"] == (
        "SELECT CAST(`id` AS BIGINT) AS `id`, CAST(`qty` AS INT) AS `qty`, CAST(`price` AS DOUBLE) AS `price`, "
        "o.qty * 2 AS units, 2 AS f FROM raw.orders AS o"
    )
    assert first["owner"] == "ann" and first["start"] == datetime(2024, 3, 3, tzinfo=timezone.utc)
    with clock.pinned(datetime(2024, 3, 9, 10, tzinfo=timezone.utc)):
        assert _parsed(root)["start"] == datetime(2024, 3, 7, tzinfo=timezone.utc)  # the clock moved

        edits = [
            ("models/a.sql", "AS f", "AS g", "AS g FROM"),
            ("macros/units.py", "{col} * 2", "{col} * 3", "o.qty * 3 AS units"),
            ("config.yaml", "factor: 2", "factor: 5", "5 AS g"),
            ("sources.yaml", "id: bigint", "id: string", "CAST(`id` AS STRING) AS `id`"),
        ]
        for file, old, new, expected in edits:
            (root / file).write_text((root / file).read_text().replace(old, new))
            assert expected in _parsed(root)["a"], file
        (root / "config.yaml").write_text((root / "config.yaml").read_text().replace("owner: ann", "owner: bob"))
        assert _parsed(root)["owner"] == "bob"


def test_a_kept_analysis_follows_the_tables_its_model_reads(make_project, monkeypatch):
    """A model's safety analysis kept between loads is keyed by its parse and by the time columns of what it
    reads: the upstream turned from incremental into FULL changes the analysis of the unchanged model reading it."""
    monkeypatch.delenv("INCREMENTAL_ASSETS_CACHE_DIR", raising=False)
    incremental = "INCREMENTAL_BY_TIME_RANGE (time_column ds), start '2024-01-01'"
    root = make_project(
        {
            "sources.yaml": "- name: raw.orders\n  location: data/orders\n  format: delta\n",
            "models/a.sql": f"MODEL (name s.a, kind {incremental});\n"
            "SELECT o.ds, o.qty FROM raw.orders AS o WHERE o.ds BETWEEN @start_ds AND @end_ds\n",
            "models/b.sql": f"MODEL (name s.b, kind {incremental});\n"
            "SELECT a.ds, SUM(a.qty) AS qty FROM s.a AS a WHERE a.ds BETWEEN @start_ds AND @end_ds GROUP BY a.ds\n",
        }
    )
    first = analyses(load_project(root))["s.b"]
    assert (root / ".cache" / "incremental_assets" / "analyses.pickle").is_file()
    assert analyses(load_project(root))["s.b"] == first and first is not None and "s.a" in first.bounds
    (root / "models/a.sql").write_text("MODEL (name s.a, kind FULL);\nSELECT o.ds, o.qty FROM raw.orders AS o\n")
    again = analyses(load_project(root))["s.b"]
    assert again is not None and again != first
