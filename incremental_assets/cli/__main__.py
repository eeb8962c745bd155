"""``python -m incremental_assets.cli``: the same as the ``incremental-assets`` command."""

import sys

from incremental_assets.cli.commands import main

sys.exit(main())
