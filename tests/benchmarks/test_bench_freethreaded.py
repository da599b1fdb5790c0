"""benchmarks.freethreaded: the exact multiset hash, the scaling formula and one child run."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from benchmarks import data, freethreaded


def test_element_hashes_are_order_free_and_see_one_changed_byte() -> None:
    rng = np.random.default_rng(0)
    batch = {"x": rng.random((6, 5), dtype=np.float32), "y": np.arange(6, dtype=np.int64)}
    whole = freethreaded.multiset_hash([freethreaded.element_hashes(batch)])
    order = np.array([5, 3, 1, 0, 2, 4])
    split = [{k: v[order[:2]] for k, v in batch.items()},
             {k: v[order[2:]] for k, v in batch.items()}]
    assert freethreaded.multiset_hash([freethreaded.element_hashes(b) for b in split]) == whole
    changed = {"x": batch["x"].copy(), "y": batch["y"]}
    changed["x"].view(np.uint8)[3, 7] ^= 1
    assert freethreaded.multiset_hash([freethreaded.element_hashes(changed)]) != whole


def test_element_hashes_see_values_swapped_inside_a_row() -> None:
    a = np.array([[1, 2, 3]], dtype=np.int32)
    assert (freethreaded.element_hashes(a)[0]
            != freethreaded.element_hashes(a[:, ::-1].copy())[0])


def test_predict_is_the_smallest_of_its_three_bounds() -> None:
    assert freethreaded.predict(1e-6, 9e-6, 4, 1000, 1e9) == pytest.approx(400_000)
    assert freethreaded.predict(1e-5, 1e-6, 64, 1000, 1e9) == pytest.approx(100_000)
    assert freethreaded.predict(1e-7, 1e-7, 64, 1e6, 1e9) == pytest.approx(1_000)


def test_a_child_run_hashes_every_element_and_follows_its_process_tree(tmp_path) -> None:
    meta = data.text(40, seed=3, cache=tmp_path)
    env = {**os.environ, "PYTHONPATH": str(freethreaded.ROOT)}
    results = {}
    for setting in ("inline", "threads2"):
        job = {"workload": "python_heavy", "data": meta, "seed": 3, "system": "feedline",
               "setting": setting, "mode": "check"}
        results[setting] = freethreaded.run_child(sys.executable, job, env, timeout=120)
    for result in results.values():
        assert result["ok"], result
        assert result["elements"] == 40
        assert result["processes"] == 1
        assert result["forks"] == 0
        assert result["peak_bytes"] > 0
    assert results["inline"]["hash"] == results["threads2"]["hash"]
    assert results["threads2"]["where"] == "thread"


def test_table_rows_give_ratios_cpu_and_memory_and_no_peer_ratio_without_peers() -> None:
    rows = [freethreaded.Setting("ft", "feedline", "inline"),
            freethreaded.Setting("ft", "feedline", "threads2")]
    run = {"peak_bytes": 2**20, "processes": 1, "cpu_s": 1.0, "elements": 10, "seconds": 2.0,
           "where": "thread", "gil_after_run": False}
    outcomes = {"ft:inline": freethreaded.Outcome(runs=[{**run, "rate": 10.0}],
                                                  check={"ok": True, "hash": "ab"}),
                "ft:threads2": freethreaded.Outcome(runs=[{**run, "rate": 15.0}],
                                                    check={"ok": True, "hash": "ab"})}
    lines = freethreaded.table("chess", rows, outcomes)
    assert lines[3] == ("| ft:threads2 | 15 | 15–15 | 1.50 | – | 100000.0 | 0.50 | 1 MiB | 1 "
                        "| thread | no | ab |")
