"""Small helpers shared by the Spark tests: sources as Delta tables, tables read back as sorted rows."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake


EVENTS_SOURCE = """\
- name: raw.events
  location: data/events
  format: delta
  time_column: ts
  interval_unit: hour
"""


def write_events(path, start: datetime, hours: int, *, per_hour: int = 1, mode: str = "overwrite") -> None:
    """A time-series Delta source: ``per_hour`` events each hour from ``start``, keys k0..k2."""
    ts = [start + timedelta(hours=h, minutes=m * (60 // per_hour)) for h in range(hours) for m in range(per_hour)]
    table = pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "k": pa.array([f"k{i % 3}" for i in range(len(ts))]),
            "v": pa.array([i % 7 for i in range(len(ts))], pa.int64()),
        }
    )
    write_deltalake(str(path), table, mode=mode)


def table_rows(uri: str, *, drop=("ia_interval",)) -> list[tuple]:
    """Every row of the current Delta version, as sorted tuples (what any Delta reader sees)."""
    t = DeltaTable(uri).to_pyarrow_table()
    t = t.select([c for c in t.column_names if c not in drop])
    return sorted(normalize(tuple(r.values())) for r in t.to_pylist())


def normalize(row: tuple) -> tuple:
    """Aware datetimes as naive UTC, so rows from Delta readers and from Spark's collect() compare equal."""
    return tuple(v.astimezone(timezone.utc).replace(tzinfo=None) if isinstance(v, datetime) and v.tzinfo else v for v in row)


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)
