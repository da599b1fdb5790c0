"""``element_spec`` where the graph does not know it statically: derived as tf.data derives it.

Expected specs are TensorFlow 2.21's for the same pipelines (checked with
``benchmarks/.venvs/tf``, with ``tf.fill([2], x)`` for ``np.full(2, x)``).
"""

import numpy as np
import pytest

import feedline as fl
from feedline.core.spec_inference import first_element_spec, infer_element_spec

D = fl.Dataset
INT64 = np.dtype("int64")


def pairs():
    return D.range(10).map(lambda x: np.full(2, x))


@pytest.mark.parametrize("make, expected", [
    # tf: TensorSpec(shape=(None, 2)): the last batch may be smaller
    (lambda: pairs().batch(4), (None, 2)),
    (lambda: pairs().batch(4, num_parallel_calls=2), (None, 2)),
    (lambda: pairs().batch(4, drop_remainder=True), (4, 2)),
    (lambda: pairs().padded_batch(4), (None, 2)),
    (lambda: pairs().padded_batch(4, drop_remainder=True), (4, 2)),
    (lambda: pairs().padded_batch(4, padded_shapes=[5]), (None, 5)),
    (lambda: pairs().batch(4).rebatch(2), (None, 2)),
    (lambda: pairs().batch(4, drop_remainder=True).rebatch(2), (2, 2)),
    (lambda: pairs().batch(4).unbatch(), (2,)),
    (lambda: pairs().batch(4).prefetch(1).shuffle(3).repeat(2).take(5), (None, 2)),
    (lambda: pairs().batch(4).concatenate(pairs().batch(3, drop_remainder=True)), (None, 2)),
    (lambda: D.range(7).window(3).flat_map(lambda w: w.batch(3)), (None,)),
    (lambda: D.range(7).window(3).interleave(lambda w: w.batch(3)), (None,)),
    (lambda: D.range(7).window(3).interleave(lambda w: w.batch(3), num_parallel_calls=2),
     (None,)),
])
def test_specs_derive_from_the_inputs_as_in_tf_data(make, expected):
    spec = make().element_spec
    assert spec == fl.TensorSpec(expected, INT64)


def test_nested_specs_derive_too():
    # tf: zip((..batch(4), range(3))) and ..batch(4).enumerate()
    batched = fl.TensorSpec((None, 2), INT64)
    assert D.zip((pairs().batch(4), D.range(3))).element_spec == \
        (batched, fl.TensorSpec((), INT64))
    assert pairs().batch(4).enumerate().element_spec == (fl.TensorSpec((), INT64), batched)
    # tf: ...window(4).element_spec == DatasetSpec(TensorSpec(shape=(2,)), TensorShape([]))
    assert pairs().window(4).element_spec == fl.DatasetSpec(fl.TensorSpec((2,), INT64), ())
    # tf: from_generator(..., TensorSpec([2], tf.float64)).batch(2): (None, 2)
    generated = D.from_generator(lambda: iter([np.zeros(2)] * 5)).batch(2)
    assert generated.element_spec == fl.TensorSpec((None, 2), np.dtype("float64"))


def test_only_the_stage_running_user_code_runs_and_on_one_element():
    calls = []

    def f(x):
        calls.append(int(x))
        return np.full(2, x)

    ds = D.range(1000).map(f).batch(100).prefetch(2)
    assert ds.element_spec == fl.TensorSpec((None, 2), INT64)
    assert calls == [0]  # one call of f: the spec did not come from a produced batch
    assert ds.element_spec == fl.TensorSpec((None, 2), INT64)
    assert calls == [0]  # cached


def test_an_empty_stage_falls_back_to_the_first_element():
    # An empty map gives no spec to derive from: the batch's own first element is looked at
    # (there is none: None, feedline's spec of an empty dataset).
    assert D.range(0).map(lambda x: x).batch(2).element_spec is None
    assert D.range(3).filter(lambda x: x > 5).map(lambda x: x).batch(2).element_spec is None
    # An empty map beside one with elements: the batch still derives its spec (tf: (None,)).
    ds = D.range(0).map(lambda x: x).concatenate(D.range(3).map(lambda x: x)).batch(2)
    assert ds.element_spec == fl.TensorSpec((None,), INT64)


def test_helpers():
    ds = D.range(5).map(lambda x: np.zeros(3, np.float32)).batch(2)
    assert first_element_spec(ds) == fl.TensorSpec((2, 3), np.dtype("float32"))
    assert infer_element_spec(ds) == fl.TensorSpec((None, 3), np.dtype("float32"))
    assert first_element_spec(D.range(0)) is None
