"""Dataset.counter against what tf.data 2.21 returned (tests/data/tfdata_golden/counter.json)."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "tfdata_golden"))
import golden  # noqa: E402

GOLDEN = golden.load("counter")

CASES = {
    "default": dict(),
    "start_step": dict(start=3, step=-2),
    "int32": dict(start=10, step=3, dtype=np.int32),
    "int32_overflow": dict(start=2**31 - 3, step=2, dtype="int32"),
    "int8_overflow": dict(start=120, step=5, dtype=np.int8),
    "uint8_wraps": dict(start=250, step=3, dtype=np.uint8),
    "float32_accumulates": dict(start=0.1, step=0.1, dtype=np.float32),
    "float64": dict(start=-1.5, step=0.7, dtype=np.float64),
    "zero_step": dict(start=7, step=0),
}


def test_every_golden_case_is_tested():
    assert sorted(CASES) == sorted(GOLDEN)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_tensorflow(name):
    expected = [golden.decode(e) for e in GOLDEN[name]["output"]]
    dataset = fl.Dataset.counter(**CASES[name])
    out = list(dataset.take(len(expected)))
    golden.same(out, expected)
    assert all(type(x) is type(e) for x, e in zip(out, expected))  # NumPy scalars
    assert dataset.cardinality() == GOLDEN[name]["cardinality"] == fl.INFINITE
    assert dataset.element_spec == fl.TensorSpec((), expected[0].dtype)


@pytest.mark.parametrize("name", ["default", "int8_overflow", "float32_accumulates"])
def test_checkpointing(name):
    check_checkpointing(fl.Dataset.counter(**CASES[name]).take(12), constant_state_size=True)


def test_restore_continues_the_accumulated_float():
    it = iter(fl.Dataset.counter(0.1, 0.1, np.float32))
    for _ in range(20):
        next(it)
    state = json.loads(json.dumps(it.state_dict()))
    rest = [next(it) for _ in range(5)]
    resumed = iter(fl.Dataset.counter(0.1, 0.1, np.float32))
    resumed.load_state_dict(state)
    assert [next(resumed) for _ in range(5)] == rest


def test_arguments_are_checked_as_tensorflow_converts_them():
    with pytest.raises(TypeError, match=r"counter\(start\) must be an integer for dtype int64"):
        fl.Dataset.counter(0.5)
    with pytest.raises(ValueError, match=r"counter\(start\) = 300 does not fit dtype int8"):
        fl.Dataset.counter(300, dtype=np.int8)
    with pytest.raises(ValueError, match=r"counter\(step\) = -1 does not fit dtype uint8"):
        fl.Dataset.counter(0, -1, dtype=np.uint8)
    with pytest.raises(TypeError, match="integer or float dtype"):
        fl.Dataset.counter(dtype=bool)
    with pytest.raises(TypeError, match=r"counter\(step\) must be a number"):
        fl.Dataset.counter(0, "1")
    assert [float(x) for x in fl.Dataset.counter(np.float32(2), 2.0, "float32").take(2)] == [
        2.0, 4.0]
