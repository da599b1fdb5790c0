import threading
import time

import numpy as np
import pytest

import feedline as fl
from feedline.testing import assert_elements_equal, check_checkpointing, no_leaked_threads


def ints(ds):
    return [int(x) for x in ds]


def test_map_inline_values():
    assert ints(fl.Dataset.range(5).map(lambda x: x * 3)) == [0, 3, 6, 9, 12]


def test_map_unpacks_tuple_components_as_arguments():
    ds = fl.Dataset.from_tensor_slices(([1, 2], [10, 20])).map(lambda a, b: a + b)
    assert ints(ds) == [11, 22]


def test_map_passes_dict_and_namedtuple_whole():
    ds = fl.Dataset.from_tensor_slices({"a": [1, 2]}).map(lambda d: d["a"] * 2)
    assert ints(ds) == [2, 4]


def test_map_list_output_becomes_tuple():
    (element,) = list(fl.Dataset.range(1).map(lambda x: [x, x + 1]))
    assert isinstance(element, tuple) and [int(v) for v in element] == [0, 1]


@pytest.mark.parametrize("parallel", [1, 2, 4, fl.AUTOTUNE])
def test_parallel_map_keeps_order(parallel):
    ds = fl.Dataset.range(50).map(lambda x: x * x, num_parallel_calls=parallel)
    assert ints(ds) == [i * i for i in range(50)]


def test_parallel_map_runs_calls_concurrently():
    barrier = threading.Barrier(3, timeout=10)

    def wait_for_peers(x):
        barrier.wait()
        return x

    ds = fl.Dataset.range(3).map(wait_for_peers, num_parallel_calls=3)
    assert ints(ds) == [0, 1, 2]


def test_nondeterministic_map_yields_completion_order():
    def slow_first(x):
        if x == 0:
            time.sleep(0.3)
        return x

    ds = fl.Dataset.range(4).map(slow_first, num_parallel_calls=4, deterministic=False)
    out = ints(ds)
    assert sorted(out) == [0, 1, 2, 3] and out[0] != 0


def test_options_deterministic_false_applies_to_stages_without_setting():
    def slow_first(x):
        if x == 0:
            time.sleep(0.3)
        return x

    ds = fl.Dataset.range(4).map(slow_first, num_parallel_calls=4)
    ds = ds.with_options(fl.Options(deterministic=False))
    assert ints(ds)[0] != 0


def test_user_error_keeps_type_traceback_and_names_stage():
    def explode(x):
        if x == 2:
            raise KeyError("boom")
        return x

    for parallel in (None, 2):
        with no_leaked_threads(), \
                iter(fl.Dataset.range(5).map(explode, num_parallel_calls=parallel)) as it:
            assert ints([next(it), next(it)]) == [0, 1]
            with pytest.raises(KeyError) as info:
                next(it)
            notes = "\n".join(info.value.__notes__)
            assert "map(test_user_error_keeps_type_traceback_and_names_stage.<locals>.explode)" \
                in notes and "input element 2" in notes
            assert any(frame.name == "explode" for frame in info.traceback)
            # As in tf.data, the iterator goes on after the failed element.
            assert ints(it) == [3, 4]


def test_invalid_parallelism_rejected():
    with pytest.raises(ValueError, match="num_parallel_calls"):
        fl.Dataset.range(3).map(lambda x: x, num_parallel_calls=0)
    with pytest.raises(TypeError, match="callable"):
        fl.Dataset.range(3).map(3)


def test_map_fusion_same_result_and_errors_name_inner_stage():
    def fail(x):
        raise ValueError("bad")

    ds = fl.Dataset.range(3).map(lambda x: x + 1).map(fail)
    with pytest.raises(ValueError) as info:
        list(ds)
    assert any("map(test_map_fusion_same_result_and_errors_name_inner_stage.<locals>.fail)" in n
               for n in info.value.__notes__)
    off = fl.Options(optimization=fl.OptimizationOptions(map_fusion=False))
    pair = fl.Dataset.from_tensor_slices(([1, 2], [3, 4]))
    fused = pair.map(lambda a, b: (a, (b,))).map(lambda a, b: (a + b[0],))
    assert_elements_equal(list(fused), list(fused.with_options(off)))


def test_map_cardinality_and_spec():
    ds = fl.Dataset.range(7).map(lambda x: np.zeros(3, np.float32))
    assert ds.cardinality() == 7
    assert ds.element_spec == fl.TensorSpec((3,), np.dtype(np.float32))


@pytest.mark.parametrize("parallel", [None, 3])
def test_map_checkpointing(parallel):
    check_checkpointing(fl.Dataset.range(9).map(lambda x: x * 2, num_parallel_calls=parallel))


def test_nondeterministic_map_checkpointing():
    ds = fl.Dataset.range(9).map(lambda x: x * 2, num_parallel_calls=3, deterministic=False)
    check_checkpointing(ds, ordered=False)


def test_abandoned_parallel_iterator_is_closed_by_gc():
    import gc

    with no_leaked_threads():
        it = iter(fl.Dataset.range(100).map(lambda x: x, num_parallel_calls=2).prefetch(2))
        next(it)
        del it
        gc.collect()


def test_exception_escaping_for_loop_stops_threads():
    with no_leaked_threads(), pytest.raises(ZeroDivisionError):
        for x in fl.Dataset.range(100).map(lambda x: x, num_parallel_calls=2).prefetch(4):
            if x == 3:
                raise ZeroDivisionError
