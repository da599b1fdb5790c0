import numpy as np
import pytest

import feedline as fl


def test_reduce_sums_and_counts():
    state = fl.Dataset.range(1, 5).reduce((np.int64(0), np.int64(0)),
                                          lambda s, x: (s[0] + x, s[1] + 1))
    assert (int(state[0]), int(state[1])) == (10, 4)


def test_reduce_of_an_empty_dataset_is_the_initial_state():
    assert int(fl.Dataset.range(0).reduce(np.int64(7), lambda s, x: s + x)) == 7


def test_a_state_whose_dtype_changes_is_tf_datas_type_error():
    # tf.data: "The element types for the new state must match the initial state. Expected
    # [tf.int64] but got [tf.int32]." feedline went on with int32 states.
    with pytest.raises(TypeError, match=r"reduce: The element types for the new state must "
                                        r"match the initial state\. Expected \['int64'\] but "
                                        r"got \['int32'\] .*element 0"):
        fl.Dataset.range(5).reduce(np.int64(0), lambda s, x: (s + x).astype(np.int32))
    with pytest.raises(TypeError, match=r"Expected \['int64', 'float64'\] but got "
                                        r"\['int64', 'int64'\] .*element 2"):
        fl.Dataset.range(5).reduce((np.int64(0), np.float64(0)),
                                   lambda s, x: (s[0] + x, s[1] if x < 2 else x))


def test_a_state_whose_structure_changes_is_a_type_error():
    with pytest.raises(TypeError, match=r"reduce: The element structure for the new state must "
                                        r"match the initial state"):
        fl.Dataset.range(5).reduce(np.int64(0), lambda s, x: (s, x))
    with pytest.raises(TypeError, match=r"Expected \{'a': .*\} but got \{'b': "):
        fl.Dataset.range(5).reduce({"a": np.int64(0)}, lambda s, x: {"b": s["a"]})


def test_the_state_shape_may_change():
    state = fl.Dataset.range(4).reduce(np.zeros(0, np.int64), lambda s, x: np.append(s, x))
    assert state.tolist() == [0, 1, 2, 3]


def test_reduce_func_errors_name_the_element():
    def fail(s, x):
        if x == 3:
            raise KeyError("bad")
        return s + x

    with pytest.raises(KeyError) as info:
        fl.Dataset.range(5).reduce(np.int64(0), fail)
    assert any("reduce" in n and "input element 3" in n for n in info.value.__notes__)
