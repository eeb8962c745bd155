"""A Dagster Component: add a project to an existing `dg` project with one ``defs.yaml``.

``dg scaffold defs incremental_assets.IncrementalAssetsComponent shop`` writes one; then::

```yaml
# defs/shop/defs.yaml
type: incremental_assets.IncrementalAssetsComponent
attributes:
  project: ../../../shop_models     # relative to this defs.yaml's folder
  key_prefix: [lake]                # every model and source key starts with it
  group_name: shop                  # instead of each model's schema
  tags: {team: data}                # on every model asset
  automation_condition: on_cron     # eager, on_cron or on_missing: Dagster's declarative automation
  sensors: false                    # ... instead of the project's automation sensor
```

The component only wraps :func:`incremental_assets.orchestration.build_definitions.build_definitions` with a
:class:`~incremental_assets.orchestration.translator.ModelTranslator` made from these settings: assets,
checks, schedules, sensors and the ``spark`` resource are the same as with the Python API or workspace.yaml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional, Union

import dagster as dg
from pydantic import BaseModel

# The starter model `dg scaffold defs` writes when no project is named: it runs as it is.
STARTER_MODEL = """MODEL (
  name starter.numbers,
  kind FULL,
  description 'A first model: replace it with yours (one model per file, SQLMesh syntax)'
);

SELECT id, id * id AS squared FROM VALUES (1), (2), (3) AS t(id)
"""


class ScaffoldParams(BaseModel):
    project: Optional[str] = None  # an existing project folder, relative to the new defs folder


class IncrementalAssetsScaffolder(dg.Scaffolder[ScaffoldParams]):
    """``dg scaffold defs incremental_assets.IncrementalAssetsComponent NAME [--project DIR]``: a defs.yaml
    with the component's settings; without ``--project``, a new project in the defs folder with one model."""

    @classmethod
    def get_scaffold_params(cls) -> type[ScaffoldParams]:
        return ScaffoldParams

    def scaffold(self, request: dg.ScaffoldRequest[ScaffoldParams]) -> None:
        project = request.params.project if request.params else None
        if project is None:
            models = Path(request.target_path) / "models"
            models.mkdir(parents=True, exist_ok=True)
            (models / "numbers.sql").write_text(STARTER_MODEL)
        dg.scaffold_component(
            request, {"project": project or ".", "key_prefix": [], "group_name": None, "tags": {}, "sensors": True}
        )


@dg.scaffold_with(IncrementalAssetsScaffolder)
class IncrementalAssetsComponent(dg.Component, dg.Model, dg.Resolvable):
    """The models of one incremental_assets project as Dagster definitions.

    ``project`` is the project folder (holding ``models/``), absolute or relative to the folder of the
    ``defs.yaml``, or a list of folders loaded as one project (SQLMesh's multi-repo projects); ``schedules`` and
    ``sensors`` can be switched off when a deployment drives runs itself (for instance with ``automation_condition``).
    """

    project: Union[str, list[str]] = "."
    schedules: bool = True
    sensors: bool = True
    key_prefix: list[str] = []
    group_name: Optional[str] = None
    tags: dict[str, str] = {}
    automation_condition: Optional[Literal["eager", "on_cron", "on_missing"]] = None

    def translator(self):
        from incremental_assets.orchestration.translator import ModelTranslator

        return ModelTranslator(
            key_prefix=self.key_prefix,
            group_name=self.group_name,
            tags=self.tags,
            automation_condition=self.automation_condition,
        )

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        from incremental_assets.orchestration.build_definitions import build_definitions

        folders = [self.project] if isinstance(self.project, str) else list(self.project)
        root = [Path(f) if Path(f).is_absolute() else (context.path / f).resolve() for f in folders]
        extra: dict = {}
        if not self.schedules:
            extra["schedules"] = []
        if not self.sensors:
            extra["sensors"] = []
        return build_definitions(root, translator=self.translator(), **extra)
