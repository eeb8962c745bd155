"""A Dagster Component: add a project to an existing `dg` project with one ``defs.yaml``.

```yaml
# defs/shop/defs.yaml
type: incremental_assets.IncrementalAssetsComponent
attributes:
  project: ../../../shop_models     # relative to this defs.yaml's folder
```

The component only wraps :func:`incremental_assets.assets.build_definitions`: assets, checks,
schedules, sensors and the ``spark`` resource are the same as with the Python API or workspace.yaml.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg


class IncrementalAssetsComponent(dg.Component, dg.Model, dg.Resolvable):
    """The models of one incremental_assets project as Dagster definitions.

    ``project`` is the project folder (holding ``models/``), absolute or relative to the folder of the
    ``defs.yaml``; ``schedules`` and ``sensors`` can be switched off when a deployment drives runs itself.
    """

    project: str = "."
    schedules: bool = True
    sensors: bool = True

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        from incremental_assets.orchestration.definitions import build_definitions

        root = Path(self.project)
        if not root.is_absolute():
            root = (context.path / root).resolve()
        extra: dict = {}
        if not self.schedules:
            extra["schedules"] = []
        if not self.sensors:
            extra["sensors"] = []
        return build_definitions(root, **extra)
