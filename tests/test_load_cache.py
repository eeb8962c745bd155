"""The cached column types and lineage: a second load reads them back, and editing a model file, a macro
or a setting (a config variable) or a source's declared columns gives the edited types, never the cached ones."""

from __future__ import annotations

from pathlib import Path

from incremental_assets.load.project import load_project
from incremental_assets.orchestration.table_metadata import project_columns

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
