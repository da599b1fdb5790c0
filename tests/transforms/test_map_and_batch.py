"""map(f).batch(n) as one stage when f has a batch form (feedline.transforms.map_and_batch):
elements, errors and their places are exactly those of map then batch, in every mode."""

import threading

import numpy as np
import pytest

import feedline as fl
from feedline.core.errors import StructureError
from feedline.optimize import optimize
from feedline.testing import check_checkpointing, fail_at
from feedline.testing.failures import Failed, InjectedError, take_outcomes
from feedline.testing.threads import no_leaked_threads
from feedline.transforms.map_and_batch import NOT_BATCHED, MapAndBatchDataset

UNFUSED = fl.Options(optimization=fl.OptimizationOptions(map_and_batch_fusion=False))


class Square:
    """x * x, failing on ``fail``; its batch form declines batches holding ``decline`` and
    raises on batches holding a failing value (as a real decoder's batch form may)."""

    def __init__(self, fail=(), decline=(), shapes=None):
        self.fail, self.decline, self.shapes = set(fail), set(decline), shapes or {}
        self.batches = []
        self._lock = threading.Lock()

    def __call__(self, x):
        x = int(x)
        if x in self.fail:
            raise ValueError(f"cannot square {x}")
        return np.full(self.shapes.get(x, (2,)), x * x, np.int64)

    def feedline_batch_form(self, xs):
        values = [int(x) for x in xs]
        with self._lock:
            self.batches.append(values)
        if self.decline & set(values) or any(v in self.shapes for v in values):
            return NOT_BATCHED
        if self.fail & set(values):
            raise ValueError("a value fails")
        return np.repeat(np.square(np.asarray(values, np.int64))[:, None], 2, axis=1)


def _outcomes(ds):
    return [o if isinstance(o, Failed) else o.tolist() for o in take_outcomes(iter(ds))]


def _both(ds):
    return _outcomes(ds), _outcomes(ds.with_options(UNFUSED))


@pytest.mark.parametrize("parallel", [None, 2, fl.AUTOTUNE])
@pytest.mark.parametrize("count,size,drop", [(0, 3, False), (10, 3, False), (10, 3, True),
                                             (12, 4, True), (5, 8, False), (5, 8, True)])
def test_whole_batches_equal_map_then_batch(parallel, count, size, drop):
    fn = Square()
    ds = fl.Dataset.range(count).map(fn, num_parallel_calls=parallel).batch(size, drop)
    assert isinstance(optimize(ds, fl.Options()), MapAndBatchDataset)
    fused, unfused = _both(ds)
    assert fused == unfused
    assert fused == [[[v * v] * 2 for v in range(s, min(s + size, count))]
                     for s in range(0, count, size)
                     if not drop or s + size <= count]
    # Parallel batch calls finish (and are recorded) in any order: compare them sorted.
    whole = sorted(b for b in fn.batches if len(b) == size)
    assert whole == [list(range(s, s + size))
                     for s in range(0, count - size + 1, size)][:len(whole)]


@pytest.mark.parametrize("parallel", [None, 2])
def test_a_map_error_drops_its_batch_and_shifts_the_next(parallel):
    ds = fl.Dataset.range(10).map(Square(fail={4}), num_parallel_calls=parallel).batch(3)
    fused, unfused = _both(ds)
    assert fused == unfused == [[[0, 0], [1, 1], [4, 4]], Failed("ValueError"),
                                [[25, 25], [36, 36], [49, 49]], [[64, 64], [81, 81]]]


def test_the_error_names_the_map_and_the_input_element():
    it = iter(fl.Dataset.range(10).map(Square(fail={7})).batch(4))
    next(it)
    with pytest.raises(ValueError, match="cannot square 7") as raised:
        next(it)
    assert raised.value.__notes__ == ["feedline: raised in map(Square) at input element 7"]
    assert next(it).tolist() == [[64, 64], [81, 81]]


@pytest.mark.parametrize("parallel", [None, 2])
@pytest.mark.parametrize("fail", [{0}, {2}, {3, 4}, {1, 5, 6, 11, 17}, set(range(0, 20, 2))])
def test_map_errors_anywhere(parallel, fail):
    ds = fl.Dataset.range(20).map(Square(fail=fail), num_parallel_calls=parallel).batch(3)
    fused, unfused = _both(ds)
    assert fused == unfused


@pytest.mark.parametrize("parallel", [None, 2])
def test_input_errors_take_their_place(parallel):
    source = fail_at(fl.Dataset.range(14), [2, 9, 10])
    ds = source.map(Square(fail={12}), num_parallel_calls=parallel).batch(4)
    fused, unfused = _both(ds)
    assert fused == unfused
    assert fused[0] == Failed("InjectedError")  # element 2 fails: 0 and 1 are dropped


@pytest.mark.parametrize("parallel", [None, 2])
def test_declined_batches_run_element_by_element(parallel):
    fn = Square(decline={5, 13})
    ds = fl.Dataset.range(16).map(fn, num_parallel_calls=parallel).batch(4)
    fused, unfused = _both(ds)
    assert fused == unfused == [[[v * v] * 2 for v in range(s, s + 4)] for s in (0, 4, 8, 12)]


def test_a_batch_that_cannot_be_stacked_is_the_batch_error():
    ds = fl.Dataset.range(8).map(Square(shapes={5: (3,)})).batch(4)
    fused, unfused = _both(ds)
    assert fused == unfused == [[[v * v] * 2 for v in range(4)], Failed("StructureError")]
    it = iter(ds)
    next(it)
    with pytest.raises(StructureError) as raised:
        next(it)
    assert raised.value.__notes__ == ["feedline: raised in batch at input element 1"]


@pytest.mark.parametrize("parallel", [None, 2])
def test_checkpoints_restore_exactly(parallel):
    source = fail_at(fl.Dataset.range(23), [6])
    ds = source.map(Square(fail={11}, decline={17}), num_parallel_calls=parallel).batch(3)
    other = source.map(Square(fail={11}, decline={17}),
                       num_parallel_calls=None if parallel else 2).batch(3)
    reference = check_checkpointing(ds, variants=[other])
    assert [o if isinstance(o, Failed) else o.tolist() for o in reference] == _outcomes(
        ds.with_options(UNFUSED))


def test_checkpoint_inside_a_shifted_stretch_and_with_shuffle():
    ds = (fl.Dataset.range(40).shuffle(7, seed=3)
          .map(Square(fail={5, 30}), num_parallel_calls=2).batch(4, drop_remainder=True))
    check_checkpointing(ds, epochs=2)


def test_no_fusion_without_a_batch_form_in_processes_or_when_switched_off():
    plain = fl.Dataset.range(4).map(lambda x: x + 1).batch(2)
    assert not isinstance(optimize(plain, fl.Options()), MapAndBatchDataset)
    processes = fl.Dataset.range(4).map(Square(), num_parallel_calls=2,
                                        executor="process").batch(2)
    assert not isinstance(optimize(processes, fl.Options()), MapAndBatchDataset)
    ds = fl.Dataset.range(4).map(Square()).batch(2)
    assert not isinstance(optimize(ds, UNFUSED), MapAndBatchDataset)
    assert ds.element_spec == optimize(ds, fl.Options()).element_spec
    assert optimize(ds, fl.Options()).cardinality() == 2


def test_closing_mid_run_ends_its_threads():
    with no_leaked_threads(timeout=10):
        it = iter(fl.Dataset.range(10**6).map(Square(), num_parallel_calls=2).batch(8))
        assert next(it).tolist()[0] == [0, 0]
        it.close()


def test_an_error_from_the_input_is_not_swallowed_by_the_batch_form():
    class Broken(Square):
        def feedline_batch_form(self, xs):
            raise InjectedError("batch form broke")

    assert _outcomes(fl.Dataset.range(5).map(Broken()).batch(2)) == \
        [[[v * v] * 2 for v in range(s, min(s + 2, 5))] for s in (0, 2, 4)]
