"""Loading a project makes millions of small objects (syntax trees, Dagster definitions) that all live on:
Python's cyclic garbage collector, run every few hundred allocations, would walk them again and again (a
quarter of a load of 1,000 models). It is paused while a project loads; what the load left as cyclic
garbage is collected after, as usual (reference counting frees the rest at once, paused or not).

>>> import gc
>>> with collection_paused():
...     gc.isenabled()
False
>>> gc.isenabled()
True
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (nested blocks: until the outermost ends)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
