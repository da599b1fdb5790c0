import collections

import numpy as np
import pytest

import feedline as fl
from feedline.core import state_codec
from feedline.core.structure import (
    assert_same_structure,
    flatten,
    flatten_with_paths,
    map_structure,
    normalize_output,
    pack_as,
    spec_of,
)
from feedline.testing import elements_equal

Point = collections.namedtuple("Point", "x y")


def test_flatten_orders_dict_keys_and_pack_restores_insertion_order():
    element = {"b": 1, "a": (2, Point(3, 4))}
    assert flatten(element) == [2, 3, 4, 1]
    packed = pack_as(element, [20, 30, 40, 10])
    assert packed == {"b": 10, "a": (20, Point(30, 40))}
    assert list(packed) == ["b", "a"] and isinstance(packed["a"][1], Point)


def test_pack_with_wrong_leaf_count_is_clear():
    with pytest.raises(fl.StructureError, match="too few"):
        pack_as((1, 2), [1])
    with pytest.raises(fl.StructureError, match="too many"):
        pack_as((1, 2), [1, 2, 3])


def test_paths_name_positions():
    assert [p for p, _ in flatten_with_paths((1, {"img": 2}))] == ["[0]", "[1]['img']"]


def test_structure_mismatch_names_both_sides():
    with pytest.raises(fl.StructureError, match=r"expected \(leaf, leaf\), got \{'a': leaf\}"):
        assert_same_structure((1, 2), {"a": 1}, "in test")


def test_map_structure_and_normalize_output():
    assert map_structure(lambda a, b: a * b, (2, [3]), (4, 5)) == (8, [3, 3, 3, 3, 3])
    # A returned list is a tuple of components; a list inside it is one array (tf.data).
    out = normalize_output([1, {"k": [2, 3]}])
    assert type(out) is tuple and out[0] == 1 and out[1]["k"].tolist() == [2, 3]
    assert isinstance(out[1]["k"], np.ndarray)


def test_spec_of_bytes_and_arrays():
    spec = spec_of({"x": np.zeros((2, 3), np.float32), "s": b"abc"})
    assert spec == {"x": fl.TensorSpec((2, 3), np.dtype(np.float32)),
                    "s": fl.TensorSpec((), np.dtype(object))}


@pytest.mark.parametrize("element", [
    np.int64(3), np.float32(1.5), np.bool_(True), np.arange(6).reshape(2, 3),
    np.array([b"a", b"bc"], dtype=object), b"raw\x00bytes", "text", 7, 2.5, None, True,
    (np.uint8(1), {"k": [np.float16(2)]}), Point(np.int32(1), b"y"),
    np.array(["a", "b"]), np.float64("nan"),
])
def test_state_codec_round_trips_through_json(element):
    import json

    from feedline.core.fingerprint import DeclaredTypes

    declared = DeclaredTypes()
    declared.add(Point)  # decoding builds only namedtuples the pipeline declares
    decoded = state_codec.decode(json.loads(json.dumps(state_codec.encode(element))), declared)
    if isinstance(element, np.generic | np.ndarray):
        assert type(decoded) is type(element)
        assert np.asarray(decoded).dtype == np.asarray(element).dtype
    assert elements_equal(decoded, element) or (element is None and decoded is None)


def test_state_codec_rejects_unstorable_values():
    with pytest.raises(fl.CheckpointError, match="cannot store a set"):
        state_codec.encode({1, 2})


def test_options_merge_newer_non_default_wins():
    base = fl.Options(seed=1, threading=fl.ThreadingOptions(max_parallelism=2))
    merged = base.merge(fl.Options(deterministic=False))
    assert (merged.seed, merged.deterministic, merged.threading.max_parallelism) == (1, False, 2)
    ds = fl.Dataset.range(3).with_options(base).map(lambda x: x).with_options(
        fl.Options(seed=5))
    assert ds.options().seed == 5 and ds.options().threading.max_parallelism == 2
    assert ds.options().max_parallelism() <= 2


def test_with_options_rejects_other_types():
    with pytest.raises(TypeError, match="feedline.Options"):
        fl.Dataset.range(3).with_options({"seed": 1})
