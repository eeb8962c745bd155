"""Source data for the example project: a small online shop.

The example project in ``models/`` reads four sources (declared in ``sources.yaml``):

======================  ==============================  ======================================
source                  location (relative to project)  shape
======================  ==============================  ======================================
``raw.orders``          ``data/raw/orders``             Delta, partitioned by ``order_date``
``raw.order_items``     ``data/raw/order_items``        Delta, partitioned by ``order_date``
``raw.customers``       ``data/raw/customers.parquet``  one parquet file
``raw.items``           ``data/raw/items.csv``          CSV with a header
======================  ==============================  ======================================

The data looks like a real shop's: orders follow a daily curve (quiet nights, a lunch peak and a bigger
evening peak), weekends sell more than Mondays, the business grows about 20% a year and has a pre-Christmas
rush; a few customers buy far more than the rest, a few items sell far more than the rest, and the raw
customer file is a little messy (country codes in mixed case, stray spaces) so that the staging model has
something to clean.

Everything is generated with numpy, a day at a time, from a random stream keyed by ``(seed, day)``, so:

* the same arguments always give the same rows;
* ``orders_per_day`` scales the volume (5 million orders take seconds) without changing its shape;
* generating ``days=n`` and then calling :func:`append_demo_day` for the next day gives exactly the rows
  that ``days=n + 1`` would have given, which makes "new data arrived" demos honest.

Data that reaches the present, and grows like a live shop's: ``generate_demo_data(..., until=t)`` stops at
the hour boundary ``t`` (e.g. :func:`last_complete_hour`), and :func:`append_demo_hours` adds the next
hours in place: the same orders the day's stream holds for those hours (night hours are often quiet:
no orders at all), plus now and then a few late orders for an hour that was already loaded. How far the
data reaches is recorded in each Delta commit (``incremental_assets.demo.loaded_until`` in the commit
info), so appends continue exactly where the last one stopped, and an append that died between its two
commits is completed, not repeated, by the next one. Every write is atomic for a reader that polls: a
Delta commit lands whole, and the parquet and CSV files are written under a temporary name and renamed.

The modules, named for what they generate (none imports dagster or pyspark):

    shop.py       the simulated shop: items, customers, each day's orders (seeded, no files)
    sources.py    where the four sources live, files replaced whole, how far the data reaches
    history.py    :func:`generate_demo_data`: the sources from a start day up to a day or an hour
    new_day.py    :func:`append_demo_day`: one more day, or late orders for a loaded day
    new_hours.py  :func:`append_demo_hours`: the next hours in place, with quiet hours and late orders

Example (from the shell)::

    python -m incremental_assets.demo . --days 90 --orders-per-day 500
"""

from incremental_assets.demo.history import generate_demo_data
from incremental_assets.demo.new_day import append_demo_day
from incremental_assets.demo.new_hours import AppendResult, append_demo_hours
from incremental_assets.demo.sources import SOURCE_LOCATIONS, last_complete_hour, loaded_until

__all__ = [
    "SOURCE_LOCATIONS",
    "AppendResult",
    "append_demo_day",
    "append_demo_hours",
    "generate_demo_data",
    "last_complete_hour",
    "loaded_until",
]
