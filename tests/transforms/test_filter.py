import numpy as np
import pytest

import feedline as fl
from feedline.core.constants import UNKNOWN
from feedline.core.iterator import IteratorContext
from feedline.testing import check_checkpointing, fail_at


def ints(ds):
    return [int(x) for x in ds]


def test_filter_keeps_matching_elements():
    assert ints(fl.Dataset.range(10).filter(lambda x: x % 3 == 0)) == [0, 3, 6, 9]


def test_filter_accepts_python_and_numpy_bools():
    assert ints(fl.Dataset.range(4).filter(lambda x: bool(x > 1))) == [2, 3]
    assert ints(fl.Dataset.range(4).filter(lambda x: np.asarray(x < 2))) == [0, 1]
    assert ints(fl.Dataset.range(4).filter(lambda x: np.bool_(x == 3))) == [3]


def test_filter_unpacks_tuples_like_tf_data():
    ds = fl.Dataset.from_tensor_slices(([1, 2, 3], [3, 2, 1])).filter(lambda a, b: a < b)
    assert [(int(a), int(b)) for a, b in ds] == [(1, 3)]


@pytest.mark.parametrize("bad, found", [
    (lambda x: x, "int64 array of shape ()"),
    (lambda x: 1, "int 1"),
    (lambda x: np.array([True]), "bool array of shape (1,)"),
    (lambda x: None, "NoneType"),
])
def test_non_bool_predicate_result_is_a_type_error_naming_the_index(bad, found):
    ds = fl.Dataset.range(3, 6).filter(bad)
    with pytest.raises(TypeError, match=r"bool or a scalar bool array") as info:
        list(ds)
    assert found in str(info.value) and "input element 0" in str(info.value)


def test_predicate_error_names_stage_and_index_and_iteration_can_continue():
    def check(x):
        if x == 2:
            raise ValueError("bad element")
        return True

    ds = fl.Dataset.range(4).filter(check, name="picky")
    with pytest.raises(ValueError) as info:
        list(ds)
    assert any("picky" in n and "input element 2" in n for n in info.value.__notes__)
    # The stage itself continues past the failed element (so ignore_errors() can skip it).
    it = ds._make_iterator(IteratorContext())
    assert int(next(it)) == 0 and int(next(it)) == 1
    with pytest.raises(ValueError):
        next(it)
    assert int(next(it)) == 3
    it.close()


def test_filter_cardinality_and_spec():
    ds = fl.Dataset.range(5).filter(lambda x: True)
    assert ds.cardinality() == UNKNOWN
    assert ds.element_spec == fl.Dataset.range(5).element_spec
    with pytest.raises(TypeError, match="callable"):
        fl.Dataset.range(3).filter(5)


def test_filter_everything_out():
    assert ints(fl.Dataset.range(5).filter(lambda x: False)) == []


def test_filter_checkpointing():
    ref = check_checkpointing(fl.Dataset.range(20).filter(lambda x: x % 3 != 1))
    assert ints(ref) == [x for x in range(20) if x % 3 != 1]


def test_checkpointing_restores_failing_elements_in_place():
    ds = fail_at(fl.Dataset.range(12), [0, 4, 11]).filter(lambda x: x % 3 != 1)
    check_checkpointing(ds, constant_state_size=True)


@pytest.mark.timeout(120)
def test_states_load_with_other_prefetch_buffer_sizes():
    def build(buffer_size):
        return fail_at(fl.Dataset.range(10), [3]).prefetch(buffer_size).filter(lambda x: x % 2 == 1)

    check_checkpointing(build(2), variants=[build(1), build(6)])


@pytest.mark.timeout(120)
def test_states_load_with_map_fusion_and_parallelism_changed():
    # fused with the map before it or not, after an inline or a parallel map: one state
    def build(fusion, num_parallel_calls):
        options = fl.Options(optimization=fl.OptimizationOptions(map_fusion=fusion))
        return fail_at(fl.Dataset.range(12), [3]) \
            .map(lambda x: x + 1, num_parallel_calls=num_parallel_calls) \
            .filter(lambda x: x % 3 != 0).with_options(options)

    check_checkpointing(build(True, None),
                        variants=[build(False, None), build(True, 2), build(False, 3)])
