"""RaggedFeature, SparseFeature and sparse VarLenFeature results against what TensorFlow 2.21's
tf.io.parse_example / parse_single_example returned (tests/data/tfdata_golden/parse_example.json,
recorded by record.py), on the C fast path and the protobuf path alike."""

import sys
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline.formats.example import (
    ExampleParseError,
    FixedLenFeature,
    RaggedFeature,
    RaggedValues,
    SparseFeature,
    SparseValues,
    VarLenFeature,
    cbridge,
    encode_example,
    parse_example,
    parse_single_example,
)
from feedline.testing import check_checkpointing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "tfdata_golden"))
import golden  # noqa: E402

GOLDEN = golden.load("parse_example")


@pytest.fixture(params=["native", "protobuf"])
def path(request, monkeypatch):
    """Run the test on the C fast path (when built) and on the protobuf path."""
    if request.param == "protobuf":
        monkeypatch.setattr(cbridge, "extension", None)
    elif cbridge.extension is None:
        pytest.skip("the C fast path is not built")
    return request.param


def spec_of(description):
    kind = description["type"]
    if kind == "VarLenFeature":
        return VarLenFeature(description["dtype"])
    if kind == "SparseFeature":
        return SparseFeature(description["index_key"], description["value_key"],
                             description["dtype"], description["size"],
                             description["already_sorted"])
    partitions = [getattr(RaggedFeature, name)(arg) for name, arg in description["partitions"]]
    return RaggedFeature(description["dtype"], description["value_key"], partitions,
                         description["row_splits_dtype"])


def case(name):
    data = GOLDEN[name]
    records = [bytes.fromhex(h) for h in data["records"]]
    features = {key: spec_of(d) for key, d in data["features"].items()}
    return records, features, data


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_batch_matches_tensorflow(name, path):
    records, features, data = case(name)
    out = parse_example(records, features, var_len_as_sparse=True)
    assert list(out) == list(features)
    golden.same(out, golden.decode(data["batch"]))


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_single_matches_tensorflow(name, path):
    records, features, data = case(name)
    for i, record in enumerate(records):
        out = parse_single_example(record, features, var_len_as_sparse=True)
        golden.same(out, golden.decode(data["single"][i]), f"record {i}")


def test_var_len_keeps_feedline_results_by_default(path):
    records, features, data = case("sparse")
    batch = parse_example(records, features)
    assert isinstance(batch["t"], RaggedValues)
    assert batch["t"].to_list() == [[10, 11, 12], [], [13], [14, 15]]
    assert batch["t"].to_sparse() == golden.decode(data["batch"])["t"]
    single = parse_single_example(records[0], features)
    assert single["t"].tolist() == [10, 11, 12]


def test_ragged_feature_in_a_pipeline_checkpoints(path):
    records, features, _ = case("ragged")
    ds = fl.Dataset.from_tensor_slices(np.array(records * 3, dtype=object)).batch(2).map(
        lambda batch: parse_example(batch, {"r": features["two_partitions"],
                                            "s": features["floats"]}))
    out = list(ds)
    assert isinstance(out[0]["r"], RaggedValues) and out[0]["r"].ragged_rank == 3
    check_checkpointing(ds.shuffle(3, seed=1))


def test_sparse_feature_in_a_pipeline_checkpoints(path):
    records, features, _ = case("sparse")
    ds = fl.Dataset.from_tensor_slices(np.array(records, dtype=object)).map(
        lambda record: parse_single_example(record, {"s": features["two_dims"]}))
    assert [e["s"].values.tolist() for e in ds] == [[2.5, 0.5, 1.5], [-1.0], [], [8.0, 7.0]]
    check_checkpointing(ds.shuffle(2, seed=3))


def test_empty_batch(path):
    out = parse_example([], {"r": RaggedFeature("int64", "v", [
        RaggedFeature.RowSplits("s"), RaggedFeature.UniformRowLength(2)]),
        "s": SparseFeature("i", "x", "float32", 3)})
    assert out["r"].to_list() == [] and out["r"].ragged_rank == 2
    assert out["r"].values.shape == (0, 2)
    assert out["s"].shape == (0, 3) and out["s"].indices.shape == (0, 2)


# ------------------------------------------------------------------------------- damaged input
@pytest.mark.parametrize("partition, values, message", [
    (RaggedFeature.RowSplits("p"), [0, 2, 1], r"RowSplits\('p'\) must start at 0, never "
     r"decrease and end at 3; found \[0, 2, 1\]"),
    (RaggedFeature.RowSplits("p"), [0, 2], "end at 3"),
    (RaggedFeature.RowLengths("p"), [1, 1], r"add up to 3; found \[1, 1\]"),
    (RaggedFeature.RowStarts("p"), [1, 2], "must start at 0"),
    (RaggedFeature.RowLimits("p"), [2, 1], "never decrease and end at 3"),
    (RaggedFeature.ValueRowIds("p"), [0, 1], r"one sorted row id >= 0 per value \(3\)"),
    (RaggedFeature.ValueRowIds("p"), [1, 0, 0], "sorted"),
    (RaggedFeature.UniformRowLength(2), None, "does not divide the 3 values into rows of 2"),
])
def test_partitions_that_do_not_fit_name_the_record(partition, values, message, path):
    good = encode_example({"v": [1, 2, 3], "p": [0, 3] if isinstance(
        partition, RaggedFeature.RowSplits) else [3] if isinstance(
        partition, RaggedFeature.RowLengths | RaggedFeature.RowLimits) else [0]
        if isinstance(partition, RaggedFeature.RowStarts) else [0, 0, 0]})
    features = {"v": RaggedFeature("int64", partitions=[partition])}
    if isinstance(partition, RaggedFeature.UniformRowLength):
        good = encode_example({"v": [1, 2, 3, 4]})
        bad = encode_example({"v": [1, 2, 3]})
    else:
        bad = encode_example({"v": [1, 2, 3], "p": values})
    parse_example([good], features)
    with pytest.raises(ExampleParseError, match=message) as info:
        parse_example([good, bad], features)
    assert info.value.record_index == 1 and info.value.feature == "v"
    assert "record 1 of the batch" in str(info.value)
    with pytest.raises(ExampleParseError, match="in the record"):
        parse_single_example(bad, features)


BIG = (1 << 63) - 1


@pytest.mark.parametrize("partition, values", [
    (RaggedFeature.RowLengths("p"), [BIG, BIG, 5]),  # adds up to 3 modulo 2**64
    (RaggedFeature.RowSplits("p"), [0, BIG, -BIG - 1, -1, 3]),  # steps "up" by wrapping
    (RaggedFeature.RowStarts("p"), [0, BIG, -BIG - 1, -1]),
    (RaggedFeature.RowLimits("p"), [BIG, -BIG - 1, -1, 3]),
])
def test_partitions_whose_int64_arithmetic_wraps_are_refused(partition, values, path):
    # Found by fuzzing: the checks (a sum, steps never negative) ran in wrapping int64
    # arithmetic, so these passed and gave rows out of the values' range (wrong data).
    bad = encode_example({"v": [1, 2, 3], "p": values})
    features = {"v": RaggedFeature("int64", partitions=[partition])}
    with pytest.raises(ExampleParseError, match=r"partition Row") as info:
        parse_example([bad], features)
    assert info.value.record_index == 0 and info.value.feature == "v"
    with pytest.raises(ExampleParseError, match=r"partition Row"):
        parse_single_example(bad, features)


def test_value_row_ids_far_past_the_values_are_refused_not_allocated(path):
    # A 20-byte record whose one row id is 2**40 asked for 2**40 rows (8 TiB of row
    # splits): a MemoryError, or gigabytes for smaller ids.
    features = {"v": RaggedFeature("int64", partitions=[RaggedFeature.ValueRowIds("p")])}
    for row_id in (1 << 40, (1 << 16) + 2):
        bad = encode_example({"v": [1], "p": [row_id]})
        with pytest.raises(ExampleParseError, match="empty rows") as info:
            parse_example([encode_example({"v": [1], "p": [0]}), bad], features)
        assert info.value.record_index == 1 and info.value.feature == "v"
    gaps = encode_example({"v": [1, 2], "p": [0, 1 << 16]})  # 65,535 empty rows: allowed
    assert len(parse_single_example(gaps, features)["v"]) == (1 << 16) + 1


def test_partition_of_the_wrong_type_names_the_key(path):
    record = encode_example({"v": [1, 2], "p": [1.0, 1.0]})
    with pytest.raises(ExampleParseError, match=r"feature 'p'.*expected int64"):
        parse_example([record], {"v": RaggedFeature("int64", partitions=[
            RaggedFeature.RowLengths("p")])})


def test_sparse_index_errors(path):
    features = {"s": SparseFeature(["a", "b"], "x", "float32", [4, 2])}
    ok = encode_example({"a": [1], "b": [1], "x": [1.0]})
    short = encode_example({"a": [1, 2], "b": [1], "x": [1.0, 2.0]})
    with pytest.raises(ExampleParseError, match="index feature 'b' has 1 values, its value "
                       "feature 'x' has 2") as info:
        parse_example([ok, short], features)
    assert info.value.record_index == 1
    outside = encode_example({"a": [4], "b": [0], "x": [1.0]})
    with pytest.raises(ExampleParseError, match=r"index 4 in feature 'a' is outside \[0, 4\)"):
        parse_single_example(outside, features)


def test_key_conflicts_are_refused_as_in_tensorflow():
    with pytest.raises(ValueError, match="conflicting types int64 and float32 for feature key"):
        parse_example([], {"a": RaggedFeature("int64", "v"), "b": RaggedFeature("float32", "v")})
    with pytest.raises(ValueError, match="dense and ragged keys must not intersect"):
        parse_example([], {"v": FixedLenFeature([], "int64"), "r": RaggedFeature("int64", "v")})
    with pytest.raises(ValueError, match="ragged and sparse keys must not intersect"):
        parse_example([], {"v": VarLenFeature("int64"), "r": RaggedFeature("int64", "v")})
    with pytest.raises(ValueError, match="dense and sparse keys"):
        parse_example([], {"i": FixedLenFeature([], "int64"),
                           "s": SparseFeature("i", "x", "int64", 3)})
    # A VarLenFeature may share a SparseFeature's key (same type): both are var-len reads.
    record = encode_example({"i": [2], "x": [7]})
    out = parse_single_example(record, {"x": VarLenFeature("int64"),
                                        "s": SparseFeature("i", "x", "int64", 3)})
    assert out["x"].tolist() == [7] and out["s"].to_dense().tolist() == [0, 0, 7]


def test_spec_validation():
    with pytest.raises(ValueError, match="value_key must be a non-empty str"):
        RaggedFeature("int64", "")
    with pytest.raises(TypeError, match="partitions must be RaggedFeature.RowSplits"):
        RaggedFeature("int64", partitions=[("RowSplits", "s")])
    with pytest.raises(ValueError, match="row_splits_dtype must be int32 or int64"):
        RaggedFeature("int64", row_splits_dtype="float32")
    with pytest.raises(ValueError, match=r"UniformRowLength\(length\) must be >= 1"):
        RaggedFeature.UniformRowLength(0)
    with pytest.raises(ValueError, match="needs a feature key"):
        RaggedFeature.RowSplits("")
    with pytest.raises(ValueError, match="size must be a list exactly when index_key is a list"):
        SparseFeature(["a", "b"], "x", "int64", 3)
    with pytest.raises(ValueError, match="one size per index_key"):
        SparseFeature(["a", "b"], "x", "int64", [3])
    with pytest.raises(ValueError, match="dtype must be int64, float32 or string"):
        SparseFeature("a", "x", "int32", 3)


def test_values_types():
    sparse = SparseValues([[1, 0], [0, 2]], np.array([1.5, 2.5], np.float32), [2, 3])
    assert sparse.to_dense().tolist() == [[0.0, 0.0, 2.5], [1.5, 0.0, 0.0]]
    assert sparse == SparseValues([[1, 0], [0, 2]], [1.5, 2.5], [2, 3])
    with pytest.raises(ValueError, match=r"index \[2, 0\] \(value 0\) is outside"):
        SparseValues([[2, 0]], [1], [2, 3])
    with pytest.raises(ValueError, match=r"indices must have shape \[1, 2\]"):
        SparseValues([[0]], [1], [2, 3])
    # Uniform inner dimensions of a ragged value (a trailing UniformRowLength).
    ragged = RaggedValues(np.arange(6).reshape(3, 2), [0, 2, 2, 3])
    assert ragged.to_padded(-1).tolist() == [[[0, 1], [2, 3]], [[-1, -1], [-1, -1]],
                                             [[4, 5], [-1, -1]]]
    as_sparse = ragged.to_sparse()
    assert as_sparse.dense_shape.tolist() == [3, 2, 2]
    assert (as_sparse.to_dense(-1) == ragged.to_padded(-1)).all()
    assert fl.SparseValues is SparseValues and fl.RaggedFeature is RaggedFeature
