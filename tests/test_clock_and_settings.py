"""Hidden inputs made visible: one clock that a test pins, one read of the environment.

What a user would notice: a relative start (`'1 week ago'`), a model's default start and a run's execution
time follow the pinned clock, not the machine's; every environment variable the product reads is listed
in the README; refusals name a way out that fits a Dagster run as well as a CLI run."""

from __future__ import annotations

import ast
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from incremental_assets.errors import ModelFileError, WindowError
from incremental_assets.load.project import load_project
from incremental_assets.model import clock
from incremental_assets.model.intervals import TimeWindow
from incremental_assets.model.settings import SETTING_VARIABLES, EnvSettings, read_env_settings
from incremental_assets.plan.run_plan import plan_run

from conftest import REPO, write_project

PACKAGE = REPO / "incremental_assets"
PINNED = datetime(2024, 3, 10, 15, 30, tzinfo=timezone.utc)
CLOCK_OR_GETENV = re.compile(r"(datetime\.|dt\.datetime\.|date\.)(now|utcnow|today)|time\.time(_ns)?|os\.getenv")


def _project(tmp_path: Path):
    return write_project(
        tmp_path,
        {
            "models/recent.sql": """
            MODEL (name s.recent, kind INCREMENTAL_BY_TIME_RANGE(time_column ds), start '1 week ago', cron '@daily');
            SELECT ds FROM s.days WHERE ds BETWEEN @start_ds AND @end_ds
        """,
            "models/nostart.sql": """
            MODEL (name s.nostart, kind INCREMENTAL_BY_TIME_RANGE(time_column ds), cron '@daily',
                   physical_properties (allow_nondeterministic = true));
            SELECT ds, @execution_ds AS ran_on FROM s.days WHERE ds BETWEEN @start_ds AND @end_ds
        """,
            "models/days.sql": "MODEL (name s.days, kind FULL); SELECT CAST('2024-01-01' AS DATE) AS ds",
        },
    )


def test_relative_and_default_starts_follow_the_pinned_clock(tmp_path):
    root = _project(tmp_path)
    with clock.pinned(PINNED):
        project = load_project(root)
    assert project.model("s.recent").start == datetime(2024, 3, 3, tzinfo=timezone.utc)  # a week before the pinned day
    # No start: the start of the last complete day before the pinned instant.
    assert project.model("s.nostart").start == datetime(2024, 3, 9, tzinfo=timezone.utc)
    with clock.pinned(datetime(2025, 1, 1, tzinfo=timezone.utc)):
        later = load_project(root)
    assert later.model("s.recent").start == datetime(2024, 12, 25, tzinfo=timezone.utc)


def test_a_run_without_an_execution_time_runs_at_the_pinned_instant(tmp_path):
    with clock.pinned(PINNED):
        project = load_project(_project(tmp_path))
        plan = plan_run(project, project.model("s.nostart"), TimeWindow.parse("2024-03-09", "2024-03-10"))
    assert plan.execution_time == PINNED
    assert "'2024-03-10' AS ran_on" in plan.sql.replace('"', "'")


def test_pins_nest_and_need_a_time_zone():
    with clock.pinned(PINNED):
        with clock.pinned(datetime(2030, 1, 1, tzinfo=timezone.utc)):
            assert clock.now().year == 2030
        assert clock.now() == PINNED
        assert clock.wall_time() > datetime(2025, 1, 1, tzinfo=timezone.utc)  # the machine's time is never pinned
    assert clock.now() > PINNED
    with pytest.raises(WindowError, match="no time zone"):
        with clock.pinned(datetime(2024, 1, 1)):
            pass


def _calls(path: Path) -> list[tuple[int, str]]:
    """Reads of the clock or the environment in a module: (line, what)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        text = ast.unparse(node) if isinstance(node, (ast.Call, ast.Subscript, ast.Attribute)) else ""
        if isinstance(node, ast.Call) and CLOCK_OR_GETENV.fullmatch(ast.unparse(node.func)):
            found.append((node.lineno, text))
        elif isinstance(node, ast.Attribute) and text == "os.environ":
            found.append((node.lineno, text))
    return found


def test_the_clock_and_the_environment_are_read_in_one_place_each():
    reads = {str(p.relative_to(PACKAGE)): _calls(p) for p in sorted(PACKAGE.rglob("*.py"))}
    of_env = {p for p, calls in reads.items() for _, what in calls if "environ" in what or "getenv" in what}
    of_clock = {p for p, calls in reads.items() for _, what in calls if "environ" not in what and "getenv" not in what}
    assert of_clock == {"model/clock.py"}
    # Besides the one read: what the product sets for Dagster, and a child process's copy of the environment.
    assert of_env == {
        "model/settings.py",
        "orchestration/event_log.py",
        "orchestration/instance.py",
        "spark/connect_server.py",
    }


def test_every_variable_read_is_in_the_readme_settings_tables():
    readme = (REPO / "README.md").read_text()
    source = (PACKAGE / "model" / "settings.py").read_text()
    named = set(re.findall(r'"(INCREMENTAL_ASSETS_[A-Z_]+|DAGSTER_HOME)"', source))
    assert set(SETTING_VARIABLES.values()) <= named and len(named) >= 17
    listed = set(re.findall(r"^\|[^|\n]*`(INCREMENTAL_ASSETS_[A-Z_]+|DAGSTER_HOME)`", readme, re.MULTILINE))
    third_column = r"^\|[^|\n]*\|[^|\n]*\|\s*`(INCREMENTAL_ASSETS_[A-Z_]+|DAGSTER_HOME)`"
    listed |= set(re.findall(third_column, readme, re.MULTILINE))
    assert named - listed == set()
    assert "`AWS_*`" in readme


def test_the_environment_is_read_into_one_value():
    assert read_env_settings({}) == EnvSettings()
    env = read_env_settings(
        {
            "INCREMENTAL_ASSETS_WAREHOUSE": "/w",
            "INCREMENTAL_ASSETS_UPSTREAM_WAIT_RETRIES": "3",
            "INCREMENTAL_ASSETS_CACHE_DIR": "off",
            "INCREMENTAL_ASSETS_CLOCK": " 2024-01-01T00:00:00Z ",
            "INCREMENTAL_ASSETS_DEBUG": "1",
            "AWS_PROFILE": "p",
            "PATH": "/bin",
        }
    )
    assert env.setting_overrides == {"INCREMENTAL_ASSETS_WAREHOUSE": "/w"}
    assert (env.upstream_wait_retries, env.cache_dir, env.clock, env.debug) == (3, "off", "2024-01-01T00:00:00Z", True)
    assert env.credentials == {"AWS_PROFILE": "p"}
    with pytest.raises(ModelFileError, match="INCREMENTAL_ASSETS_LOCK_TIMEOUT: must be a number, not 'soon'"):
        read_env_settings({"INCREMENTAL_ASSETS_LOCK_TIMEOUT": "soon"})


def test_refusals_name_the_dagster_run_tag_beside_the_cli_flag():
    from incremental_assets.orchestration import tags
    from incremental_assets.plan.rebuild import ASK_DOWNGRADE, ASK_FULL_REFRESH

    assert f"the run tag {tags.FULL_REFRESH_TAG}=true" in ASK_FULL_REFRESH and "--full-refresh" in ASK_FULL_REFRESH
    assert f"the run tag {tags.ALLOW_DOWNGRADE_TAG}=true" in ASK_DOWNGRADE and "--allow-downgrade" in ASK_DOWNGRADE
