"""The tuner's knobs of ``batch`` and ``interleave`` (``num_parallel_calls=AUTOTUNE``).

Each tuned stage registers a :class:`~feedline.execution.stage_knobs.ThreadStageKnobs`
with its pipeline's tuner; the tests stop the tuner's thread and set the knobs by hand,
as the tuner would, so that every setting is known and the outputs exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import feedline as fl
from feedline.autotune.tuner import stage_bound
from feedline.execution.stage_knobs import ThreadStageKnobs, thread_bounds
from feedline.testing.failures import Failed, fail_at, take_outcomes
from feedline.testing.threads import no_leaked_threads
from feedline.transforms.batch import ParallelBatchIterator

pytestmark = pytest.mark.timeout(60)

OPTIONS = fl.Options(autotune=fl.AutotuneOptions(processes=False))
UNTUNED = fl.Options(autotune=fl.AutotuneOptions(processes=False, tune=False))


def _find(it: Any, kind: type) -> Any:
    """The iterator of type ``kind`` in ``it``'s tree of iterators."""
    todo = [it._root]
    while todo:
        node = todo.pop()
        if isinstance(node, kind):
            return node
        todo.extend(getattr(node, "_inputs", []))
    raise AssertionError(f"no {kind.__name__} in the pipeline")


def _plain(outcomes: list[Any]) -> list[Any]:
    """Outcomes comparable with ``==`` (batches as lists)."""
    return [o if isinstance(o, Failed) else np.asarray(o).tolist() for o in outcomes]


def _stopped(stage: Any) -> ThreadStageKnobs:
    """The stage's knobs, its tuner's thread stopped (it would change the setting)."""
    stage._tuner.stop()
    return stage.knobs


# ---------------------------------------------------------------------- the knobs
def test_knobs_bound_the_setting_and_move_the_window():
    class Window:
        limit = 0

    knobs = ThreadStageKnobs("s", parallelism=3, max_workers=6, cpu_workers=4,
                             ram_budget=1 << 20, tasks_per_worker=2)
    knobs.window = Window()
    assert (knobs.tuned_workers, knobs.gate.limit) == (3, 3)
    knobs.tuned_workers = 0
    assert (knobs.tuned_workers, knobs.gate.limit, knobs.window.limit) == (1, 1, 2)
    knobs.tuned_workers = 50
    assert (knobs.tuned_workers, knobs.gate.limit, knobs.window.limit) == (6, 6, 12)
    assert (knobs.max_workers, knobs.cpu_workers, knobs.cores) == (6, 4, 3)
    assert knobs.measured_calls is None and not knobs.tuning_paused and not knobs.tuning_done


def test_bytes_per_worker_from_sampled_sizes():
    knobs = ThreadStageKnobs("s", 2, 8, 2, ram_budget=1 << 20, tasks_per_worker=1)
    knobs.held_per_task = 2.0
    knobs.sample(np.zeros(1000, dtype=np.uint8), 0)  # the first is sized
    knobs.sample(np.zeros(9000, dtype=np.uint8), 1)  # not sized: one in SIZE_EVERY
    assert knobs.bytes_per_worker == 2 * 1000 + (64 << 10)
    # The RAM budget bounds the workers the tuner may give it.
    knobs = ThreadStageKnobs("s", 2, 64, 64, ram_budget=10 * ((64 << 10) + 2000))
    knobs.held_per_task = 2.0
    knobs.sample(np.zeros(1000, dtype=np.uint8), 0)
    assert stage_bound(knobs, 0.01).by_ram == 10


def test_run_task_counts_time_and_errors_pass_through():
    knobs = ThreadStageKnobs("s", 1, 1, 1, 1 << 20)

    def boom() -> None:
        raise KeyError("k")

    with pytest.raises(KeyError):
        knobs.run_task(boom)
    assert knobs.run_task(len, "abc") == 3
    elements, calls, waits, busy, pulled, cpu = knobs.tuning_counters()
    assert (elements, calls, waits, pulled, knobs.tasks) == (0, 0, 0, 0.0, 2)
    assert busy >= 0.0 and cpu >= 0.0


def test_thread_bounds():
    budget = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=2))
    assert thread_bounds(budget, 2) == (2, 2)
    assert thread_bounds(budget, 2, useful=8, waits=True) == (2, 8)
    limited = fl.Options(threading=fl.ThreadingOptions(max_parallelism=3))
    assert thread_bounds(limited, 3, waits=True) == (3, 3)
    free = fl.Options()
    assert thread_bounds(free, 2) == (4, 4)  # OVERSUBSCRIPTION threads per CPU
    assert thread_bounds(free, 2, useful=3) == (3, 3)
    assert thread_bounds(free, 2, waits=True) == (4, 256)


# ---------------------------------------------------------------------- batch
def _batches(n: int = 103, fail: tuple[int, ...] = (10, 50)) -> fl.Dataset:
    return fail_at(fl.Dataset.range(n), fail)


def _tuned_batch(n: int = 103) -> fl.Dataset:
    return _batches(n).batch(7, num_parallel_calls=fl.AUTOTUNE).with_options(OPTIONS)


def _batch_reference(n: int = 103) -> list[Any]:
    return _plain(take_outcomes(iter(_batches(n).batch(7))))


def test_batch_registers_and_follows_the_setting():
    with no_leaked_threads(), iter(_tuned_batch()) as it:
        stage = _find(it, ParallelBatchIterator)
        knobs = _stopped(stage)
        assert "batch" in stage._tuner.settings()
        expected = thread_bounds(OPTIONS, OPTIONS.autotune_parallelism())
        assert (knobs.cpu_workers, knobs.max_workers) == expected
        knobs.tuned_workers = 1
        assert (knobs.gate.limit, stage._window.limit) == (1, 1)
        knobs.tuned_workers = 1000
        assert knobs.gate.limit == stage._window.limit == knobs.max_workers
        out = _plain(take_outcomes(it))
        elements, calls, waits, busy, _, cpu = knobs.tuning_counters()
        assert elements == len(out) - 2 and calls == len(out) + 1  # the end is a call
        assert 0 <= waits <= calls and busy > 0.0 and cpu >= 0.0
        assert knobs.tasks == elements  # a stacking task per batch (the errors have none)
    assert knobs.tuning_done


@pytest.mark.parametrize("deterministic", [True, False])
def test_batch_output_is_the_untuned_one_under_any_setting(deterministic):
    ds = _batches().batch(7, num_parallel_calls=fl.AUTOTUNE, deterministic=deterministic)
    with no_leaked_threads(), iter(ds.with_options(OPTIONS)) as it:
        knobs = _stopped(_find(it, ParallelBatchIterator))
        out: list[Any] = []
        for workers in (1, 3, 2, 1000, 1):
            knobs.tuned_workers = workers
            out += take_outcomes(it, 3)
        out += take_outcomes(it)
    reference = _batch_reference()
    if deterministic:
        assert _plain(out) == reference
    else:  # batches (and the failures) come as they are ready
        assert sorted(map(str, _plain(out))) == sorted(map(str, reference))


def test_batch_checkpoint_restores_under_another_setting():
    reference = _batch_reference()
    with no_leaked_threads(), iter(_tuned_batch()) as it:
        knobs = _stopped(_find(it, ParallelBatchIterator))
        knobs.tuned_workers = 1
        first = _plain(take_outcomes(it, 5))
        state = it.state_dict()
        knobs.tuned_workers = 3
        assert first + _plain(take_outcomes(it)) == reference
    with no_leaked_threads(), iter(_tuned_batch()) as it:
        knobs = _stopped(_find(it, ParallelBatchIterator))
        knobs.tuned_workers = 1000
        it.load_state_dict(state)
        assert first + _plain(take_outcomes(it)) == reference
    with no_leaked_threads(), iter(_batches().batch(7)) as it:  # and the sequential stage
        it.load_state_dict(state)
        assert first + _plain(take_outcomes(it)) == reference


@pytest.mark.parametrize("parallel, options", [(fl.AUTOTUNE, UNTUNED), (2, OPTIONS)])
def test_batch_untuned_registers_nothing(parallel, options):
    ds = _batches().batch(7, num_parallel_calls=parallel).with_options(options)
    with no_leaked_threads(), iter(ds) as it:
        stage = _find(it, ParallelBatchIterator)
        assert stage.knobs is None and stage._tuner is None
        assert _plain(take_outcomes(it)) == _batch_reference()
        tuner = it._ctx.tuner
        assert tuner is None or "batch" not in tuner.settings()


def test_batch_next_epoch_starts_at_the_setting_reached():
    ds = fl.Dataset.range(20).batch(4, num_parallel_calls=fl.AUTOTUNE).repeat(2)
    with no_leaked_threads(), iter(ds.with_options(OPTIONS)) as it:
        stage = _find(it, ParallelBatchIterator)
        knobs = _stopped(stage)
        knobs.tuned_workers = 1
        control, = (c for c in stage._tuner._known_nodes.values() if c.name == "batch")
        control.setting = 1  # as the tuner records it
        out = _plain(take_outcomes(it))
        assert out == [list(range(i, i + 4)) for i in range(0, 20, 4)] * 2
        second = _find(it, ParallelBatchIterator)
        assert second is not stage and second.knobs.tuned_workers == 1
        assert second.knobs.counters is knobs.counters  # one stage to the tuner


# ---------------------------------------------------------------------- interleave
def _inner(x: Any) -> fl.Dataset:
    start = int(x) * 100
    inner = fl.Dataset.range(start, start + 4 + int(x) % 5)
    return fail_at(inner, [2]) if int(x) == 3 else inner


def _interleaved(parallel: int | None = fl.AUTOTUNE, deterministic: bool | None = None,
                 options: fl.Options = OPTIONS) -> fl.Dataset:
    source = fail_at(fl.Dataset.range(14), [6])  # an input error, raised in its turn
    return source.interleave(_inner, cycle_length=3, block_length=2,
                             num_parallel_calls=parallel,
                             deterministic=deterministic).with_options(options)


def _interleave_reference() -> list[Any]:
    return _plain(take_outcomes(iter(_interleaved(None))))


def _interleave_stage(it: Any) -> Any:
    from feedline.transforms.interleave_parallel import ParallelInterleaveIterator

    return _find(it, ParallelInterleaveIterator)


def test_interleave_registers_and_gates_its_reads():
    with no_leaked_threads(), iter(_interleaved()) as it:
        stage = _interleave_stage(it)
        knobs = _stopped(stage)
        assert "interleave(_inner)" in stage._tuner.settings()
        start = min(OPTIONS.autotune_parallelism(), 3)
        # At most a read per open dataset: the cycle's 3 and the 3 opened ahead.
        assert (knobs.cpu_workers, knobs.max_workers) == \
            thread_bounds(OPTIONS, start, useful=6, waits=True)
        assert knobs.max_workers == 6 and knobs.tuned_workers == start
        out = _plain(take_outcomes(it, 4))
        pool = stage._pool._executor._executor  # the threads behind the timing
        knobs.tuned_workers = 1
        assert knobs.gate.limit == pool.workers == 1
        knobs.tuned_workers = 1000
        assert knobs.gate.limit == pool.workers == 6
        out += _plain(take_outcomes(it))
        assert out == _interleave_reference()
        elements, calls, waits, busy, pulled, cpu = knobs.tuning_counters()
        failures = sum(isinstance(o, Failed) for o in out)
        assert elements == len(out) - failures and calls == len(out) + 1
        # The first call waits: nothing was read before it.
        assert 1 <= waits <= calls and busy > 0.0 and pulled > 0.0 and cpu >= 0.0
        assert knobs.tasks > 0
    assert knobs.tuning_done


@pytest.mark.parametrize("deterministic", [True, False])
def test_interleave_output_is_the_untuned_one_under_any_setting(deterministic):
    reference = _interleave_reference()
    with no_leaked_threads(), iter(_interleaved(deterministic=deterministic)) as it:
        knobs = _stopped(_interleave_stage(it))
        out: list[Any] = []
        for workers in (1, 4, 2, 1000, 1):
            knobs.tuned_workers = workers
            out += take_outcomes(it, 7)
        out += take_outcomes(it)
    if deterministic:
        assert _plain(out) == reference
    else:  # from whichever dataset has one ready
        assert sorted(map(str, _plain(out))) == sorted(map(str, reference))


def test_interleave_chunks_under_any_setting():
    # A batch after it takes whole blocks at once (next_chunk), counted as one call.
    reference = _plain(take_outcomes(iter(
        fl.Dataset.range(14).interleave(_inner_ok, cycle_length=3, block_length=2).batch(5))))
    ds = fl.Dataset.range(14).interleave(_inner_ok, cycle_length=3, block_length=2,
                                         num_parallel_calls=fl.AUTOTUNE).batch(5)
    with no_leaked_threads(), iter(ds.with_options(OPTIONS)) as it:
        knobs = _stopped(_interleave_stage(it))
        out: list[Any] = []
        for workers in (1, 6, 2):
            knobs.tuned_workers = workers
            out += take_outcomes(it, 3)
        out += take_outcomes(it)
        assert _plain(out) == reference
        elements = knobs.tuning_counters()[0]
        assert elements == sum(len(batch) for batch in _plain(out))


def _inner_ok(x: Any) -> fl.Dataset:
    return fl.Dataset.range(int(x) * 100, int(x) * 100 + 4 + int(x) % 5)


def test_interleave_checkpoint_restores_under_another_setting():
    reference = _interleave_reference()
    with no_leaked_threads(), iter(_interleaved()) as it:
        knobs = _stopped(_interleave_stage(it))
        knobs.tuned_workers = 1
        first = _plain(take_outcomes(it, 13))
        state = it.state_dict()
        knobs.tuned_workers = 5
        assert first + _plain(take_outcomes(it)) == reference
    with no_leaked_threads(), iter(_interleaved()) as it:
        knobs = _stopped(_interleave_stage(it))
        knobs.tuned_workers = 1000
        it.load_state_dict(state)
        assert first + _plain(take_outcomes(it)) == reference
    with no_leaked_threads(), iter(_interleaved(None)) as it:  # and the sequential stage
        it.load_state_dict(state)
        assert first + _plain(take_outcomes(it)) == reference


@pytest.mark.parametrize("parallel, options", [(fl.AUTOTUNE, UNTUNED), (2, OPTIONS)])
def test_interleave_untuned_registers_nothing(parallel, options):
    with no_leaked_threads(), iter(_interleaved(parallel, options=options)) as it:
        stage = _interleave_stage(it)
        assert stage.knobs is None and stage._tuner is None
        assert _plain(take_outcomes(it)) == _interleave_reference()
        tuner = it._ctx.tuner
        assert tuner is None or not tuner.settings()
