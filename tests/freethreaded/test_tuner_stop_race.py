"""A tuner stopped while a stage registers: stop() returns only once the thread that
register() starts has ended (stop used to read the thread before register stored it)."""

from __future__ import annotations

import threading

from feedline.autotune import tuner as tuner_module
from feedline.autotune.stage import TuningCounters
from feedline.autotune.tuner import Tuner


class _Stage:
    name = "map(f)"
    max_workers = cpu_workers = cores = tuned_workers = 2
    ram_budget = 1 << 40
    bytes_per_worker = 65536.0
    tuning_done = tuning_paused = False
    measured_calls = None

    def __init__(self) -> None:
        self.counters = TuningCounters()

    def tuning_counters(self) -> tuple[int, int, int, float, float, float]:
        c = self.counters
        return c.elements, c.calls, c.waits, c.busy, c.input, c.cpu


def test_a_stop_while_register_makes_the_thread_waits_for_that_thread(monkeypatch):
    original = threading.Thread
    tuner = Tuner(period=3600)  # its thread would sleep an hour unless stop() wakes it
    stoppers: list[threading.Thread] = []
    seen_after_stop: list[threading.Thread | None] = []

    def stop() -> None:
        tuner.stop()
        seen_after_stop.append(tuner._thread)

    class StopWhileMade(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs) -> None:
            if not stoppers:  # register() is making the tuner's thread, holding its lock
                stopper = original(target=stop, name="stopper")
                stoppers.append(stopper)
                stopper.start()
                stopper.join(0.5)  # before the fix, stop() ended here without a thread to join
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(tuner_module.threading, "Thread", StopWhileMade)
    tuner.register(_Stage())
    monkeypatch.setattr(tuner_module.threading, "Thread", original)
    (stopper,) = stoppers
    stopper.join(10)
    assert not stopper.is_alive()
    started = tuner._thread
    # stop() returned after the thread register() made, and that thread has ended.
    assert started is not None and seen_after_stop == [started]
    assert not started.is_alive()
