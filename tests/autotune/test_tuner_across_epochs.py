"""The tuner across a repeat's epochs: each iterator of a stage is sized by its own elements,
and the next epoch's stage, registered while the tuner forgets the last, is tuned."""

from __future__ import annotations

import numpy as np
import pytest

from feedline.autotune.tuner import TuningCounters, stage_bound
from feedline.execution.map_knobs import THREAD_BYTES
from feedline.execution.stage_knobs import ThreadStageKnobs

pytestmark = pytest.mark.timeout(60)


def test_an_interleaves_next_epoch_sizes_its_reads_by_its_own_elements():
    # The tuner shares a stage's counters across its iterators (each epoch of a repeat()),
    # while each iterator's knobs count their own tasks: the elements a read holds must be
    # this iterator's elements per task, not every epoch's so far over this one's tasks
    # (which made each later epoch look like reads holding thousands of elements, and the
    # RAM bound cut the interleave to one reading thread at every epoch's start).
    shared = TuningCounters()
    first = ThreadStageKnobs("interleave", 2, 8, 2, ram_budget=64 * (THREAD_BYTES + 8000))
    first.counters = shared  # as Tuner.register() hands it over
    for _ in range(100):  # epoch 1: 100 reads of 10 elements
        first.run_task(lambda: None)
        shared.elements += 10
    first.sample(np.zeros(1000, dtype=np.uint8), 0)
    assert first.bytes_per_worker == 10 * 1000 + THREAD_BYTES
    first.done = True

    second = ThreadStageKnobs("interleave", 2, 8, 2, ram_budget=64 * (THREAD_BYTES + 8000))
    second.counters = shared  # epoch 2: the same stage to the tuner
    second.run_task(lambda: None)
    shared.elements += 10
    second.sample(np.zeros(1000, dtype=np.uint8), shared.elements)
    assert second.bytes_per_worker == 10 * 1000 + THREAD_BYTES
    # And so the RAM budget bounds it as it did the first epoch.
    assert stage_bound(second, 0.01).by_ram == stage_bound(first, 0.01).by_ram


class _Stage:
    """A stage the tuner sees (the fields :class:`~feedline.autotune.tuner.Tuner` reads)."""

    def __init__(self, name: str = "batch") -> None:
        self.name = name
        self.max_workers = self.cpu_workers = self.cores = self.tuned_workers = 4
        self.ram_budget, self.bytes_per_worker = 1 << 40, 65536.0
        self.tuning_paused = False
        self.measured_calls = None
        self.counters = TuningCounters()
        self._done = False

    @property
    def tuning_done(self) -> bool:
        return self._done

    def tuning_counters(self) -> tuple[int, int, int, float, float, float]:
        c = self.counters
        return c.elements, c.calls, c.waits, c.busy, c.input, c.cpu


def test_the_next_epochs_stage_registered_while_the_tuner_forgets_the_last_is_tuned():
    # repeat() closes an epoch's iterator and makes the next, which registers under the
    # same key, on the consumer's thread, while the tuner's thread may be between seeing
    # the closed stage and forgetting it: the new epoch's stage must stay tuned.
    from feedline.autotune.tuner import Tuner

    tuner = Tuner(period=3600)  # the test looks; its thread waits
    key = object()
    old, new = _Stage(), _Stage()
    old.counters = tuner.register(old, key)

    class Closing(_Stage):
        @property
        def tuning_done(self) -> bool:
            # The consumer runs here: the next epoch's stage registers.
            new.counters = tuner.register(new, key)
            return True

    try:
        old.__class__ = Closing
        tuner.tick()
        assert [control.stage() for control in tuner._controls] == [new]
    finally:
        tuner.stop()
