"""An AUTOTUNE map whose calls the GIL serializes settles inline (issue 25).

The executor choice's measurements are injected (``gil_measurements``): the calls measure
as serialized by the GIL whatever the machine's load, and they stay on threads (the
function is taken not to pickle). The stage then hands out its tasks in flight and calls
its function on its consumer's thread: these tests check that nothing of the output, the
errors or the checkpoints depends on where the switch happens.
"""

from __future__ import annotations

import time

import pytest
from gil_measurements import measure_as, serialized_by_the_gil, serialized_short, waiting

import feedline as fl
from feedline.core.validation import schedulable_cpus
from feedline.placement import map_executor, policy
from feedline.placement import runner as runner_module
from feedline.placement.map_executor import ExecutorChoice
from feedline.testing import check_checkpointing
from feedline.testing.failures import Failed, fail_at
from feedline.testing.threads import no_leaked_threads
from feedline.transforms.map import ParallelMapIterator

pytestmark = [
    # GIL measurements are injected: the GIL build's rules apply, on any interpreter.
    pytest.mark.usefixtures("gil_build_rules"),
    pytest.mark.skipif(schedulable_cpus() < 2, reason="the executor choice measures nothing "
                                                      "on one CPU"),
    pytest.mark.timeout(60),
]

_RECORD = ExecutorChoice.record  # unpatched, for a test that injects other measurements

THREADS = fl.Options(autotune=fl.AutotuneOptions(processes=False),
                     profiling=fl.ProfilingOptions(statistics=True))


@pytest.fixture(autouse=True)
def _serialized_on_threads(monkeypatch):
    """Calls measured serialized by the GIL, kept on threads; one element per task and a
    short measurement (one task alone, then ten together, as many as it takes the
    injected probes to count two calls at once: decided at the 12th ``next()``), so every
    iterator switches at the same element."""
    measure_as(monkeypatch, serialized_short)
    monkeypatch.setattr(ExecutorChoice, "_pickles", lambda self: False)
    monkeypatch.setattr(map_executor, "SOLO_TASKS", 1)
    monkeypatch.setattr(map_executor, "CONCURRENT_TASKS", 10)
    monkeypatch.setattr(map_executor, "CONCURRENT_SECONDS", 0.0)
    monkeypatch.setattr(runner_module, "MAX_CHUNK", 1)


def _triple(x):
    return int(x) * 3


def _failing(x):
    if int(x) in (1, 13, 20):
        raise ValueError(f"bad element {int(x)}")
    return int(x) * 3


def _failing40(x):
    if int(x) in (1, 13, 36, 39):
        raise ValueError(f"bad element {int(x)}")
    return int(x) * 3


def _auto(ds: fl.Dataset, fn) -> fl.Dataset:
    return ds.map(fn, num_parallel_calls=fl.AUTOTUNE).with_options(THREADS)


def _until_inline(it, stage=None) -> list:
    """Outcomes read until the map runs inline: once its executor choice has decided, the
    tuner's thread (woken by it) sets one worker, which the next ``next()`` follows."""
    stage = it._root if stage is None else stage
    out: list = []
    deadline = time.monotonic() + 30
    while not stage.runs_inline:
        while stage.executor_decision is not None and stage.knobs.tuned_workers != 1:
            assert time.monotonic() < deadline, "the tuner did not set one worker"
            time.sleep(0.005)
        out.extend(_outcomes(it, 1))
    return out


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


def test_settles_inline_with_the_exact_output():
    with no_leaked_threads(), iter(_auto(fl.Dataset.range(50), _triple)) as it:
        stage = it._root
        assert isinstance(stage, ParallelMapIterator)
        head = _until_inline(it)
        # Decided at the 12th element at the earliest; the tasks in flight go out first.
        assert len(head) >= 12
        assert head + [int(x) for x in it] == [3 * i for i in range(50)]
        inline = [d for d in it.statistics().tuning if d.setting == "inline"]
        assert [(d.old, d.new) for d in inline] == [(0, 1)]
        assert inline[0].figures["gil_share"] == pytest.approx(1.0)
        assert stage.knobs.tuned_workers == 1


def test_errors_come_out_in_place_as_an_inline_map_raises_them():
    # Elements 1 and 13 (on threads, measured) and 36, 39 (inline: the choice decides at the
    # 12th element, the tuner's setting is waited for, the window holds 4 tasks of one) fail:
    # each in its place, with the stage and element named as the inline map names them, and
    # the run goes on.
    with no_leaked_threads(), iter(_auto(fl.Dataset.range(40), _failing40)) as it:
        got = _until_inline(it) + _outcomes(it)
    with iter(fl.Dataset.range(40).map(_failing40)) as it:
        expected = _outcomes(it)
    assert got == expected
    assert [o[1] for o in got if isinstance(o, tuple)] == [
        "bad element 1", "bad element 13", "bad element 36", "bad element 39"]


def test_an_input_error_keeps_its_place_inline():
    ds = fail_at(fl.Dataset.range(40), [2, 35])
    with no_leaked_threads(), iter(_auto(ds, _triple)) as it:
        got = _until_inline(it) + _outcomes(it)
    expected = [3 * i for i in range(40) if i not in (2, 35)]
    assert [o for o in got if not isinstance(o, tuple)] == expected
    assert [i for i, o in enumerate(got) if isinstance(o, tuple)] == [2, 35]
    assert {o[0] for o in got if isinstance(o, tuple)} == {"InjectedError"}


def test_checkpoints_restore_across_the_inline_switch():
    # States taken on threads (steps 2, 5, 9) and inline (17, 24) restore into a new AUTOTUNE
    # iterator (which measures afresh and switches during or after its re-read), into the
    # same one, into an inline map and into a threaded one; errors included.
    with no_leaked_threads():
        outcomes = check_checkpointing(
            _auto(fl.Dataset.range(24), _failing), epochs=1, steps=[0, 2, 5, 9, 12, 17, 24],
            variants=[fl.Dataset.range(24).map(_failing),
                      fl.Dataset.range(24).map(_failing, num_parallel_calls=2)])
    assert [o for o in outcomes if not isinstance(o, Failed)] == [
        3 * i for i in range(24) if i not in (1, 13, 20)]
    assert [i for i, o in enumerate(outcomes) if isinstance(o, Failed)] == [1, 13, 20]


def test_an_inline_state_restores_into_a_threaded_map_and_back():
    with iter(_auto(fl.Dataset.range(40), _triple)) as it:
        head = _until_inline(it)
        state = it.state_dict()
    n = len(head)
    threaded = fl.Dataset.range(40).map(_triple, num_parallel_calls=2)
    with no_leaked_threads(), iter(threaded) as other:
        other.load_state_dict(state)
        assert head + [int(next(other)) for _ in range(5)] == [3 * i for i in range(n + 5)]
        back = other.state_dict()  # tasks in flight: a position to re-read from
    with no_leaked_threads(), iter(_auto(fl.Dataset.range(40), _triple)) as it:
        # Inline first, then the threaded state: its re-read runs inline.
        _until_inline(it)
        it.load_state_dict(back)
        assert [int(x) for x in it] == [3 * i for i in range(n + 5, 40)]
        assert it._root.runs_inline


def test_later_epochs_start_inline():
    ds = fl.Dataset.range(40).map(_triple, num_parallel_calls=fl.AUTOTUNE).repeat(3)
    with no_leaked_threads(), iter(ds.with_options(THREADS)) as it:
        first = it._root._inputs[0]
        got = _until_inline(it, first)
        got += _outcomes(it, 40 - len(got) + 1)  # the rest of the epoch, one of the next
        second = it._root._inputs[0]
        assert second is not first and second.runs_inline
        got += _outcomes(it)
        assert got == [3 * i for i in range(40)] * 3
        # Recorded once, by the iterator that measured.
        assert [d.setting for d in it.statistics().tuning].count("inline") == 1


def test_calls_that_wait_stay_on_threads(monkeypatch):
    monkeypatch.setattr(ExecutorChoice, "record", _RECORD)
    measure_as(monkeypatch, waiting)
    with no_leaked_threads(), iter(_auto(fl.Dataset.range(30), _triple)) as it:
        assert [int(x) for x in it] == [3 * i for i in range(30)]
        assert not it._root.runs_inline
        assert it._root.executor_decision.kind == "thread"


def test_long_calls_that_hold_the_gil_keep_their_worker_threads_not_inline(monkeypatch):
    # 5 ms calls: a hand-off is a small share of each, and their threads overlap with the
    # consumer pulling the input (the chess parse of a batch: one worker 194k records/s,
    # two 310k). The tuner keeps the workers measured, and never calls inline.
    monkeypatch.setattr(ExecutorChoice, "record", _RECORD)
    measure_as(monkeypatch, serialized_by_the_gil)
    with no_leaked_threads(), iter(_auto(fl.Dataset.range(40), _triple)) as it:
        stage = it._root
        measured_with = stage.knobs.tuned_workers
        got: list = []
        while stage.executor_decision is None:
            got += _outcomes(it, 1)
        deadline = time.monotonic() + 30
        known = stage._runner.tuner._known_nodes
        while not all(control.measurement_used for control in known.values()):
            assert time.monotonic() < deadline, "the tuner did not look at the measurement"
            time.sleep(0.005)
        assert stage.knobs.tuned_workers == measured_with > 1
        got += _outcomes(it)
        assert got == [3 * i for i in range(40)]
        assert stage.executor_decision.seconds_per_element >= policy.INLINE_MAX_CALL_SECONDS
        assert not stage.runs_inline
        assert "inline" not in [d.setting for d in it.statistics().tuning]


def test_an_untuned_map_stays_on_its_threads():
    options = fl.Options(autotune=fl.AutotuneOptions(processes=False, tune=False))
    ds = fl.Dataset.range(30).map(_triple, num_parallel_calls=fl.AUTOTUNE)
    with no_leaked_threads(), iter(ds.with_options(options)) as it:
        assert [int(x) for x in it] == [3 * i for i in range(30)]
        assert not it._root.runs_inline


def test_back_on_threads_when_the_tuner_sets_more_workers():
    # The tuner's serial trial found one worker slower than the threads measured (the
    # measurement misled): it sets more, and the stage goes back to its threads, exactly.
    with no_leaked_threads(), iter(_auto(fl.Dataset.range(60), _failing40)) as it:
        stage = it._root
        got = _until_inline(it)
        got += _outcomes(it, 30 - len(got))
        stage._runner.tuner.stop()  # its thread would go on judging the setting set here
        stage.knobs.tuned_workers = 2  # as the tuner's thread sets it
        got += _outcomes(it, 1)
        assert not stage.runs_inline
        state = it.state_dict()
        rest = _outcomes(it)
        assert got + rest == _reference(60)
        settings = [(d.old, d.new) for d in it.statistics().tuning if d.setting == "inline"]
        assert settings[:2] == [(0, 1), (1, 0)]
    with no_leaked_threads(), iter(fl.Dataset.range(60).map(_failing40)) as it:
        it.load_state_dict(state)
        assert _outcomes(it) == rest


def _reference(n: int) -> list:
    with iter(fl.Dataset.range(n).map(_failing40)) as it:
        return _outcomes(it)
