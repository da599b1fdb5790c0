"""AUTOTUNE under a memory budget: a map whose calls wait grows threads beyond the cores, but
never holds more results in flight than ``AutotuneOptions(ram_budget=...)`` allows (issue 25).

Measured, not estimated: every result counts itself while it is alive (a finalizer), and the
largest number alive at once is compared with the budget.
"""

from __future__ import annotations

import threading
import time
import weakref

import numpy as np
import pytest

import feedline as fl
from feedline.testing.threads import no_leaked_threads

MiB = 1 << 20
RESULT = 8 * MiB


class _Alive:
    """How many results are alive now, and at most."""

    def __init__(self) -> None:
        self.now = self.peak = 0
        self._lock = threading.Lock()

    def made(self, array: np.ndarray) -> np.ndarray:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        weakref.finalize(array, self._freed)
        return array

    def _freed(self) -> None:
        with self._lock:
            self.now -= 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("budget_mib", [32, 64])
@pytest.mark.slow
def test_a_waiting_map_of_8_mib_results_stays_within_the_ram_budget(budget_mib):
    alive = _Alive()

    def fetch(i):  # waits (the GIL released), then makes an 8 MiB result
        time.sleep(0.05)
        return alive.made(np.full(RESULT, i % 251, np.uint8))

    ds = fl.Dataset.range(300).map(fetch, num_parallel_calls=fl.AUTOTUNE).with_options(
        fl.Options(autotune=fl.AutotuneOptions(ram_budget=budget_mib * MiB)))
    count = 0
    with no_leaked_threads(), iter(ds) as it:
        for count, element in enumerate(it, 1):
            assert element[0] == (count - 1) % 251
            del element
    assert count == 300
    # The budget, plus the one element the consumer holds.
    assert alive.peak * RESULT <= budget_mib * MiB + RESULT, alive.peak
    assert alive.now == 0
