"""``python -m incremental_assets.demo``: generate or append the example project's data."""

from incremental_assets.demo import _main

_main()
