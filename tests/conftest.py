"""Shared fixtures: ONE local SparkSession for the whole test session, and small project builders."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
# Spark's collect() returns naive datetimes in the Python process's zone: make that UTC.
os.environ["TZ"] = "UTC"
time.tzset()
# The class archive local JVMs map: one folder for the whole suite, whatever HOME a test sets.
os.environ.setdefault("INCREMENTAL_ASSETS_JVM_ARCHIVE", str(Path.home() / ".cache" / "incremental_assets" / "jvm"))


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from incremental_assets.model.settings import CATALOG_DIR_KEY, DEFAULT_SPARK_CONF
    from incremental_assets.spark.session import build_spark_session

    conf = dict(DEFAULT_SPARK_CONF)
    conf.update({"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    conf[CATALOG_DIR_KEY] = str(
        tmp_path_factory.mktemp("spark_catalog")
    )  # schemas that statements create, never in the repository
    session = build_spark_session(conf, app_name="incremental_assets_tests")
    yield session
    session.stop()
    _stop_archive_creators()


def _stop_archive_creators() -> None:
    """A class archive still being made when the suite ends (started by its first JVM) is stopped by its PID."""
    import signal

    from incremental_assets.spark.class_archive import archive_folder, creator_pid

    folder = archive_folder()
    for marker in folder.glob("*.creating") if folder else ():
        pid = creator_pid(marker.with_suffix(".jsa"))
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def write_project(root: Path, files: dict[str, str]) -> Path:
    """Write ``{relative path: text}`` under root (dedented) and return root."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    (root / "models").mkdir(exist_ok=True)
    return root


@pytest.fixture
def make_project(tmp_path):
    def make(files: dict[str, str], name: str = "project") -> Path:
        return write_project(tmp_path / name, files)

    return make


@pytest.fixture
def load_with_home(tmp_path, monkeypatch):
    """Load a project folder with its Dagster home in the test's own folder (``DAGSTER_HOME=tmp_path/home``)."""
    from incremental_assets.load.project import load_project

    def load(root: Path):
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
        return load_project(root)

    return load


@pytest.fixture
def dagster_env(load_with_home):
    """A project folder as Dagster runs it: ``(project, its instance, its Definitions)``, the home in tmp_path."""
    from incremental_assets.orchestration.build_definitions import build_definitions
    from incremental_assets.orchestration.instance import open_instance

    def load(root: Path):
        project = load_with_home(root)
        return project, open_instance(project.settings.dagster_home), build_definitions(project)

    return load


@pytest.fixture(autouse=True, scope="module")
def _no_dagster_home_from_another_module():
    """A module-scoped fixture that opens an instance sets DAGSTER_HOME for the rest of the session; each
    module starts without it (a project loaded by a later module would take that home for its own)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("DAGSTER_HOME", raising=False)
        yield


@pytest.fixture(autouse=True)
def _own_dagster_home(monkeypatch):
    """Opening an instance sets DAGSTER_HOME in the process: each test starts without the last one's."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
