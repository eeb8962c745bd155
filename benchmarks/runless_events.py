"""Materializations recorded without a run (what ``promote`` and the reconciliation of missed commits
write): one by one through ``DagsterInstance.report_runless_asset_event``, against one batch through
:func:`incremental_assets.orchestration.instance.report_materializations`, on the project's Dagster
instance (its batched SQLite event log) in a fresh Dagster home.

    python benchmarks/runless_events.py [N]     # N partitions (default 1000)
"""

from __future__ import annotations

import sys
import tempfile
import time

import dagster as dg

from incremental_assets.orchestration.instance import open_instance, report_materializations


def main(n: int) -> None:
    instance = open_instance(tempfile.mkdtemp())
    keys = [str(i) for i in range(n)]

    def events(name: str) -> list[dg.AssetMaterialization]:
        return [
            dg.AssetMaterialization(asset_key=["s", name], partition=k, metadata={"delta_version": 1}) for k in keys
        ]

    one = events("one")
    began = time.perf_counter()
    for m in one:
        instance.report_runless_asset_event(m)
    single = time.perf_counter() - began
    batched = events("batch")
    began = time.perf_counter()
    report_materializations(instance, batched)
    batch = time.perf_counter() - began
    assert instance.get_materialized_partitions(dg.AssetKey(["s", "batch"])) == set(keys)
    print(
        f"{n} materializations: one by one {single:.2f}s ({n / single:,.0f}/s); one batch {batch:.2f}s "
        f"({n / batch:,.0f}/s)"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
