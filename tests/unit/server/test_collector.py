"""The collector's thresholds a serving gateway sets (gateway/server/collector.py)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

from gateway.server.collector import SERVING_THRESHOLDS, tune_collector


def test_the_young_generation_waits_longer_and_the_older_ones_keep_pythons_thresholds() -> None:
    # In a process of its own: this one's collector is pytest's.
    script = (
        "import gc, json; from gateway.server.collector import tune_collector; "
        "before = gc.get_threshold(); tune_collector(); "
        "print(json.dumps([before, gc.get_threshold()]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    before, after = json.loads(result.stdout)
    assert before == [700, 10, 10]  # CPython's defaults
    assert tuple(after) == SERVING_THRESHOLDS
    assert SERVING_THRESHOLDS[0] > 700
    assert SERVING_THRESHOLDS[1:] == (10, 10)


def test_tune_collector_leaves_the_collector_enabled() -> None:
    saved = gc.get_threshold()
    try:
        tune_collector()
        assert gc.isenabled()
        assert gc.get_threshold() == SERVING_THRESHOLDS
    finally:
        gc.set_threshold(*saved)
