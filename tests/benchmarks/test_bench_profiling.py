"""benchmarks/profiling.py: its tables say what was measured, with the goals."""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl
from benchmarks import profiling


def test_markdown_reports_overhead_sweep_share_and_convergence():
    result = {
        "command": "python -m benchmarks.profiling", "machine": "x86_64, 2 CPUs",
        "date": "2026-11-24",
        "overhead": {"chess": {"off": 200_000.0, "on": 198_000.0, "trace": 190_000.0,
                               "on_ratio": 0.991, "on_middle": (0.97, 1.012),
                               "trace_ratio": 0.95, "trace_middle": (0.9, 0.99),
                               "rounds": 12}},
        "direct": {"chess": {"calls_per_second": 546_000.0, "probes": 0.0027,
                             "samples": 0.0006, "share": 0.0033}},
        "probe_ns": 5.0,
        "sweep": {"chess": {"AUTOTUNE": 96.0, "map 1, prefetch 1": 100.0,
                            "map 2, prefetch 1": 80.0}},
        "head_to_head": {"chess": {"best": "map 1, prefetch 1", "autotune": 97.0,
                                   "fixed": 98.0, "rounds": 5}},
        "convergence": {"steady": 1000.0, "reached_s": 0.4, "windows": 20},
    }
    text = profiling.markdown(result)
    assert ("| chess | 200,000 | 198,000 | **0.991** | 0.970-1.012 | 190,000 | 0.950 | "
            "0.33% (0.55 M calls/s) |") in text
    assert "a probe's cost per call (5.0 ns" in text
    assert "the median over 12 rounds of each round's own ratio" in text
    assert ("Head to head, 5 alternating runs each: AUTOTUNE 97 rows/s, the sweep's best "
            "fixed setting (map 1, prefetch 1) 98: **99.0%** of it (goal >= 95%)") in text
    assert "In the sweep: AUTOTUNE 96 rows/s, best fixed 100 (96.0%;" in text
    assert "first window at >= 95% of it: 0.40 s (goal: within 3 s)" in text


def test_the_per_element_pipeline_computes_what_it_says():
    ds = profiling.per_element(10).with_options(profiling._options("on"))
    batches = list(ds)
    assert sorted(np.concatenate(batches).tolist()) == [2, 4, 6, 8, 10]
    assert profiling.rate(fl.Dataset.range(3).batch(2)) > 0


def test_head_to_head_reads_the_best_setting_of_the_sweep():
    asked = []

    def make(parallel, buffer):
        asked.append((parallel, buffer))
        return fl.Dataset.range(64).batch(8)

    table = {"AUTOTUNE": 1.0, "map 1, prefetch 4": 3.0, "map 2, prefetch 1": 2.0}
    duel = profiling.head_to_head(make, table, rounds=2, seconds=0.01)
    assert duel["best"] == "map 1, prefetch 4" and duel["rounds"] == 2
    assert asked == [(None, None), (1, 4)] * 2
    assert duel["autotune"] > 0 and duel["fixed"] > 0


def test_overhead_rounds_run_the_modes_in_turning_orders(monkeypatch):
    order = []

    rates = {"off": iter([100.0, 200.0, 100.0]), "on": iter([99.0, 190.0, 101.0]),
             "trace": iter([90.0, 200.0, 80.0])}

    def fake_rate(dataset, seconds):
        options = dataset.options()
        profiling_options = options.profiling
        mode = ("trace" if profiling_options.trace else
                "on" if profiling_options.statistics else "off")
        order.append(mode)
        return next(rates[mode])

    monkeypatch.setattr(profiling, "timed_rate", fake_rate)
    monkeypatch.setattr(profiling, "rate", lambda dataset: 1.0)
    table = profiling.overhead_table(lambda: fl.Dataset.range(4), rounds=3, seconds=0.01)
    assert order == ["off", "on", "trace", "on", "trace", "off", "trace", "off", "on"]
    # Medians of the rates; ratios are the median of each round's own ratio.
    assert (table["off"], table["on"], table["trace"]) == (100.0, 101.0, 90.0)
    assert table["on_ratio"] == 0.99 and table["trace_ratio"] == 0.9
    assert table["on_middle"] == pytest.approx((0.97, 1.0))
    assert table["trace_middle"] == pytest.approx((0.85, 0.95))
    assert table["rounds"] == 3


def test_direct_cost_counts_the_stages_calls_and_prices_them():
    per_call = profiling.probe_cost(calls=20_000, rounds=2)
    assert 0.0 <= per_call < 1e-6  # a probe costs nanoseconds, never a microsecond
    cost = profiling.direct_cost(lambda: fl.Dataset.range(1000).map(lambda x: x + 1),
                                 seconds=0.2, per_call=1e-8)
    # Three probed stages (repeat, map, range) each hand out every element.
    assert cost["calls_per_second"] > 0
    assert cost["probes"] == pytest.approx(cost["calls_per_second"] * 1e-8)
    assert cost["share"] == pytest.approx(cost["probes"] + cost["samples"])
