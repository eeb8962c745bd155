"""The ``incremental-assets`` command: thin argument parsing over what the Dagster assets call.

Importing this package imports nothing heavy: the command first offers itself to the project's command
server (:mod:`incremental_assets.cli.forward`) and imports the CLI only when it runs in its own process.
"""

import sys
from typing import Any

__all__ = ["console_main", "main"]


def console_main() -> int:
    """The ``incremental-assets`` process: handed to the project's command server when one runs, else run here."""
    from incremental_assets.cli.forward import forwarded

    code = forwarded(sys.argv[1:])
    if code is not None:
        return code
    from incremental_assets.cli.commands import console_main as run_here

    return run_here()


def __getattr__(name: str) -> Any:
    if name == "main":
        from incremental_assets.cli.commands import main

        return main
    raise AttributeError(name)
