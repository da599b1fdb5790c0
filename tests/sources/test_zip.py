"""Dataset.zip: nests of datasets, shortest input wins, nested state."""

import collections
import json

import numpy as np
import pytest

import feedline as fl
from feedline.testing import assert_elements_equal, check_checkpointing, fail_at

Pair = collections.namedtuple("Pair", ["a", "b"])


def test_varargs_make_tuples_and_stop_at_the_shortest():
    ds = fl.Dataset.zip(fl.Dataset.range(3), fl.Dataset.range(10, 20), fl.Dataset.range(5))
    assert [tuple(int(v) for v in e) for e in ds] == [(0, 10, 0), (1, 11, 1), (2, 12, 2)]
    assert ds.cardinality() == 3
    check_checkpointing(ds)


def test_one_nest_argument_is_the_structure():
    names = fl.Dataset.from_tensor_slices([b"p", b"q"])
    ds = fl.Dataset.zip({"x": fl.Dataset.range(2), "y": (fl.Dataset.range(5, 7), names)})
    out = list(ds)
    assert_elements_equal(out, [{"x": np.int64(0), "y": (np.int64(5), b"p")},
                                {"x": np.int64(1), "y": (np.int64(6), b"q")}])
    assert ds.element_spec == {"x": fl.TensorSpec((), np.dtype(np.int64)),
                               "y": (fl.TensorSpec((), np.dtype(np.int64)),
                                     fl.TensorSpec((), np.dtype(object)))}
    check_checkpointing(ds)


def test_namedtuple_structure():
    out = list(fl.Dataset.zip(Pair(fl.Dataset.range(2), fl.Dataset.range(2, 4))))
    assert all(isinstance(e, Pair) for e in out)
    assert [(int(e.a), int(e.b)) for e in out] == [(0, 2), (1, 3)]


def test_single_dataset_gives_its_own_elements_as_in_tf_data():
    assert [int(x) for x in fl.Dataset.zip(fl.Dataset.range(2))] == [0, 1]
    out = list(fl.Dataset.zip((fl.Dataset.range(2),)))
    assert [tuple(int(v) for v in e) for e in out] == [(0,), (1,)]


def test_list_of_datasets_is_taken_as_a_tuple():
    out = list(fl.Dataset.zip([fl.Dataset.range(2), fl.Dataset.range(3, 5)]))
    assert isinstance(out[0], tuple) and [int(v) for v in out[1]] == [1, 4]


def test_errors():
    with pytest.raises(TypeError, match="at least one dataset"):
        fl.Dataset.zip()
    with pytest.raises(TypeError, match=r"\[1\] is of type int"):
        fl.Dataset.zip(fl.Dataset.range(2), 5)
    with pytest.raises(TypeError, match=r"\['b'\]\[0\]\[0\] is of type int"):
        fl.Dataset.zip({"a": fl.Dataset.range(1), "b": [[1]]})


@pytest.mark.parametrize("cards, expected", [
    ((3, 5), 3),
    ((fl.INFINITE, 4), 4),
    ((fl.INFINITE, fl.INFINITE), fl.INFINITE),
    ((fl.UNKNOWN, 4), fl.UNKNOWN),
    ((fl.UNKNOWN, 0), 0),
])
def test_cardinality(cards, expected):
    def make(n):
        if n == fl.INFINITE:
            return fl.Dataset.range(3).repeat()
        if n == fl.UNKNOWN:
            return fl.Dataset.from_generator(lambda: iter(range(3)))
        return fl.Dataset.range(n)

    assert fl.Dataset.zip(*(make(n) for n in cards)).cardinality() == expected


def test_infinite_and_unknown_inputs():
    ds = fl.Dataset.zip(fl.Dataset.random(seed=1), fl.Dataset.range(4),
                        fl.Dataset.from_generator(lambda: iter("abcdef")))
    out = list(ds)
    assert len(out) == 4 and [e[2] for e in out] == [b"a", b"b", b"c", b"d"]
    check_checkpointing(ds)
    check_checkpointing(fl.Dataset.zip(fl.Dataset.random(seed=1), fl.Dataset.random(seed=2)),
                        max_elements=70, steps=[0, 1, 64, 65, 70])


def test_state_nests_every_input():
    it = iter(fl.Dataset.zip(fl.Dataset.range(3), fl.Dataset.range(3)))
    next(it)
    state = json.loads(json.dumps(it.state_dict()))["root"]
    assert state["type"] == "ZipIterator"
    assert [s["position"] for s in state["inputs"]] == [1, 1]


def test_restored_after_the_end_stays_ended():
    ds = fl.Dataset.zip(fl.Dataset.range(1), fl.Dataset.range(5))
    it = iter(ds)
    assert len(list(it)) == 1
    again = iter(ds)
    again.load_state_dict(it.state_dict())
    assert list(again) == []


def test_zip_of_a_dataset_with_itself_and_across_epochs():
    base = fl.Dataset.range(3)
    ds = fl.Dataset.zip(base, base)
    assert [(int(a), int(b)) for a, b in ds] == [(0, 0), (1, 1), (2, 2)]
    check_checkpointing(ds, epochs=3)


def test_checkpointing_restores_failing_elements_in_place():
    # a failure in one input fails the pair, and every input moves past it
    ds = fl.Dataset.zip(fail_at(fl.Dataset.range(6), [1]), fail_at(fl.Dataset.range(10, 16), [1, 4]))
    check_checkpointing(ds, constant_state_size=True)
