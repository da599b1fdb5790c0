"""The rule of prefetch(AUTOTUNE)'s buffer, on a scripted reader (no threads, no clock)."""

from __future__ import annotations

from feedline.execution import buffer_tuning as buffer
from feedline.execution.buffer_tuning import AUTOTUNE_MAX_BUFFER, BufferTuning


class _Reader:
    """Ready or not as scripted; the input's time per element as given."""

    def __init__(self, ready: list[bool], seconds_per_item: float | None,
                 element: bytes = b"x" * 100, capacity: int = 1) -> None:
        self._ready = iter(ready)
        self.seconds_per_item = seconds_per_item
        self.element = element
        self.capacity = capacity

    def ready(self) -> bool:
        return next(self._ready)

    def next(self) -> bytes:
        return self.element


class _Tuner:
    def __init__(self) -> None:
        self.records: list[tuple[str, str, int, int, str]] = []

    def record(self, name: str, knob: str, old: int, new: int, reason: str) -> None:
        self.records.append((name, knob, old, new, reason))


def _slow_consumer(monkeypatch, seconds: float = 0.01) -> None:
    """Each call finds the consumer ``seconds`` after the last one returned."""
    ticks = iter(range(10_000))
    monkeypatch.setattr(buffer.time, "perf_counter", lambda: next(ticks) * seconds / 2)


def test_it_grows_each_time_the_consumer_drains_it_and_the_input_keeps_up(monkeypatch):
    _slow_consumer(monkeypatch)
    tuner, grown = _Tuner(), [1]
    tuning = BufferTuning("prefetch", grown, 1 << 20, tuner)
    # Ready, then empty (drained), ready, empty ...: the input keeps up (1 ms an element
    # against 5 ms between calls) but comes in bursts.
    reader = _Reader([True, False] * 5, seconds_per_item=0.001)
    for _ in range(10):
        tuning.next(reader)
    # Every second call drained it (the first: no time between calls measured yet).
    assert reader.capacity == 6 and grown == [6]
    assert [(r[2], r[3]) for r in tuner.records] == [(1, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
    assert tuner.records[0][:2] == ("prefetch", "buffer")
    assert tuner.records[0][4].startswith("its consumer drained it, and its input keeps up")


def test_an_input_slower_than_its_consumer_gets_no_depth(monkeypatch):
    _slow_consumer(monkeypatch)
    tuning = BufferTuning("prefetch", [1], 1 << 20)
    reader = _Reader([True, False] * 5, seconds_per_item=1.0)  # 1 s an element
    for _ in range(10):
        tuning.next(reader)
    assert reader.capacity == 1


def test_found_empty_call_after_call_is_not_a_drain(monkeypatch):
    _slow_consumer(monkeypatch)
    tuning = BufferTuning("prefetch", [1], 1 << 20)
    reader = _Reader([False] * 10, seconds_per_item=0.001)
    for _ in range(10):
        tuning.next(reader)
    # The first call is a drain, but the consumer's time between calls is not known yet;
    # later calls find it empty again: the input is slower, not bursty.
    assert reader.capacity == 1


def test_it_stays_within_the_ram_budget_and_the_largest_size(monkeypatch):
    _slow_consumer(monkeypatch)
    tuning = BufferTuning("prefetch", [1], 350)  # three 100-byte elements fit
    reader = _Reader([True, False] * 20, seconds_per_item=0.001)
    for _ in range(40):
        tuning.next(reader)
    assert reader.capacity == 3
    tuning = BufferTuning("prefetch", [1], 1 << 30)
    reader = _Reader([True, False] * 40, seconds_per_item=0.001)
    for _ in range(80):
        tuning.next(reader)
    assert reader.capacity == AUTOTUNE_MAX_BUFFER


def test_a_size_carried_over_is_cut_to_the_budget_at_the_first_element():
    tuner, grown = _Tuner(), [8]
    tuning = BufferTuning("prefetch", grown, 4096, tuner)
    reader = _Reader([True], seconds_per_item=None, element=b"x" * 1024,
                     capacity=tuning.start_capacity)
    assert reader.capacity == 8
    tuning.next(reader)
    assert reader.capacity == 4 and grown == [4]
    assert tuner.records == [("prefetch", "buffer", 8, 4, "8 elements of 1,024 bytes, carried "
                              "from the last epoch, exceed the RAM budget (4,096 bytes)")]


def test_cheap_elements_a_consumer_waits_for_get_depth_even_from_a_slower_input(monkeypatch):
    # 20 µs an element against 1 µs between calls: the input is the slower side, and each
    # wait is a hand-off of both threads that a deeper buffer spares (a vectorized map's
    # batches: 1.2M elements/s one deep, 5M sixteen deep).
    _slow_consumer(monkeypatch, seconds=1e-6)
    tuner = _Tuner()
    tuning = BufferTuning("prefetch", [1], 1 << 20, tuner)
    reader = _Reader([False] * 20, seconds_per_item=20e-6)
    for _ in range(20):
        tuning.next(reader)
    assert reader.capacity == AUTOTUNE_MAX_BUFFER
    assert tuner.records[0][2:4] == (1, 2)
    assert tuner.records[0][4].startswith(
        "its consumer waited for elements that take under 200 µs each: depth spares the "
        "hand-offs (0.02 ms per element")
    # At the boundary, and unmeasured, the old rule holds: no depth for a slower input.
    for seconds in (buffer.HANDOFF_SECONDS, None):
        tuning = BufferTuning("prefetch", [1], 1 << 20)
        reader = _Reader([False] * 10, seconds_per_item=seconds)
        for _ in range(10):
            tuning.next(reader)
        assert reader.capacity == 1


def test_a_long_wait_for_cheap_elements_is_the_inputs_pace_not_a_hand_off(monkeypatch):
    # A parallel map's bursts: elements read at once from its finished results (cheap to
    # the reader), then a wait of milliseconds for the next burst: no depth.
    _slow_consumer(monkeypatch, seconds=0.01)  # each call waits 5 ms
    tuning = BufferTuning("prefetch", [1], 1 << 20)
    reader = _Reader([False] * 10, seconds_per_item=20e-6)
    for _ in range(10):
        tuning.next(reader)
    assert reader.capacity == 1
