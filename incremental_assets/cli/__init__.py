"""The ``incremental-assets`` command: thin argument parsing over what the Dagster assets call."""

from incremental_assets.cli.commands import main

__all__ = ["main"]
