import collections

import numpy as np
import pytest

import feedline as fl
from feedline.core import state_codec
from feedline.core.structure import (
    assert_same_structure,
    batched_spec,
    datasets_array,
    flatten,
    flatten_with_paths,
    is_datasets_array,
    leaf_spec,
    map_structure,
    most_specific_common_spec,
    normalize_output,
    pack_as,
    spec_of,
    to_leaf_array,
    unbatched_spec,
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


INT64 = np.dtype("int64")


def test_none_is_a_component_with_its_own_spec():
    # tf.data: NoneTensorSpec, kept as it is by batch and unbatch
    assert spec_of((np.int64(1), None)) == (fl.TensorSpec((), INT64), fl.NoneTensorSpec())
    assert repr(fl.NoneTensorSpec()) == "NoneTensorSpec()"
    spec = (fl.TensorSpec((2,), INT64), fl.NoneTensorSpec())
    assert batched_spec(spec, None) == (fl.TensorSpec((None, 2), INT64), fl.NoneTensorSpec())
    assert unbatched_spec(batched_spec(spec, 3)) == spec
    assert fl.NoneTensorSpec().is_compatible_with(None)
    assert not fl.NoneTensorSpec().is_compatible_with(0)
    assert normalize_output((1, None)) == (np.int32(1), None)
    assert normalize_output({"x": None, "y": [None, 1][1]}) == {"x": None, "y": 1}


def test_datasets_are_components_with_a_dataset_spec():
    one = fl.Dataset.range(3)
    inner = fl.TensorSpec((), INT64)
    assert leaf_spec(one) == fl.DatasetSpec(inner, ())
    assert repr(leaf_spec(one)) == "DatasetSpec(TensorSpec(shape=(), dtype=int64), shape=())"
    grid = datasets_array([[one, fl.Dataset.range(5)]])
    assert grid.shape == (1, 2) and grid[0, 1].cardinality() == 5
    assert is_datasets_array(grid) and not is_datasets_array(np.zeros(2))
    assert leaf_spec(grid) == fl.DatasetSpec(inner, (1, 2))
    assert batched_spec(fl.DatasetSpec(inner, ()), 4) == fl.DatasetSpec(inner, (4,))
    assert unbatched_spec(fl.DatasetSpec(inner, (None, 2))) == fl.DatasetSpec(inner, (2,))
    with pytest.raises(fl.StructureError, match="Slicing dataset elements is not supported"):
        unbatched_spec(fl.DatasetSpec(inner, ()))
    assert fl.DatasetSpec(inner, (2,)).is_compatible_with(grid[0])
    assert not fl.DatasetSpec(inner, ()).is_compatible_with(grid[0])
    # NumPy alone would read a dataset's elements instead of holding it.
    held = to_leaf_array([one, one])
    assert held.shape == (2,) and held[0] is one
    assert to_leaf_array(one)[()] is one
    assert normalize_output((one, {"d": [one, one]}))[1]["d"].shape == (2,)
    with pytest.raises(fl.StructureError, match=r"ragged nesting: \[1\] has 1 items, expected "
                                                "2 items"):
        datasets_array([[one, one], [one]])


def test_most_specific_common_spec():
    a = (fl.TensorSpec((2,), INT64), fl.NoneTensorSpec(),
         fl.DatasetSpec(fl.TensorSpec((1,), INT64), (2,)))
    b = (fl.TensorSpec((3,), INT64), fl.NoneTensorSpec(),
         fl.DatasetSpec(fl.TensorSpec((4,), INT64), (5,)))
    assert most_specific_common_spec(a, b) == (
        fl.TensorSpec((None,), INT64), fl.NoneTensorSpec(),
        fl.DatasetSpec(fl.TensorSpec((None,), INT64), (None,)))
    assert most_specific_common_spec(None, a) == a and most_specific_common_spec(a, None) == a
    with pytest.raises(fl.StructureError, match=r"leaf \[1\] is NoneTensorSpec\(\) in one spec"):
        most_specific_common_spec(spec_of((1, None)), spec_of((1, 2)))
    with pytest.raises(fl.StructureError, match="dtype int32 in one spec and float32"):
        most_specific_common_spec(spec_of(1), spec_of(1.0))


def test_object_arrays_of_str_become_bytes():
    # tf.data makes tf.string of them: what dict(pandas_df) gives for a text column
    out = to_leaf_array(np.array(["a", "é", b"c"], dtype=object))
    assert out.dtype == object and out.tolist() == [b"a", "é".encode(), b"c"]
    numbers = np.array([1, 2], dtype=object)
    assert to_leaf_array(numbers) is numbers  # nothing to encode
