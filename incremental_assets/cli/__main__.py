"""``python -m incremental_assets.cli``: the same as the ``incremental-assets`` command."""

import sys

from incremental_assets.cli import console_main

sys.exit(console_main())
