"""A code location for the project in ``$INCREMENTAL_ASSETS_PROJECT`` or the current folder.

``dagster dev`` in a project folder shows its models as assets; runs launched from the CLI appear in
the same instance when ``DAGSTER_HOME`` points at the project's ``.dagster`` folder (the CLI's default).

Importing it builds the definitions: it is the module a deployment names (``-m incremental_assets.definitions``),
never imported by the package. A project with Python assets of its own writes its own ``definitions.py``
instead, calling ``incremental_assets.build_definitions`` (:mod:`incremental_assets.orchestration.build_definitions`)
as the repository root's does.
"""

from incremental_assets.orchestration.build_definitions import build_definitions

defs = build_definitions()  # $INCREMENTAL_ASSETS_PROJECT (folders separated by os.pathsep) or the current folder
