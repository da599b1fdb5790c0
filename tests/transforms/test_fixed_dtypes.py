"""A dataset's dtypes stay fixed (issue 43): a stage whose function gives a later element
another dtype than its first (its ``element_spec``) raises, naming the stage and the element.

tf.data traces a map function once (``StructuredFunctionWrapper``), so its output dtypes are
the graph's and cannot change from element to element (a ``py_function`` returning another
dtype than its ``Tout`` is a runtime InvalidArgumentError). Before the guard, feedline's
``map`` of float32 then int64 elements batched into float32, then float64 batches while
``element_spec`` said float32.
"""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl
from feedline.core.element_dtypes import DtypeGuard
from feedline.core.random_access import open_reader
from feedline.testing.threads import no_leaked_threads
from feedline.transforms.map_and_batch import NOT_BATCHED, MapAndBatchDataset
from tests.placement.process_helpers import worker_processes

HINT = ("a dataset's dtypes are fixed, as in tf.data: convert the value (np.float32(...), "
        ".astype(np.float32)) in the function")


def f(x):
    return np.float32(x) if int(x) % 2 == 0 else np.int64(x)


def message(stage, index, got, at=""):
    return (f"{stage}: element {index} has dtype {got}{at} where the dataset's elements have "
            f"float32 (its element_spec, from element 0); {HINT}")


def first_float32(x):
    return np.float32(x) if x < 1 else x


def python_then_numpy(x):
    return 1.5 if x == 0 else np.float64(x)


def keyed(x):
    return {"ids": np.int64(x), "w": np.float32(x) if x < 2 else np.float16(x)}, b"k"


def inner(x):
    return fl.Dataset.from_tensors(np.float32(x) if x == 0 else x).repeat(2)


def step(s, x):
    return s, np.float32(x) if x < 2 else x


MAPS = {
    "inline": lambda ds: ds.map(f),
    "threads": lambda ds: ds.map(f, num_parallel_calls=2),
    "autotune": lambda ds: ds.map(f, num_parallel_calls=fl.AUTOTUNE),
    "fused": lambda ds: ds.map(lambda x: x).map(f),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make", MAPS.values(), ids=MAPS.keys())
def test_a_map_of_mixed_dtypes_raises_at_the_first_element_that_differs(make):
    ds = make(fl.Dataset.range(6))
    assert ds.element_spec == fl.TensorSpec((), np.float32)
    with no_leaked_threads(), iter(ds) as it:
        assert next(it) == np.float32(0)
        with pytest.raises(fl.StructureError) as caught:
            next(it)
    assert str(caught.value) == message("map(f)", 1, "int64")
    assert "feedline: raised in map(f) at input element 1" in caught.value.__notes__


@pytest.mark.timeout(60)
def test_the_batches_never_change_dtype_silently():
    # Was: [array([0., 1.], float32), array([2., 3.]) float64, ...] after map(float32 or int64)
    ds = fl.Dataset.range(4).map(first_float32).batch(2)
    assert ds.element_spec == fl.TensorSpec((None,), np.float32)
    with no_leaked_threads(), pytest.raises(fl.StructureError) as caught:
        list(ds)
    assert str(caught.value) == message("map(first_float32)", 1, "int64")


@pytest.mark.timeout(120)
def test_worker_process_results_are_checked_where_they_are_handed_out():
    ds = fl.Dataset.range(6).map(f, num_parallel_calls=2, executor="process")
    with no_leaked_threads(), iter(ds) as it:
        assert next(it) == np.float32(0)
        with pytest.raises(fl.StructureError) as caught:
            next(it)
    assert str(caught.value) == message("map(f)", 1, "int64")
    assert worker_processes() == []


def test_the_random_access_path_checks_too():
    with open_reader(fl.Dataset.range(6).map(f)) as reader:
        assert reader.get(4) == np.float32(4)
        with pytest.raises(fl.StructureError) as caught:
            reader.get_many([2, 3])
    assert str(caught.value) == (
        "map(f): element 3 has dtype int64 where the dataset's elements have float32 (its "
        f"element_spec, from element 4); {HINT}")


def test_python_numbers_count_as_tf_data_converts_them():
    # 1.5 is float32 (tf.data's conversion); a NumPy float64 later is another dtype.
    ds = fl.Dataset.range(3).map(python_then_numpy)
    with pytest.raises(fl.StructureError, match=r"element 1 has dtype float64 where the "
                                                r"dataset's elements have float32"):
        list(ds)
    same = fl.Dataset.range(3).map(lambda x: 1.5 if x == 0 else np.float32(x))
    assert [x.dtype for x in same] == [np.float32] * 3


def test_the_error_names_the_component():
    ds = fl.Dataset.range(3).map(keyed)
    with pytest.raises(fl.StructureError) as caught:
        list(ds)
    assert str(caught.value) == (
        "map(keyed): element 2 has dtype float16 at [0]['w'] where the dataset's elements "
        f"have float32 (its element_spec, from element 0); {HINT}")


def test_shapes_text_and_datasets_of_any_class_may_vary():
    # Only dtypes are fixed: tf.data relaxes shapes to None; str and bytes are both tf.string;
    # every dataset is a DatasetSpec component.
    shapes = fl.Dataset.range(3).map(lambda x: np.zeros(int(x), np.float32))
    assert [len(x) for x in shapes] == [0, 1, 2]
    text = fl.Dataset.range(2).map(lambda x: "a" if x == 0 else b"b")
    assert list(text) == [b"a", b"b"]
    nested = fl.Dataset.range(3).map(
        lambda x: fl.Dataset.range(x) if x % 2 else fl.Dataset.from_tensors(x))
    assert [[int(y) for y in inner] for inner in nested] == [[0], [0], [2]]


def test_flat_map_s_inner_datasets_share_one_dtype():
    ds = fl.Dataset.range(3).flat_map(inner)
    with pytest.raises(fl.StructureError) as caught:
        list(ds)
    assert str(caught.value) == (
        "flat_map(inner): an element of the dataset made from input element 1 has dtype "
        "int64 where the dataset's elements have float32 (its element_spec, from an element "
        f"of the dataset made from input element 0); {HINT}")


def test_scan_outputs_keep_one_dtype():
    ds = fl.Dataset.range(3).scan(np.int64(0), step)
    with pytest.raises(fl.StructureError) as caught:
        list(ds)
    assert str(caught.value) == message("scan(step)", 2, "int64")


class Halve:
    """x / 2 as float32 per element; its batch form declines (element path) or gives the
    float64 it computes in NumPy (a batch form that does not give what batch stacks)."""

    def __init__(self, batch_dtype=None):
        self.batch_dtype = batch_dtype

    def __call__(self, x):
        return np.float32(x / 2) if int(x) < 3 else np.float64(x / 2)

    def feedline_batch_form(self, xs):
        if self.batch_dtype is None:
            return NOT_BATCHED
        return np.asarray([int(x) / 2 for x in xs], self.batch_dtype if int(xs[0]) else
                          np.float32)


def _map_and_batch(fn):
    ds = fl.Dataset.range(6).map(fn).batch(2)
    from feedline.optimize import optimize

    assert isinstance(optimize(ds, ds.options()), MapAndBatchDataset)
    return ds


def test_map_and_batch_checks_elements_and_batches():
    with pytest.raises(fl.StructureError) as caught:
        list(_map_and_batch(Halve()))
    assert str(caught.value) == (
        "map(Halve): element 3 has dtype float64 where the dataset's elements have float32 "
        f"(its element_spec, from element 0); {HINT}")
    with pytest.raises(fl.StructureError) as caught:
        list(_map_and_batch(Halve(batch_dtype=np.float64)))
    assert str(caught.value) == (
        "map_and_batch(map(Halve)): element 1 has dtype float64 where the dataset's elements "
        f"have float32 (its element_spec, from element 0); {HINT}")


class CountingGuard(DtypeGuard):
    __slots__ = ("passes",)

    def __init__(self, stage):
        super().__init__(stage)
        self.passes = 0

    def _check(self, element, index):
        self.passes += 1
        return super()._check(element, index)


def test_matching_dtypes_take_the_identity_shortcut():
    # The common shapes pass on type and dtype identity; the pass over the leaves runs for
    # the first element only.
    cases = [np.int64(1), np.zeros(3, np.float32), b"x", (np.int64(1), b"x"),
             {"a": np.zeros(2, np.uint8), "b": (np.float32(1), b"y")}]
    for element in cases:
        guard = CountingGuard("map(g)")
        for index in range(3):
            assert guard.check(element, index) is element
        assert guard.passes == 1, element


def test_the_shortcut_never_accepts_what_the_pass_refuses():
    # A range dataset has an int64 dtype attribute; a datetime64 scalar's type has many units.
    pairs = [(np.zeros(2, np.int64), fl.Dataset.range(2)),
             (np.datetime64(1, "s"), np.datetime64(1, "ms")),
             ((np.int64(1), b"x"), (np.int64(1), np.zeros(1, np.int64))),
             ({"a": np.float32(1)}, {"a": np.float64(1)})]
    for first, later in pairs:
        guard = DtypeGuard("map(g)")
        guard.check(first, 0)
        with pytest.raises(fl.StructureError, match="element 1 has dtype"):
            guard.check(later, 1)


def test_ragged_and_sparse_values_take_the_shortcut_by_their_values_dtype():
    ragged = fl.RaggedValues.from_row_lengths(np.arange(3, dtype=np.int64), [1, 2])
    sparse = fl.SparseValues([[0]], np.array([1.5], np.float32), [2])
    for element in [ragged, {"tokens": ragged, "w": sparse}, (ragged, b"x")]:
        guard = CountingGuard("map(parse)")
        for index in range(3):
            assert guard.check(element, index) is element
        assert guard.passes == 1, element
    guard = DtypeGuard("map(parse)")
    guard.check({"tokens": ragged}, 0)
    other = fl.RaggedValues.from_row_lengths(np.arange(3, dtype=np.int32), [1, 2])
    with pytest.raises(fl.StructureError, match=r"element 1 has dtype int32 at \['tokens'\] "
                                                r"where the dataset's elements have int64"):
        guard.check({"tokens": other}, 1)


def by_parity(x):
    return x % 2


def window_of_mixed_dtype(key, window):
    # Even keys' windows as float32, odd keys' as the int64 elements they are.
    return window.map(lambda x: np.float32(x)) if key == 0 else window


def test_group_by_window_s_reduced_datasets_share_one_dtype():
    # Was: [0., 2.] float32 then [1, 3] int64, batched silently into float64.
    ds = fl.Dataset.range(4).group_by_window(by_parity, window_of_mixed_dtype, window_size=2)
    with pytest.raises(fl.StructureError) as caught:
        list(ds)
    assert str(caught.value) == (
        "group_by_window(by_parity): an element of the dataset made from window 1 has dtype "
        "int64 where the dataset's elements have float32 (its element_spec, from an element "
        f"of the dataset made from window 0); {HINT}")
    same = fl.Dataset.range(4).group_by_window(
        by_parity, lambda key, window: window.map(lambda x: np.float32(x)), window_size=2)
    assert [x.dtype for x in same] == [np.float32] * 4


def finalize_mixed(state):
    return np.float32(state) if state < 3 else state


def test_group_by_reducer_s_finalized_outputs_share_one_dtype():
    reducer = fl.Reducer(lambda key: np.int64(0), lambda state, x: state + x, finalize_mixed)
    ds = fl.Dataset.range(4).group_by_reducer(by_parity, reducer)
    with pytest.raises(fl.StructureError) as caught:
        list(ds)
    assert str(caught.value) == message("group_by_reducer(by_parity)", 1, "int64")
    assert "feedline: the finalized state of key 1" in caught.value.__notes__


def mixed():
    yield np.float32(0), b"a"
    yield np.float32(1), b"b"
    yield np.int64(2), b"c"


def test_from_generator_without_a_signature_keeps_the_first_element_s_dtypes():
    # tf.data's generator always has fixed dtypes (output_signature or output_types); its
    # py_func raises InvalidArgumentError "TypeError: `generator` yielded an element of type
    # int64 where an element of type float32 was expected." (from_generator_op.py).
    # Was: (0.0, 1.0, 2) batched silently into float64.
    ds = fl.Dataset.from_generator(mixed)
    assert ds.element_spec == (fl.TensorSpec((), np.float32), fl.TensorSpec((), object))
    with pytest.raises(fl.StructureError) as caught:
        list(ds.batch(3))
    assert isinstance(caught.value, fl.InvalidArgumentError)
    assert str(caught.value) == (
        "from_generator(mixed): element 2, component [0]: TypeError: `generator` yielded an "
        "element of type int64 where an element of type float32 was expected (its "
        "element_spec, from element 0); a dataset's dtypes are fixed, as in tf.data (without "
        "output_signature, by the first element): yield np.float32(...) values "
        "(.astype(np.float32)), or give output_signature, which converts them")


def test_from_generator_python_numbers_and_signatures_convert_as_before():
    def numbers():
        yield 0.5  # float32, as tf.data converts a Python float
        yield np.float32(1.5)
        yield 2.5

    assert [x.dtype for x in fl.Dataset.from_generator(numbers)] == [np.float32] * 3
    ds = fl.Dataset.from_generator(mixed, output_signature=(
        fl.TensorSpec((), np.float32), fl.TensorSpec((), bytes)))
    assert [x.dtype for x, _ in ds] == [np.float32] * 3
    text = fl.Dataset.from_generator(lambda: iter([b"a", np.float32(1)]))
    with pytest.raises(fl.StructureError, match=r"element 1: TypeError: `generator` yielded "
                                                r"an element of type float32 where an "
                                                r"element of type object was expected .*: "
                                                r"yield values of one type$"):
        list(text)


# ------------------------------------------------------------------ interleave
def _float_then_int(x):
    return fl.Dataset.from_tensors(np.float32(x) if x == 0 else x).repeat(2)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kwargs", [{}, {"num_parallel_calls": 2},
                                    {"num_parallel_calls": fl.AUTOTUNE}],
                         ids=["sequential", "threads", "autotune"])
def test_interleave_s_inner_datasets_share_one_dtype(kwargs):
    # tf.data traces map_func once: every dataset it makes has one element_spec.
    ds = fl.Dataset.range(3).interleave(_float_then_int, cycle_length=1, **kwargs)
    with pytest.raises(fl.StructureError) as caught:
        list(ds)
    assert str(caught.value).startswith(
        "interleave(_float_then_int): an element of the dataset made from input element 1 "
        "has dtype int64 where the dataset's elements have float32 (its element_spec, from an "
        "element of the dataset made from input element 0)")


@pytest.mark.timeout(60)
def test_interleave_checks_the_elements_it_hands_out_in_chunks():
    mixed = fl.Dataset.range(3).interleave(_float_then_int, cycle_length=3,
                                           num_parallel_calls=3).batch(64)
    with pytest.raises(fl.StructureError, match="has dtype int64 where"):
        list(mixed)
    same = fl.Dataset.range(40).interleave(
        lambda x: fl.Dataset.range(x).map(lambda y: np.float32(y)), cycle_length=4,
        num_parallel_calls=4).batch(64)
    assert sum(len(batch) for batch in same) == sum(range(40))
