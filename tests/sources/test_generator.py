"""Dataset.from_generator: normalization, output_signature checks, errors, checkpoints."""

import gc
import json
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.testing import assert_elements_equal, check_checkpointing, no_leaked_threads


def stage_iterator(ds):
    """The source's own iterator: unlike PipelineIterator it keeps going after an error."""
    return ds._make_iterator(IteratorContext())


def test_callable_is_called_once_per_iterator_and_epoch():
    calls = []

    def gen():
        calls.append(1)
        yield from range(3)

    ds = fl.Dataset.from_generator(gen)
    assert len(calls) == 0  # building the dataset runs nothing
    assert [int(x) for x in ds.repeat(3)] == [0, 1, 2] * 3
    assert len(calls) == 3
    assert [int(x) for x in ds] == [0, 1, 2]
    assert len(calls) == 4


def test_python_values_become_numpy():
    values = [1, 2.5, True, b"bytes", [1, 2], np.float32(3)]

    # Python values as tf.data converts them everywhere (from_tensors, map results); one
    # generator each, as a dataset's dtypes are fixed (test_fixed_dtypes.py).
    out = [x for value in values for x in fl.Dataset.from_generator(lambda v=value: iter([v]))]
    assert [type(x) for x in out] == [np.int32, np.float32, np.bool_, bytes, np.ndarray,
                                      np.float32]
    assert out[4].tolist() == [1, 2] and out[4].dtype == np.int32


def test_nests_are_kept_and_spec_comes_from_first_element():
    def gen():
        for i in range(3):
            yield {"id": i, "pair": (float(i), [i] * 2)}

    ds = fl.Dataset.from_generator(gen)
    out = list(ds)
    assert_elements_equal(out[2:], [{"id": np.int32(2), "pair": (
        np.float32(2.0), np.array([2, 2], np.int32))}])
    assert ds.element_spec == {"id": fl.TensorSpec((), np.dtype(np.int32)),
                               "pair": (fl.TensorSpec((), np.dtype(np.float32)),
                                        fl.TensorSpec((2,), np.dtype(np.int32)))}
    assert ds.cardinality() == fl.UNKNOWN
    check_checkpointing(ds)


def test_args_are_passed_as_numpy_values_like_tf_data():
    seen = []

    def gen(n, name, values):
        seen.append((type(n), name, values.tolist()))
        yield from range(int(n))

    ds = fl.Dataset.from_generator(gen, args=(2, "file.txt", [1, 2]))
    assert [int(x) for x in ds] == [0, 1]
    assert seen == [(np.int64, b"file.txt", [1, 2])]


def test_output_signature_sets_spec_and_converts_python_values():
    def gen():
        yield 1, [1, 2], b"a"
        yield 2, [3, 4, 5], "b"

    signature = (fl.TensorSpec((), np.float32), fl.TensorSpec((None,), np.int32),
                 fl.TensorSpec((), bytes))
    ds = fl.Dataset.from_generator(gen, output_signature=signature)
    assert ds.element_spec == (fl.TensorSpec((), np.dtype(np.float32)),
                               fl.TensorSpec((None,), np.dtype(np.int32)),
                               fl.TensorSpec((), np.dtype(object)))
    out = list(ds)
    assert isinstance(out[0][0], np.float32) and float(out[1][0]) == 2.0
    assert out[1][1].dtype == np.int32 and out[1][1].tolist() == [3, 4, 5]
    assert out[0][2] == b"a" and out[1][2] == b"b"  # str becomes bytes (tf.string)
    check_checkpointing(ds)


def test_numpy_values_are_cast_within_their_kind():
    def gen():
        yield np.array([0.5, 1.5])  # float64 -> float32, as tf.convert_to_tensor does
        yield np.array([1, 2], dtype=np.int64)  # int64 -> float32 is same-kind too

    ds = fl.Dataset.from_generator(gen, output_signature=fl.TensorSpec((2,), np.float32))
    out = list(ds)
    assert all(x.dtype == np.float32 for x in out)
    assert [x.tolist() for x in out] == [[0.5, 1.5], [1.0, 2.0]]


@pytest.mark.parametrize("good, value, spec, message", [
    (1, 1.5, fl.TensorSpec((), np.int32), "expected dtype int32.*got float64"),
    ([1], np.array([0.5]), fl.TensorSpec((1,), np.int64), "expected dtype int64"),
    (1, b"x", fl.TensorSpec((), np.int64), "expected dtype int64"),
    (b"a", 3, fl.TensorSpec((), bytes), "expected bytes/str"),
    (255, 300, fl.TensorSpec((), np.uint8), "300 does not fit uint8"),
    (np.array([1, 2]), np.array([1, 300]), fl.TensorSpec((2,), np.int8), ".*does not fit int8"),
    ([1, 2], [1, 2, 3], fl.TensorSpec((2,), np.int64), r"expected shape \(2,\).*got shape \(3,\)"),
    (np.zeros(3), np.zeros((2, 2)), fl.TensorSpec((None,), np.float64),
     r"expected shape \(None,\).*got shape \(2, 2\)"),
    (1, None, fl.TensorSpec((), np.int64), "got None"),
])
def test_signature_mismatch_names_element_and_leaf(good, value, spec, message):
    def gen():
        yield 0, good
        yield 1, value

    ds = fl.Dataset.from_generator(gen, output_signature=(fl.TensorSpec((), np.int64), spec))
    it = iter(ds)
    next(it)
    with pytest.raises(fl.StructureError, match=r"element 1, leaf \[1\]: " + message):
        next(it)


def test_signature_structure_mismatch():
    def gen():
        yield {"a": 1}
        yield {"a": 1, "b": 2}

    ds = fl.Dataset.from_generator(gen, output_signature={"a": fl.TensorSpec((), np.int64)})
    it = iter(ds)
    assert int(next(it)["a"]) == 1
    with pytest.raises(fl.StructureError, match="element 1 does not match output_signature"):
        next(it)


def test_list_yielded_for_tuple_signature_is_a_mismatch():
    # As tf.data: a list is one tensor, not a tuple of components.
    ds = fl.Dataset.from_generator(lambda: iter([[1, 2]]), output_signature=(
        fl.TensorSpec((), np.int64), fl.TensorSpec((), np.int64)))
    with pytest.raises(fl.StructureError, match="element 0"):
        list(ds)


def test_none_leaf_without_signature():
    ds = fl.Dataset.from_generator(lambda: iter([(1, None)]))
    with pytest.raises(fl.StructureError, match=r"element 0, leaf \[1\] is None"):
        list(ds)


def test_bad_signature_and_bad_generator():
    with pytest.raises(TypeError, match="TensorSpec"):
        fl.Dataset.from_generator(lambda: iter([]), output_signature=(np.int64,))
    with pytest.raises(TypeError, match=r"leaf \['x'\] needs a shape tuple"):
        fl.Dataset.from_generator(lambda: iter([]), output_signature={
            "x": fl.TensorSpec(None, np.int64)})
    spec = fl.Dataset.from_generator(lambda: iter([]), output_signature=fl.TensorSpec(
        [None, 3], "float32")).element_spec
    assert spec == fl.TensorSpec((None, 3), np.dtype(np.float32))
    with pytest.raises(TypeError, match="callable"):
        fl.Dataset.from_generator(iter([1, 2]))
    with pytest.raises(TypeError, match="not iterable"):
        list(fl.Dataset.from_generator(lambda: 5))


def test_mismatched_element_does_not_stop_the_iterator():
    def gen():
        yield 1
        yield "not a number"
        yield 3

    it = stage_iterator(fl.Dataset.from_generator(gen, output_signature=fl.TensorSpec(
        (), np.int64)))
    assert int(next(it)) == 1
    with pytest.raises(fl.StructureError):
        next(it)
    assert int(next(it)) == 3
    with pytest.raises(StopIteration):
        next(it)


def test_generator_exception_keeps_type_and_gets_a_note():
    def broken():
        yield 1
        raise KeyError("boom")

    it = iter(fl.Dataset.from_generator(broken))
    next(it)
    with pytest.raises(KeyError) as info:
        next(it)
    assert "feedline: raised in from_generator(" in "\n".join(info.value.__notes__)
    assert "at input element 1" in "\n".join(info.value.__notes__)


def test_generator_function_raising_when_called():
    def needs_args(x):
        raise RuntimeError(f"bad {x}")

    with pytest.raises(RuntimeError, match="bad 3") as info:
        list(fl.Dataset.from_generator(needs_args, args=(3,)))
    assert any("from_generator" in note for note in info.value.__notes__)


class FlakyIterable:
    """An iterator object (not a generator) that fails at some positions and goes on."""

    def __init__(self, n, bad):
        self.n, self.bad, self.i = n, bad, 0

    def __iter__(self):
        return self

    def __next__(self):
        i = self.i
        if i >= self.n:
            raise StopIteration
        self.i += 1
        if i in self.bad:
            raise ValueError(f"bad value {i}")
        return i


def test_errors_count_as_positions_and_are_not_replayed_on_restore():
    ds = fl.Dataset.from_generator(lambda: FlakyIterable(6, {1, 3}))
    it = stage_iterator(ds)
    assert int(next(it)) == 0
    with pytest.raises(ValueError, match="bad value 1"):
        next(it)
    assert int(next(it)) == 2
    state = json.loads(json.dumps(it.state_dict()))
    assert state["taken"] == 3
    restored = stage_iterator(ds)
    restored.load_state_dict(state)  # replays 0, the error at 1, and 2 without raising
    with pytest.raises(ValueError, match="bad value 3"):
        next(restored)
    assert [int(next(restored)), int(next(restored))] == [4, 5]


def test_check_checkpointing_plain_and_with_signature():
    def gen(n):
        for i in range(int(n)):
            yield {"x": np.full((i % 3,), i, np.int32), "s": b"s%d" % i}

    check_checkpointing(fl.Dataset.from_generator(gen, args=(7,)), epochs=3)
    signature = {"x": fl.TensorSpec((None,), np.int32), "s": fl.TensorSpec((), bytes)}
    check_checkpointing(fl.Dataset.from_generator(gen, signature, args=(5,)))
    check_checkpointing(fl.Dataset.from_generator(lambda: iter(())))


def test_restore_skips_by_replaying_and_restore_after_end_calls_nothing():
    calls = []

    def gen():
        calls.append(1)
        yield from range(5)

    ds = fl.Dataset.from_generator(gen)
    it = iter(ds)
    [next(it) for _ in range(3)]
    state = it.state_dict()
    other = iter(ds)
    other.load_state_dict(state)
    assert [int(x) for x in other] == [3, 4]
    assert len(calls) == 2
    done = other.state_dict()
    assert done["root"]["exhausted"] is True
    third = iter(ds)
    third.load_state_dict(done)
    assert list(third) == [] and len(calls) == 2


def test_restorable_false_refuses_to_restore():
    ds = fl.Dataset.from_generator(lambda: iter(range(5)), restorable=False)
    it = iter(ds)
    next(it)
    state = json.loads(json.dumps(it.state_dict()))  # saving is fine
    other = iter(ds)
    with pytest.raises(fl.CheckpointError, match="restorable=False"):
        other.load_state_dict(state)
    assert [int(x) for x in it] == [1, 2, 3, 4]  # the original is unaffected


def test_generator_that_cannot_replay_fails_the_restore():
    runs = []

    def shrinking():
        runs.append(1)
        yield from range(5 if len(runs) == 1 else 1)

    ds = fl.Dataset.from_generator(shrinking)
    it = iter(ds)
    [next(it) for _ in range(3)]
    with pytest.raises(fl.CheckpointError, match="ended after 1 values.*position 3"):
        iter(ds).load_state_dict(it.state_dict())


def test_generator_is_closed_with_the_iterator_and_on_restore():
    closed = []

    def gen():
        try:
            yield from range(10)
        finally:
            closed.append(1)

    ds = fl.Dataset.from_generator(gen)
    it = iter(ds)
    next(it)
    state = it.state_dict()
    it.load_state_dict(state)  # the running generator is replaced by a replayed one
    assert closed == [1]
    it.close()
    assert closed == [1, 1]
    with fl.PipelineIterator(ds) as it2:
        next(it2)
    assert closed == [1, 1, 1]


def _blocking_generator(release: threading.Event, closed: list[str]):
    def gen():
        try:
            yield 1
            release.wait()  # a prefetch thread sits here when the pipeline is closed
            yield 2
            yield 3
        finally:
            closed.append(threading.current_thread().name)

    return gen


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["close", "garbage_collection"])
def test_closing_while_a_thread_is_inside_the_generator_is_quiet_and_closes_it(how):
    # Issue 29.10: close() raised "ValueError: generator already executing" (and garbage
    # collection printed it as "Exception ignored in ... __del__").
    release, closed = threading.Event(), []
    options = fl.Options(threading=fl.ThreadingOptions(close_timeout=0.1))
    ds = fl.Dataset.from_generator(_blocking_generator(release, closed)).prefetch(2) \
        .with_options(options)
    unraisable: list[Any] = []
    previous_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with no_leaked_threads():
            it = iter(ds)
            assert int(next(it)) == 1
            deadline = time.monotonic() + 30
            while not any(t.name.startswith("feedline-prefetch") and t.is_alive()
                          for t in threading.enumerate()) and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.1)  # the prefetch thread is inside the generator's next()
            with pytest.warns(RuntimeWarning, match="prefetch did not stop"):
                if how == "close":
                    it.close()
                else:
                    del it
                    gc.collect()
            assert closed == []  # it cannot be closed while the thread runs it
            release.set()  # the blocked call returns: that thread closes the generator
    finally:
        release.set()
        sys.unraisablehook = previous_hook
    assert unraisable == []
    assert len(closed) == 1 and closed[0].startswith("feedline-prefetch")


def test_a_tuple_where_the_signature_has_one_spec_is_that_specs_value():
    # tf.data converts the yielded tuple to the shape-(1,) tensor the signature describes.
    def gen():
        yield (1,)
        yield [2]

    ds = fl.Dataset.from_generator(gen, output_signature=fl.TensorSpec((1,), np.int64))
    assert [x.tolist() for x in ds] == [[1], [2]]


def test_the_older_output_types_and_output_shapes_keywords():
    def gen():
        for i in range(2):
            yield {"a": i, "b": [i, i]}, "x"

    ds = fl.Dataset.from_generator(gen, output_types=({"a": np.int32, "b": "float32"}, str),
                                   output_shapes=({"a": (), "b": (2,)}, ()))
    assert ds.element_spec == ({"a": fl.TensorSpec((), np.int32),
                                "b": fl.TensorSpec((2,), np.float32)},
                               fl.TensorSpec((), object))
    (first, text), _ = list(ds)
    assert first["a"].dtype == np.int32 and first["b"].dtype == np.float32 and text == b"x"
    # Types alone: converted, any shape (tf.data's unknown shapes).
    typed = fl.Dataset.from_generator(gen, output_types=({"a": np.int32, "b": "float32"}, str))
    assert [e[0]["b"].dtype for e in typed] == [np.float32, np.float32]


def test_the_older_keywords_are_checked():
    with pytest.raises(TypeError, match="output_shapes needs output_types"):
        fl.Dataset.from_generator(lambda: iter([]), output_shapes=())
    with pytest.raises(TypeError, match="not both"):
        fl.Dataset.from_generator(lambda: iter([]), output_signature=fl.TensorSpec((), np.int64),
                                  output_types=np.int64)
    with pytest.raises(TypeError, match="does not match the structure"):
        fl.Dataset.from_generator(lambda: iter([]), output_types=(np.int64, np.int64),
                                  output_shapes=((),))
