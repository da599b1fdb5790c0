import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.testing import assert_elements_equal, check_checkpointing, fail_at


def ints(ds):
    return [int(x) for x in ds]


def test_running_sum():
    total = np.int64(0)  # tf.data: a Python 0 is an int32 state, which int64 elements change
    assert ints(fl.Dataset.range(5).scan(total, lambda s, x: (s + x, s + x))) == [0, 1, 3, 6, 10]


def test_state_and_output_may_differ_in_structure():
    ds = fl.Dataset.range(4).scan((0, 1), lambda s, x: ((s[1], s[0] + s[1]), s[0] * 10 + x))
    assert ints(ds) == [0, 11, 12, 23]


def test_tuple_elements_are_passed_whole():
    ds = fl.Dataset.from_tensor_slices(([1, 2], [10, 20]))
    out = ds.scan(0, lambda s, pair: (s + pair[0], (s, pair[1])))
    assert [(int(a), int(b)) for a, b in out] == [(0, 10), (1, 20)]


def test_initial_state_leaves_become_numpy():
    seen = []

    def fn(s, x):
        seen.append(s)
        return s, x

    list(fl.Dataset.range(1).scan({"count": 0, "vec": [1.0, 2.0]}, fn))
    # tf 2.21: the state's spec is {'count': int32, 'vec': float32 (2,)}
    assert_elements_equal(seen, [{"count": np.int32(0),
                                  "vec": np.array([1.0, 2.0], np.float32)}])


def test_scan_bytes_state():
    ds = fl.Dataset.from_tensor_slices([b"a", b"b", b"c"]).scan(b"", lambda s, x: (s + x, s + x))
    assert list(ds) == [b"a", b"ab", b"abc"]


def test_scan_of_empty():
    assert list(fl.Dataset.range(0).scan(0, lambda s, x: (s, x))) == []


def test_bad_results_are_type_errors():
    with pytest.raises(TypeError, match=r"must return a pair \(new_state, output\)"):
        list(fl.Dataset.range(2).scan(0, lambda s, x: s + x))
    with pytest.raises(TypeError, match=r"structure of the initial state"):
        list(fl.Dataset.range(2).scan(0, lambda s, x: ((s, s), x)))
    with pytest.raises(TypeError, match="callable"):
        fl.Dataset.range(2).scan(0, None)


def test_failure_keeps_state_and_names_stage():
    def fn(s, x):
        if x == 1:
            raise ValueError("bad")
        return s + x, s + x

    it = fl.Dataset.range(4).scan(np.int64(0), fn, name="acc")._make_iterator(IteratorContext())
    assert int(next(it)) == 0
    with pytest.raises(ValueError) as info:
        next(it)
    assert "feedline: raised in acc at input element 1" in info.value.__notes__
    assert ints(it) == [2, 5]


def test_scan_cardinality():
    assert fl.Dataset.range(5).scan(0, lambda s, x: (s, x)).cardinality() == 5


def test_scan_checkpointing():
    check_checkpointing(fl.Dataset.range(7).scan(np.int64(0), lambda s, x: (s + x, s * x)))
    check_checkpointing(fl.Dataset.range(5).scan(
        (np.zeros(2), b""), lambda s, x: ((s[0] + x, s[1] + b"x"), (s[0].sum(), s[1]))))


def test_checkpointing_restores_failing_elements_in_place():
    # a failed input element leaves the scan state as it was
    ds = fail_at(fl.Dataset.range(8), [2, 5]).scan(np.int64(0), lambda s, x: (s + x, s))
    check_checkpointing(ds, constant_state_size=True)


def test_new_state_of_another_dtype_is_a_type_error():
    # tf 2.21: range(3).scan(np.int64(0), lambda s, x: (tf.cast(s, tf.float32), x)) ->
    # TypeError "Invalid `scan_func`. The element types for the new state must match the
    # initial state. Expected <dtype: 'int64'>, got <dtype: 'float32'>."
    ds = fl.Dataset.range(3).scan(np.int64(0), lambda s, x: (np.float32(s), x))
    with pytest.raises(TypeError, match=r"The element types for the new state must match the "
                                        r"initial state\. Expected int64, got float32 \(the "
                                        r"state\)"):
        next(iter(ds))
    pair = fl.Dataset.range(3).scan((np.int64(0), np.zeros(2, np.float32)),
                                    lambda s, x: ((s[0] + x, s[1] * 2.0), x))
    assert ints(pair) == [0, 1, 2]  # float32 * Python float stays float32 (NumPy and TF)
    widened = fl.Dataset.range(3).scan((np.int64(0), np.zeros(2, np.float32)),
                                       lambda s, x: ((s[0] + x, s[1] + np.float64(1)), x))
    with pytest.raises(TypeError, match=r"Expected float32, got float64 \(leaf \[1\] of the "
                                        r"state\)"):
        list(widened)
    # tf: int32 state + int64 element is refused too (NumPy would widen to int64)
    with pytest.raises(TypeError, match="Expected int32, got int64"):
        list(fl.Dataset.range(3).scan(np.int32(0), lambda s, x: (s + x, s)))


def test_python_numbers_returned_as_the_state_convert_as_tensorflow():
    # tf 2.21 converts a returned Python float to float32 and int to int32, then compares:
    # a float32 state takes 1.5; 1 for float32, 7 for uint8 and 1.5 for float64 are
    # "Expected <dtype: 'float32'>, got <dtype: 'int32'>" and so on.
    ds = fl.Dataset.range(3).scan(np.float32(0), lambda s, x: (1.5, s))
    assert_elements_equal(list(ds), [np.float32(0), np.float32(1.5), np.float32(1.5)])
    with pytest.raises(TypeError, match="Expected float32, got int32"):
        list(fl.Dataset.range(3).scan(np.float32(0), lambda s, x: (1, s)))
    with pytest.raises(TypeError, match="Expected uint8, got int32"):
        list(fl.Dataset.range(2).scan(np.uint8(0), lambda s, x: (7, s)))
    with pytest.raises(TypeError, match="Expected float64, got float32"):
        list(fl.Dataset.range(2).scan(np.float64(0), lambda s, x: (1.5, s)))


def test_state_shape_may_change_as_tf_relaxes_it():
    # tf 2.21: range(3).scan(tf.zeros(2), lambda s, x: (tf.concat([s, [1.0]], 0), s)) ->
    # [0, 0], [0, 0, 1], [0, 0, 1, 1] (the state's shape relaxes to (None,))
    ds = fl.Dataset.range(3).scan(np.zeros(2, np.float32),
                                  lambda s, x: (np.append(s, np.float32(1)), s))
    assert_elements_equal(list(ds), [np.array([0, 0], np.float32),
                                     np.array([0, 0, 1], np.float32),
                                     np.array([0, 0, 1, 1], np.float32)])


def test_a_python_complex_state_is_complex128_as_in_tensorflow():
    # tf 2.21: range(2).scan(np.complex64(0), lambda s, x: (1j, s)) -> TypeError "The element
    # types for the new state must match the initial state. Expected <dtype: 'complex64'>, got
    # <dtype: 'complex128'>" (a Python complex converts to complex128 before the comparison)
    with pytest.raises(TypeError, match="Expected complex64, got complex128 \\(the state\\)"):
        list(fl.Dataset.range(2).scan(np.complex64(0), lambda s, x: (1j, s)))
    same = fl.Dataset.range(2).scan(np.complex128(0), lambda s, x: (1j, s))
    assert_elements_equal(list(same), [np.complex128(0), np.complex128(1j)])
