"""The ``incremental-assets`` command: thin argument parsing over what the Dagster assets call."""

from incremental_assets.cli.commands import console_main, main

__all__ = ["console_main", "main"]
