"""benchmarks/settling.py: trials are told from moves, and a run reads what it says."""

from __future__ import annotations

import feedline as fl
from benchmarks import settling
from feedline.profiling.records import TuningDecision


def _change(seconds: float, old: int, new: int, stage: str = "map(f)") -> TuningDecision:
    return TuningDecision(seconds, stage, "workers", old, new, "")


def test_a_change_put_back_by_the_next_of_its_knob_is_a_trial():
    changes = [_change(1, 2, 4), _change(2, 4, 2), _change(3, 2, 3), _change(4, 3, 2),
               _change(5, 2, 1), _change(6, 1, 1, "prefetch"), _change(7, 1, 2)]
    # The prefetch change between the last two does not part them.
    assert settling.trial_pairs(changes) == [True, True, True, True, True, False, True]


def test_a_run_counts_moves_and_trials_after_the_goal():
    def make() -> fl.Dataset:
        return fl.Dataset.range(4096).batch(64).map(lambda x: x + 1,
                                                     num_parallel_calls=fl.AUTOTUNE)

    run = settling.run_once("tiny", make, 1.0)
    assert run.workload == "tiny" and run.rate > 0
    assert run.moves >= 0 and run.trials >= 0
    assert run.moves + 2 * run.trials <= len(run.changes)
