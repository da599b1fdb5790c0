"""An AUTOTUNE map settled inline at one worker runs the plain inline loop (issue 42).

Once inline for good, the stage's ``next()`` is what a plain inline map does: no counter per
element (the tuner reads the elements handed out from the input's position), no window.
These tests check that the tuner still counts every element, that a new setting sends the
stage back to its threads at once, and that outcomes, errors and checkpoints are those of
the inline map. The executor choice's measurements are injected as in
tests/transforms/test_map_inline.py.
"""

from __future__ import annotations

import time

import pytest
from gil_measurements import measure_as, serialized_short

import feedline as fl
from feedline.core.validation import schedulable_cpus
from feedline.placement import map_executor
from feedline.placement import runner as runner_module
from feedline.placement.map_executor import ExecutorChoice
from feedline.testing.failures import fail_at
from feedline.testing.threads import no_leaked_threads
from feedline.transforms.map import ParallelMapIterator

pytestmark = [
    pytest.mark.usefixtures("gil_build_rules"),
    pytest.mark.skipif(schedulable_cpus() < 2, reason="the executor choice measures nothing "
                                                      "on one CPU"),
    pytest.mark.timeout(60),
]

THREADS = fl.Options(autotune=fl.AutotuneOptions(processes=False),
                     profiling=fl.ProfilingOptions(statistics=True))


@pytest.fixture(autouse=True)
def _serialized_on_threads(monkeypatch):
    """Calls measured serialized by the GIL, kept on threads, decided at the 12th element."""
    measure_as(monkeypatch, serialized_short)
    monkeypatch.setattr(ExecutorChoice, "_pickles", lambda self: False)
    monkeypatch.setattr(map_executor, "SOLO_TASKS", 1)
    monkeypatch.setattr(map_executor, "CONCURRENT_TASKS", 10)
    monkeypatch.setattr(map_executor, "CONCURRENT_SECONDS", 0.0)
    monkeypatch.setattr(runner_module, "MAX_CHUNK", 1)


def _failing(x):
    if int(x) in (1, 45, 52):
        raise ValueError(f"bad element {int(x)}")
    return int(x) * 3


def _outcomes(it, limit: int | None = None) -> list:
    out: list = []
    while limit is None or len(out) < limit:
        try:
            out.append(int(next(it)))
        except StopIteration:
            return out
        except Exception as error:  # noqa: BLE001 - compared below
            out.append((type(error).__name__, str(error), getattr(error, "__notes__", [])))
    return out


def _reference(ds: fl.Dataset) -> list:
    with iter(ds.map(_failing)) as it:
        return _outcomes(it)


def _until_plain(it, stage: ParallelMapIterator) -> list:
    """Outcomes read until the stage is on its plain path (the tuner sets one worker once
    the executor choice has decided; the next ``next()`` follows it)."""
    out: list = []
    deadline = time.monotonic() + 30
    while stage._plain is None:
        while stage.executor_decision is not None and stage.knobs.tuned_workers != 1:
            assert time.monotonic() < deadline, "the tuner did not set one worker"
            time.sleep(0.005)
        out.extend(_outcomes(it, 1))
    return out


def _auto(ds: fl.Dataset) -> fl.Dataset:
    return ds.map(_failing, num_parallel_calls=fl.AUTOTUNE).with_options(THREADS)


def test_the_plain_path_gives_the_inline_outcomes_and_the_tuner_counts_each_element():
    ds = fail_at(fl.Dataset.range(80), [40])  # an input error on the plain path
    with no_leaked_threads(), iter(_auto(ds)) as it:
        stage = it._root
        got = _until_plain(it, stage)
        assert stage.runs_inline and stage.knobs.tuned_workers == 1
        got += _outcomes(it, 60 - len(got))
        assert stage._plain is not None  # errors do not leave it
        # Every outcome handed out, errors included, counted once: counted ones plus those
        # the plain path handed out uncounted.
        elements, calls = stage.knobs.tuning_counters()[:2]
        assert (elements, calls) == (60, 60)
        assert stage.knobs.counters.elements < 60
        got += _outcomes(it)
    assert got == _reference(fail_at(fl.Dataset.range(80), [40]))
    assert [i for i, o in enumerate(got) if isinstance(o, tuple)] == [1, 40, 45, 52]
    assert got[45][2] == ["feedline: raised in map(_failing) at input element 45"]


def test_an_inline_map_numbers_an_input_error_as_its_element():
    # As a parallel map does: element 45 of the input is "input element 45" after an
    # input error at 40 (it was numbered 44).
    got = _reference(fail_at(fl.Dataset.range(50), [40]))
    assert got[40][0] == "InjectedError"
    assert got[45] == ("ValueError", "bad element 45",
                       ["feedline: raised in map(_failing) at input element 45"])


def test_a_new_setting_sends_the_stage_back_to_its_threads_at_once():
    with no_leaked_threads(), iter(_auto(fl.Dataset.range(90))) as it:
        stage = it._root
        got = _until_plain(it, stage)
        got += _outcomes(it, 50 - len(got))
        stage._runner.tuner.stop()  # its thread would go on judging the setting set here
        stage.knobs.tuned_workers = 2  # as the tuner's thread sets it
        assert stage._plain is None  # before the consumer's next call
        assert stage.knobs.tuning_counters()[0] == 50
        got += _outcomes(it, 5)
        assert not stage.runs_inline
        # The elements of the plain path were added to the counters when it left it.
        assert stage.knobs.counting_from is None
        assert stage.knobs.counters.elements == stage.knobs.tuning_counters()[0] == 55
        state = it.state_dict()
        rest = _outcomes(it)
    assert got + rest == _reference(fl.Dataset.range(90))
    with no_leaked_threads(), iter(fl.Dataset.range(90).map(_failing)) as it:
        it.load_state_dict(state)
        assert _outcomes(it) == rest


def test_a_checkpoint_on_the_plain_path_restores_exactly():
    with no_leaked_threads(), iter(_auto(fl.Dataset.range(70))) as it:
        stage = it._root
        head = _until_plain(it, stage)
        head += _outcomes(it, 48 - len(head))
        state = it.state_dict()
        middle = _outcomes(it, 10)
        it.load_state_dict(state)  # restored on the plain path: back to the window's
        assert stage._plain is None
        again = _outcomes(it, 10)
        rest = _outcomes(it)
    expected = _reference(fl.Dataset.range(70))
    assert middle == again == expected[48:58]
    assert head + again + rest == expected
    for variant in (fl.Dataset.range(70).map(_failing),
                    fl.Dataset.range(70).map(_failing, num_parallel_calls=2)):
        with no_leaked_threads(), iter(variant) as other:
            other.load_state_dict(state)
            assert _outcomes(other) == expected[48:]
