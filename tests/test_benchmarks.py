"""The benchmark runner's pure parts: the generated large project loads whole, the peer model is ours minus audits."""

from __future__ import annotations

import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

import peer  # noqa: E402
import project_scale  # noqa: E402

from incremental_assets.model import parse_model_file  # noqa: E402


def test_generated_project_loads_and_builds_definitions_in_a_fresh_process():
    [measured] = project_scale.main(["30"])
    assert measured["models"] == 30
    assert measured["assets"] == 30 + 2  # every model plus the two sources
    assert measured["refused"] == 0
    assert measured["load_s"] > 0 and measured["max_rss_mb"] > 50


def test_peer_side_runs_the_example_model_without_its_audits(tmp_path):
    peer.our_model(tmp_path)
    ours = parse_model_file(tmp_path / "models" / "order_lines.sql")
    example = parse_model_file(REPO / "models" / "staging" / "order_lines.sql")
    assert example.audits and not ours.audits
    assert ours.fingerprint == example.fingerprint  # same query, kind and time layout: the same data
