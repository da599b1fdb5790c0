"""benchmarks/profiling.py: its tables say what was measured, with the goals."""

from __future__ import annotations

import numpy as np

import feedline as fl
from benchmarks import profiling


def test_markdown_reports_overhead_sweep_share_and_convergence():
    result = {
        "command": "python -m benchmarks.profiling", "machine": "x86_64, 2 CPUs",
        "date": "2026-11-24",
        "overhead": {"chess": {"off": 200_000.0, "on": 198_000.0, "trace": 190_000.0}},
        "sweep": {"chess": {"AUTOTUNE": 96.0, "map 1, prefetch 1": 100.0,
                            "map 2, prefetch 1": 80.0}},
        "convergence": {"steady": 1000.0, "reached_s": 0.4, "windows": 20},
    }
    text = profiling.markdown(result)
    assert "| chess | 200,000 | 198,000 | **0.990** | 190,000 | 0.950 |" in text
    assert "best fixed (map 1, prefetch 1) 100: **96.0%** of it (goal >= 95%)" in text
    assert "first window at >= 95% of it: 0.40 s (goal: within 3 s)" in text


def test_the_per_element_pipeline_computes_what_it_says():
    ds = profiling.per_element(10).with_options(profiling._options("on"))
    batches = list(ds)
    assert sorted(np.concatenate(batches).tolist()) == [2, 4, 6, 8, 10]
    assert profiling.rate(fl.Dataset.range(3).batch(2)) > 0
