"""What an AUTOTUNE map's executor choice measures, made independent of the machine's load.

End-to-end tests of the executor choice and the tuner used to time real calls: on a busy
machine a GIL-bound function measured as parallel now and then, and the test failed although
the rules were right. The rules have their own tests on given probes; the end-to-end tests
replace each real probe by the one a given kind of function gives on an idle machine, and
check what follows from it (the switch, the tuner's setting, the exact output).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from feedline.placement import map_executor
from feedline.placement.map_executor import ExecutorChoice, Probe

MS = 1e-3


def serialized_by_the_gil(choice: ExecutorChoice, probe: Probe) -> Probe:
    """Busy calls of 5 ms CPU: alone each runs all its time; together one runs at a time."""
    if len(choice._solo) < map_executor.SOLO_TASKS:
        start = len(choice._solo) * 10 * MS
        return Probe(start, start, 5 * MS, 5 * MS, 0.0, probe.elements, probe.transport,
                     probe.payload)
    start = 1.0 + len(choice._together) * 5 * MS  # two in flight, each done 10 ms later
    return Probe(start, start, 10 * MS, 5 * MS, 0.0, probe.elements)


def serialized_short(choice: ExecutorChoice, probe: Probe) -> Probe:
    """:func:`serialized_by_the_gil` with calls of 50 µs (a tokenizer's line): short enough
    to run inline (``placement.policy.INLINE_MAX_CALL_SECONDS``)."""
    long = serialized_by_the_gil(choice, probe)
    return Probe(long.submitted / 100, long.start / 100, long.wall / 100, long.cpu / 100,
                 long.waited, long.elements, long.transport, long.payload)


def waiting(choice: ExecutorChoice, probe: Probe) -> Probe:
    """Calls of 5 ms that use 0.05 ms of CPU (a sleep, a read): they overlap freely."""
    if len(choice._solo) < map_executor.SOLO_TASKS:
        start = len(choice._solo) * 10 * MS
        return Probe(start, start, 5 * MS, 0.05 * MS, 0.0, probe.elements, probe.transport,
                     probe.payload)
    start = 1.0 + len(choice._together) * 2.5 * MS
    return Probe(start, start, 5 * MS, 0.05 * MS, 0.0, probe.elements)


def measure_as(monkeypatch: pytest.MonkeyPatch,
               kind: Callable[[ExecutorChoice, Probe], Probe]) -> None:
    """Make every ``ExecutorChoice`` record ``kind``'s probes instead of the real ones, on a
    machine that leaves one CPU idle meanwhile."""
    record = ExecutorChoice.record
    monkeypatch.setattr(ExecutorChoice, "_idle_cpus", lambda self: 1.0)

    def record_as_measured(self: ExecutorChoice, probe: Probe | None) -> str | None:
        return record(self, None if probe is None else kind(self, probe))

    monkeypatch.setattr(ExecutorChoice, "record", record_as_measured)
