"""A code location for the project in ``$INCREMENTAL_ASSETS_PROJECT`` or the current folder.

``dagster dev`` in a project folder shows its models as assets; runs launched from the CLI appear in
the same instance when ``DAGSTER_HOME`` points at the project's ``.dagster`` folder (the CLI's default).
"""

from incremental_assets.orchestration.definitions import build_definitions

defs = build_definitions()  # $INCREMENTAL_ASSETS_PROJECT (folders separated by os.pathsep) or the current folder
