"""parse_example & co. against what tf.io.parse_example returned for the golden files."""

import json

import numpy as np
import pytest
from golden_spec import GOLDEN_SPEC
from hypothesis import given, settings
from hypothesis import strategies as st

import feedline as fl
from feedline.formats.example import (
    ExampleParseError,
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedValues,
    VarLenFeature,
    encode_example,
    encode_sequence_example,
    parse_example,
    parse_sequence_example,
    parse_single_example,
    parse_single_sequence_example,
)
from feedline.formats.tfrecord import TFRecordDataset
from feedline.testing import check_checkpointing


def assert_matches_expected(out, expected):
    assert out["id"].dtype == np.int64 and out["id"].tolist() == expected["id"]
    assert out["label"].dtype == np.int64 and out["label"].tolist() == expected["label"]
    assert out["weights"].dtype == np.float32 and out["weights"].shape == (20, 4)
    np.testing.assert_array_equal(out["weights"], np.array(expected["weights"], np.float32))
    assert out["name"].dtype == object
    assert out["name"].tolist() == [n.encode() for n in expected["name"]]
    assert out["image"].tolist() == [bytes.fromhex(h) for h in expected["image_hex"]]
    tokens = out["tokens"]
    assert isinstance(tokens, RaggedValues) and tokens.dtype == np.int64
    assert tokens.to_list() == expected["tokens_ragged"]
    padded = tokens.to_padded(0)
    assert padded.dtype == np.int64 and padded.tolist() == expected["tokens_dense_padded"]


def test_golden_examples_as_one_batch(golden):
    records, expected = golden
    out = parse_example(records, GOLDEN_SPEC)
    assert list(out) == list(GOLDEN_SPEC)
    assert_matches_expected(out, expected)


def test_golden_examples_one_at_a_time(golden):
    records, expected = golden
    rows = [parse_single_example(record, GOLDEN_SPEC) for record in records]
    assert [int(r["id"]) for r in rows] == expected["id"]
    assert [int(r["label"]) for r in rows] == expected["label"]
    assert [r["weights"].tolist() for r in rows] == np.array(
        expected["weights"], np.float32).tolist()
    assert [r["name"] for r in rows] == [n.encode() for n in expected["name"]]
    assert [r["image"].hex() for r in rows] == expected["image_hex"]
    assert [r["tokens"].tolist() for r in rows] == expected["tokens_ragged"]
    assert all(r["tokens"].dtype == np.int64 for r in rows)


def test_golden_examples_in_a_pipeline(golden_dir, golden):
    _, expected = golden
    ds = (TFRecordDataset(str(golden_dir / "examples.tfrecord")).batch(8)
          .map(lambda batch: parse_example(batch, {k: GOLDEN_SPEC[k] for k in ("id", "label")})))
    batches = list(ds)
    assert [len(b["id"]) for b in batches] == [8, 8, 4]
    assert np.concatenate([b["label"] for b in batches]).tolist() == expected["label"]
    check_checkpointing(ds)


def test_golden_sequence_example(golden_dir):
    records = list(TFRecordDataset(str(golden_dir / "sequence_examples.tfrecord")))
    expected = json.loads((golden_dir / "sequence_examples.expected.json").read_text())
    context, lists = parse_single_sequence_example(
        records[0], {"len": FixedLenFeature([1], "int64")},
        {"frames": FixedLenSequenceFeature([2], "float32")})
    assert context["len"].tolist() == expected["context"]["len"]
    assert lists["frames"].dtype == np.float32
    assert lists["frames"].tolist() == expected["feature_lists"]["frames"]
    context, lists, lengths = parse_sequence_example(
        records, {"len": VarLenFeature("int64")}, {"frames": FixedLenSequenceFeature([2],
                                                                                     np.float32)})
    assert context["len"].to_list() == [expected["context"]["len"]]
    assert lists["frames"].tolist() == [expected["feature_lists"]["frames"]]
    assert lengths["frames"].tolist() == [3]
    _, lists = parse_single_sequence_example(
        records[0], sequence_features={"frames": VarLenFeature("float32")})
    assert lists["frames"].to_list() == expected["feature_lists"]["frames"]


# ----------------------------------------------------------------------------- semantics
def test_dtype_names():
    for name in ("int64", np.int64, np.dtype("int64")):
        assert FixedLenFeature([], name).dtype == np.int64
    for name in ("float32", np.float32):
        assert VarLenFeature(name).dtype == np.float32
    for name in ("string", "bytes", bytes, object, str):
        assert VarLenFeature(name).dtype == object
    with pytest.raises(ValueError, match="int64, float32 or string"):
        FixedLenFeature([], np.float64)
    with pytest.raises(ValueError, match="shape"):
        FixedLenFeature([-1], "int64")


def test_default_values():
    records = [encode_example({"x": [1, 2]}), encode_example({})]
    out = parse_example(records, {
        "x": FixedLenFeature([2], "int64", default_value=[7, 8]),
        "s": FixedLenFeature([2], "string", default_value="z"),
        "m": FixedLenFeature([2, 2], "float32", default_value=[1, 2, 3, 4]),
    })
    assert out["x"].tolist() == [[1, 2], [7, 8]]
    assert out["s"].tolist() == [[b"z", b"z"], [b"z", b"z"]]
    assert out["m"].tolist() == [[[1, 2], [3, 4]]] * 2
    with pytest.raises(ValueError, match="does not fit the feature shape"):
        FixedLenFeature([3], "int64", default_value=[1, 2])


def test_var_len_missing_and_empty_features():
    records = [encode_example({"t": ["a", "b"]}), encode_example({}),
               encode_example({"t": []}), encode_example({"t": ["c"]})]
    tokens = parse_example(records, {"t": VarLenFeature("string")})["t"]
    assert tokens.to_list() == [[b"a", b"b"], [], [], [b"c"]]
    assert tokens.row_splits.tolist() == [0, 2, 2, 2, 3]
    assert tokens.row_lengths().tolist() == [2, 0, 0, 1]
    assert tokens.to_padded().tolist() == [[b"a", b"b"], [b"", b""], [b"", b""], [b"c", b""]]
    assert parse_single_example(records[1], {"t": VarLenFeature("string")})["t"].shape == (0,)


def test_fixed_len_sequence_feature_in_examples():
    records = [encode_example({"p": [1, 2, 3, 4]}), encode_example({}),
               encode_example({"p": [5, 6]})]
    out = parse_example(records, {
        "p": FixedLenSequenceFeature([2], "int64", allow_missing=True, default_value=-1)})
    assert out["p"].tolist() == [[[1, 2], [3, 4]], [[-1, -1], [-1, -1]], [[5, 6], [-1, -1]]]
    single = parse_single_example(records[0], {
        "p": FixedLenSequenceFeature([], "int64", allow_missing=True)})
    assert single["p"].tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="allow_missing=True"):
        parse_example(records, {"p": FixedLenSequenceFeature([2], "int64")})
    with pytest.raises(ExampleParseError, match="multiple of 3") as info:
        parse_example(records, {"p": FixedLenSequenceFeature([3], "int64", allow_missing=True)})
    assert info.value.record_index == 0


def test_sequence_examples_batch():
    records = [
        encode_sequence_example({"n": 2}, {"x": [[1.0, 2.0], [3.0, 4.0]], "w": [[b"a"], []]}),
        encode_sequence_example({}, {"x": [[5.0, 6.0]], "w": [[b"b", b"c"]]}),
        encode_sequence_example({"n": 7}, {}),
    ]
    context, lists, lengths = parse_sequence_example(
        records, {"n": FixedLenFeature([], "int64", default_value=0)},
        {"x": FixedLenSequenceFeature([2], "float32", allow_missing=True),
         "w": VarLenFeature("string")})
    assert context["n"].tolist() == [2, 0, 7]
    assert lists["x"].tolist() == [[[1, 2], [3, 4]], [[5, 6], [0, 0]], [[0, 0], [0, 0]]]
    assert list(lengths) == ["x"] and lengths["x"].tolist() == [2, 1, 0]
    w = lists["w"]
    assert w.ragged_rank == 2 and w.to_list() == [[[b"a"], []], [[b"b", b"c"]], []]
    assert w.to_padded().tolist() == [[[b"a", b""], [b"", b""]], [[b"b", b"c"], [b"", b""]],
                                      [[b"", b""], [b"", b""]]]
    with pytest.raises(ExampleParseError, match="feature list 'x' is missing in record 2") as info:
        parse_sequence_example(records, sequence_features={
            "x": FixedLenSequenceFeature([2], "float32")})
    assert info.value.feature == "x" and info.value.record_index == 2
    with pytest.raises(ExampleParseError, match="record 0 of the batch, step 0: expected 3"):
        parse_sequence_example(records, sequence_features={
            "x": FixedLenSequenceFeature([3], "float32", allow_missing=True)})
    with pytest.raises(TypeError, match="FixedLenSequenceFeature, VarLenFeature"):
        parse_sequence_example(records, sequence_features={"x": FixedLenFeature([2], "float32")})
    with pytest.raises(ValueError, match="context_features, sequence_features or both"):
        parse_sequence_example(records)


def test_empty_batch():
    out = parse_example([], {"a": FixedLenFeature([3], "float32"), "b": VarLenFeature("int64"),
                             "c": FixedLenSequenceFeature([], "string", allow_missing=True)})
    assert out["a"].shape == (0, 3) and out["a"].dtype == np.float32
    assert len(out["b"]) == 0 and out["b"].to_padded().shape == (0, 0)
    assert out["c"].shape == (0, 0)


def test_object_array_batches_and_bad_inputs():
    records = np.array([encode_example({"a": 1}), encode_example({"a": 2})], dtype=object)
    assert parse_example(records, {"a": FixedLenFeature([], "int64")})["a"].tolist() == [1, 2]
    with pytest.raises(TypeError, match="needs a batch"):
        parse_example(records[0], {"a": FixedLenFeature([], "int64")})
    with pytest.raises(TypeError, match="record 1 of the batch must be bytes"):
        parse_example([records[0], 3], {"a": FixedLenFeature([], "int64")})
    with pytest.raises(TypeError, match="one serialized record"):
        parse_single_example(list(records), {"a": FixedLenFeature([], "int64")})


# -------------------------------------------------------------------------------- errors
def test_missing_feature_without_default(golden):
    records, _ = golden
    with pytest.raises(ExampleParseError, match="'label' is missing in record 0") as info:
        parse_example(records, {"label": FixedLenFeature([], "int64")})
    assert (info.value.feature, info.value.record_index) == ("label", 0)
    assert isinstance(info.value, ValueError)
    with pytest.raises(ExampleParseError, match="missing in record 3 of the batch"):
        parse_example(records[1:], {"label": FixedLenFeature([], "int64")})  # file record 4


def test_wrong_dtype(golden):
    records, _ = golden
    with pytest.raises(ExampleParseError, match="expected int64 values .* found float32") as info:
        parse_example(records, {"weights": FixedLenFeature([4], "int64")})
    assert info.value.expected == "int64" and info.value.found == "float32"
    records = [encode_example({"t": [1]}), encode_example({}), encode_example({"t": [0.5]})]
    with pytest.raises(ExampleParseError, match="'t' in record 2 of the batch") as info:
        parse_example(records, {"t": VarLenFeature("int64")})
    assert info.value.record_index == 2


def test_wrong_length(golden):
    records, _ = golden
    with pytest.raises(ExampleParseError,
                       match=r"'weights' in record 0 of the batch: expected 3 float32 values "
                             r"for shape \[3\], found 4") as info:
        parse_example(records, {"weights": FixedLenFeature([3], "float32")})
    assert info.value.expected == "3 values" and info.value.found == "4 values"
    with pytest.raises(ExampleParseError, match="'tokens' in record 0 .*found 0"):
        parse_example(records, {"tokens": FixedLenFeature([], "int64")})
    records = [encode_example({"x": [1]}), encode_example({"x": [1, 2]})]
    with pytest.raises(ExampleParseError, match="record 1 of the batch") as info:
        parse_example(records, {"x": FixedLenFeature([], "int64")})
    assert info.value.record_index == 1
    with pytest.raises(ExampleParseError, match="'x' in the record"):
        parse_single_example(records[1], {"x": FixedLenFeature([], "int64")})


def test_undecodable_record_is_named():
    records = [encode_example({"a": 1}), b"\x0a\x05\x01", encode_example({"a": 2})]
    with pytest.raises(ExampleParseError, match="record 1 of the batch is not a valid") as info:
        parse_example(records, {"a": FixedLenFeature([], "int64")})
    assert info.value.record_index == 1


# ------------------------------------------------------------------------- RaggedValues
def test_ragged_values():
    ragged = RaggedValues.from_row_lengths(np.array([1, 2, 3]), [2, 0, 1])
    assert ragged.to_list() == [[1, 2], [], [3]]
    assert len(ragged) == 3 and ragged[0].tolist() == [1, 2] and ragged[-1].tolist() == [3]
    assert ragged.to_padded(-1).tolist() == [[1, 2], [-1, -1], [3, -1]]
    assert ragged == RaggedValues([1, 2, 3], [0, 2, 2, 3])
    assert ragged != RaggedValues([1, 2, 4], [0, 2, 2, 3])
    assert "[[1, 2], [], [3]]" in repr(ragged)
    nested = RaggedValues(np.arange(5), [np.array([0, 2, 3]), np.array([0, 1, 1, 5])])
    assert nested.to_list() == [[[0], []], [[1, 2, 3, 4]]]
    assert nested[1].to_list() == [[1, 2, 3, 4]] and nested[0].to_list() == [[0], []]
    assert nested.to_padded(9).tolist() == [[[0, 9, 9, 9], [9, 9, 9, 9]],
                                            [[1, 2, 3, 4], [9, 9, 9, 9]]]
    with pytest.raises(ValueError, match="row_splits"):
        RaggedValues([1, 2], [0, 3])
    with pytest.raises(IndexError):
        ragged[3]


# ----------------------------------------------------------------------------- fuzzing
@given(st.lists(st.binary(max_size=60), max_size=4))
@settings(max_examples=100, deadline=None)
def test_random_bytes_parse_or_raise_a_clear_error(records):
    spec = {"a": FixedLenFeature([], "int64", default_value=0), "b": VarLenFeature("string"),
            "c": FixedLenSequenceFeature([], "float32", allow_missing=True)}
    try:
        out = parse_example(records, spec)
    except ExampleParseError as error:
        assert error.record_index is not None and "record" in str(error)
    else:
        assert out["a"].shape == (len(records),)
    try:
        parse_sequence_example(records, {"a": VarLenFeature("int64")},
                               {"s": VarLenFeature("float32")})
    except ExampleParseError as error:
        assert error.record_index is not None


@given(st.integers(0, 400), st.integers(0, 7))
@settings(max_examples=80, deadline=None)
def test_bit_flips_in_valid_examples_parse_or_raise_a_clear_error(position, bit):
    record = bytearray(encode_example({"id": 5, "w": [0.5, 1.5], "name": "abc",
                                       "t": list(range(30))}))
    record[position % len(record)] ^= 1 << bit
    spec = {"id": FixedLenFeature([], "int64"), "w": FixedLenFeature([2], "float32"),
            "name": FixedLenFeature([], "string"), "t": VarLenFeature("int64")}
    try:
        parse_example([bytes(record)], spec)
    except ExampleParseError as error:
        assert error.record_index == 0


# ----------------------------------------------------------------------- RaggedValues in states
def _ragged_pipeline():
    records = [encode_example({"id": i, "tokens": [b"t"] * (i % 3)}) for i in range(12)]
    spec = {"id": FixedLenFeature([], "int64"), "tokens": VarLenFeature("string")}
    return (fl.Dataset.from_tensor_slices(np.array(records, dtype=object)).batch(2)
            .map(lambda batch: parse_example(batch, spec)).shuffle(3, seed=1))


def test_ragged_values_refuse_splits_that_only_wrap_into_order():
    # Steps near 2**63 wrap in int64, so "never decreases" held for splits far outside the
    # values (found fuzzing RaggedFeature partitions, which build these).
    big = (1 << 63) - 1
    with pytest.raises(ValueError, match="row_splits"):
        RaggedValues([1, 2, 3], [0, big, -big - 1, -1, 3])
    with pytest.raises(ValueError, match="row_splits"):
        RaggedValues(np.arange(3), [np.array([0, big, -big - 1, -1, 1]), np.array([0, 3])])


def test_ragged_values_in_a_shuffle_buffer_checkpoint():
    elements = check_checkpointing(_ragged_pipeline(), steps=[0, 1, 3, 5])
    assert sorted(i for e in elements for i in e["id"].tolist()) == list(range(12))
    assert all(isinstance(e["tokens"], RaggedValues) for e in elements)


def test_ragged_values_round_trip_through_a_pipeline_state_file(tmp_path):
    it = iter(_ragged_pipeline())
    next(it)
    fl.save_state(tmp_path / "state", it.state_dict())
    expected = [e["tokens"] for e in it]
    restored = iter(_ragged_pipeline())
    restored.load_state_dict(fl.load_state(tmp_path / "state"))
    assert [e["tokens"] for e in restored] == expected


def test_a_damaged_ragged_value_in_a_state_is_a_checkpoint_error():
    from feedline.core.state_codec import decode, encode

    value = encode(RaggedValues(np.array([1, 2, 3]), np.array([0, 1, 3])))
    assert value["o"] == "feedline.formats.example:RaggedValues"
    assert decode(json.loads(json.dumps(value))) == RaggedValues([1, 2, 3], [0, 1, 3])
    value["v"]["splits"][0] = encode(np.array([0, 5, 3]))
    with pytest.raises(fl.CheckpointError, match="damaged element"):
        decode(value)
    value["v"]["values"] = encode(b"not an array")
    with pytest.raises(fl.CheckpointError, match="damaged element"):
        decode(value)


def test_ragged_values_round_trip_through_a_state_file(tmp_path):
    from feedline.core.state_codec import decode, encode

    element = {"tokens": RaggedValues(np.array([b"a", b"bc", b"d"], dtype=object),
                                      [np.array([0, 1, 3]), np.array([0, 2, 2, 3])])}
    fl.save_state(tmp_path / "state", {"buffer": [encode(element)]})
    restored = decode(fl.load_state(tmp_path / "state")["buffer"][0])
    assert restored == element and restored["tokens"].ragged_rank == 2
