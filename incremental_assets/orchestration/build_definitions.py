"""A project as Dagster Definitions: model assets, source specs, jobs, schedules, sensors, maintenance jobs, the
Spark resource.

:func:`build_definitions` is the public ``incremental_assets.build_definitions``. Two code locations call it:
:mod:`incremental_assets.definitions` (any project folder, ``-m incremental_assets.definitions``) and a
project's own ``definitions.py`` that adds assets of its own (the repository root's: the example shop and
a Python asset downstream of its models).
"""

from __future__ import annotations

import copy
import os
import warnings
from pathlib import Path
from typing import Any, Sequence

import dagster as dg

from incremental_assets.load.gc_pause import collection_paused
from incremental_assets.load.project import load_project, project_folders
from incremental_assets.model.project import Project
from incremental_assets.model.settings import read_env_settings
from incremental_assets.orchestration.assets import build_model_asset
from incremental_assets.orchestration.resource import SparkResource
from incremental_assets.orchestration.table_metadata import link_to_git, project_columns
from incremental_assets.orchestration.translator import ModelTranslator


def build_definitions(
    project: Project | str | Path | Sequence[str | Path] | None = None,
    *,
    translator: ModelTranslator | None = None,
    environment: str | None = None,
    **extra: Any,
) -> dg.Definitions:
    """:func:`_build_definitions`, with the garbage collector paused (see :mod:`~incremental_assets.load.gc_pause`)."""
    with collection_paused():
        return _build_definitions(project, translator=translator, environment=environment, **extra)


def _build_definitions(
    project: Project | str | Path | Sequence[str | Path] | None = None,
    *,
    translator: ModelTranslator | None = None,
    environment: str | None = None,
    **extra: Any,
) -> dg.Definitions:
    """Definitions for a project (a folder, several folders loaded as one, or ``$INCREMENTAL_ASSETS_PROJECT``
    whose folders are separated by ``os.pathsep``): model assets, source specs and the ``spark`` resource.

    With ``environment``, the assets of that environment instead (a code location of its own): the models
    it builds, keyed ``["env", NAME, *key]``, depending on production's keys for what they read in place.
    The environments the project's ``environments`` setting names (``INCREMENTAL_ASSETS_ENVIRONMENTS``)
    are shown beside production's assets, each in a group ``env_NAME``."""
    if not isinstance(project, Project):
        project = load_project(project or project_folders(read_env_settings().project or os.getcwd()))
    if environment is not None:
        from incremental_assets.orchestration.environments import environment_assets, plan_environment

        env, _, env_assets = environment_assets(project, plan_environment(project, environment), translator)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dg.BetaWarning)
            env_assets = link_to_git(env_assets, project.directory)
        resources = {"spark": SparkResource.from_settings(env.settings)}
        return dg.Definitions(assets=env_assets, resources=resources, executor=dg.in_process_executor, **extra)
    translator = translator or ModelTranslator()
    assets: list[Any] = [translator.get_source_spec(s) for s in project.sources.values()]
    columns = project_columns(project)
    with warnings.catch_warnings():
        # backfill_policy and git links are beta; we rely on them knowingly
        warnings.simplefilter("ignore", dg.BetaWarning)
        assets += [build_model_asset(project, m, translator, columns.get(m.name)) for m in project.ordered()]
        assets += [a for name in project.settings.environments for a in shown_environment(project, name, translator)]
        assets = link_to_git(assets, project.directory)
    from incremental_assets.orchestration.maintenance import maintenance_jobs, maintenance_schedules
    from incremental_assets.orchestration.schedules import build_schedules, model_jobs
    from incremental_assets.orchestration.sensors import build_sensors

    jobs = model_jobs(project, translator)
    upkeep = maintenance_jobs(project, translator)
    extra.setdefault("jobs", upkeep)
    extra.setdefault("schedules", build_schedules(project, translator, jobs) + maintenance_schedules(project, upkeep))
    extra.setdefault("sensors", build_sensors(project, translator, jobs))
    from incremental_assets.orchestration.watch import integrity_checks

    return dg.Definitions(
        assets=assets,
        asset_checks=integrity_checks(project, translator),
        resources={"spark": SparkResource.from_settings(project.settings)},
        executor=dg.in_process_executor,
        **extra,
    )


def shown_environment(project: Project, name: str, translator: ModelTranslator) -> list[Any]:
    """Environment ``name``'s assets as shown beside production's: the models it builds (by the plan
    against production), keyed ``env/NAME/...``, in a group of their own."""
    from incremental_assets.orchestration.environments import environment_assets, plan_environment

    group = f"env_{name}"

    class InGroup(type(translator)):  # type: ignore[misc]  # reason: the user's translator class, known at run time
        def get_group_name(self, model: Any) -> str:
            return group

    grouped = copy.copy(translator)
    grouped.__class__ = InGroup
    return environment_assets(project, plan_environment(project, name), grouped)[2]
