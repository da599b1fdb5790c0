"""The tf.train.Example wire schema: example.proto and the runtime descriptors agree, the bytes
are TensorFlow's, and the encode/decode helpers round-trip."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.formats import example_proto
from feedline.formats.example_proto import (
    Example,
    SequenceExample,
    decode_example,
    decode_sequence_example,
    encode_example,
    encode_sequence_example,
)
from feedline.formats.tfrecord import TFRecordDataset

PROTO = Path(example_proto.__file__).with_name("example.proto")


def proto_fields() -> dict[str, list[tuple[str, str, str, int]]]:
    """(label-or-map, type, name, number) of every field, read from example.proto's text."""
    messages: dict[str, list[tuple[str, str, str, int]]] = {}
    current = None
    for line in PROTO.read_text().splitlines():
        line = line.split("//")[0].strip()
        if match := re.fullmatch(r"message (\w+) \{", line):
            current = messages.setdefault(match.group(1), [])
        elif match := re.fullmatch(r"map<(\w+), (\w+)> (\w+) = (\d+);", line):
            current.append(("map", f"{match.group(1)}->{match.group(2)}", match.group(3),
                            int(match.group(4))))
        elif match := re.fullmatch(r"(repeated )?(\w+) (\w+) = (\d+)( \[packed = true\])?;",
                                   line):
            current.append(("repeated" if match.group(1) else "optional", match.group(2),
                            match.group(3), int(match.group(4))))
    return messages


def descriptor_fields() -> dict[str, list[tuple[str, str, str, int]]]:
    out = {}
    for name, fields in example_proto.SCHEMA.items():
        rows = []
        for field, number, label, kind, type_name, _ in fields:
            if label == "map":
                rows.append(("map", f"{kind}->{type_name}", field, number))
            else:
                rows.append((label, type_name if kind == "message" else kind, field, number))
        out[name] = rows
    return out


def test_proto_file_and_runtime_descriptors_agree():
    assert len(proto_fields()) == 11
    assert proto_fields() == descriptor_fields()


def test_descriptors_are_proto3_with_packed_numbers_in_feedlines_package():
    descriptor = Example.DESCRIPTOR
    assert descriptor.full_name == "feedline.example.Example"
    float_value = example_proto.FloatList.DESCRIPTOR.fields_by_name["value"]
    int_value = example_proto.Int64List.DESCRIPTOR.fields_by_name["value"]
    assert float_value.is_packed and int_value.is_packed
    assert [f.name for f in example_proto.Feature.DESCRIPTOR.oneofs_by_name["kind"].fields] == [
        "bytes_list", "float_list", "int64_list"]


def test_bytes_are_tensorflows_wire_format():
    # Example{features{feature{key:"a" value{int64_list{value:[1, 2]}}}}} spelled by hand from
    # TensorFlow's field numbers: packed int64 values, map entries key=1 value=2.
    int64_list = b"\x0a\x02\x01\x02"                        # Int64List.value, packed
    feature = b"\x1a" + bytes([len(int64_list)]) + int64_list  # Feature.int64_list = 3
    entry = b"\x0a\x01a" + b"\x12" + bytes([len(feature)]) + feature
    features = b"\x0a" + bytes([len(entry)]) + entry       # Features.feature = 1
    example = b"\x0a" + bytes([len(features)]) + features  # Example.features = 1
    assert encode_example({"a": [1, 2]}) == example
    floats = encode_example({"f": np.array([1.5], np.float32)})
    assert b"\x12\x06\x0a\x04\x00\x00\xc0\x3f" in floats  # float_list = 2, packed float32 1.5
    assert b"\x0a\x05\x0a\x03xyz" in encode_example({"b": "xyz"})  # bytes_list = 1


def test_unpacked_numbers_from_other_writers_decode():
    # Proto2-era writers may emit unpacked repeated int64 (one tag per value).
    int64_list = b"\x08\x07\x08\x09"
    feature = b"\x1a" + bytes([len(int64_list)]) + int64_list
    entry = b"\x0a\x01a\x12" + bytes([len(feature)]) + feature
    features = b"\x0a" + bytes([len(entry)]) + entry
    assert decode_example(b"\x0a" + bytes([len(features)]) + features)["a"].tolist() == [7, 9]


def test_golden_examples_decode(golden_dir):
    records = list(TFRecordDataset(str(golden_dir / "examples.tfrecord")))
    assert len(records) == 20
    first = decode_example(records[1])
    assert first["id"].tolist() == [1] and first["name"].tolist() == [b"item-1"]
    assert first["tokens"].dtype == np.int64 and first["weights"].dtype == np.float32
    assert "label" not in decode_example(records[0])
    (sequence,) = TFRecordDataset(str(golden_dir / "sequence_examples.tfrecord"))
    context, lists = decode_sequence_example(sequence)
    assert context["len"].tolist() == [3]
    assert [step.tolist() for step in lists["frames"]] == [[0.0, 0.5], [1.0, 1.5], [2.0, 2.5]]


def test_encode_decode_round_trip():
    values = {
        "int": 3, "ints": [1, -2, 2**62], "bool": True, "uint8": np.arange(4, dtype=np.uint8),
        "float": 0.5, "floats": np.array([[1.0, 2.5]]), "bytes": b"\x00\xff", "str": "héllo",
        "strs": ["a", b"b"], "str_array": np.array(["x", "yz"]), "empty": [],
        "typed_empty": np.zeros(0, np.int64),
    }
    decoded = decode_example(encode_example(values))
    assert decoded["int"].tolist() == [3] and decoded["ints"].tolist() == [1, -2, 2**62]
    assert decoded["bool"].tolist() == [1] and decoded["uint8"].tolist() == [0, 1, 2, 3]
    assert decoded["float"].tolist() == [0.5] and decoded["floats"].tolist() == [1.0, 2.5]
    assert decoded["bytes"].tolist() == [b"\x00\xff"]
    assert decoded["str"].tolist() == ["héllo".encode()]
    assert decoded["strs"].tolist() == [b"a", b"b"] and decoded["str_array"].tolist() == [
        b"x", b"yz"]
    assert decoded["empty"].size == 0 and decoded["typed_empty"].dtype == np.int64
    assert Example.FromString(encode_example({"e": []})).features.feature["e"].WhichOneof(
        "kind") is None


def test_sequence_round_trip():
    data = encode_sequence_example({"n": 2}, {"w": [[b"a"], [b"b", b"c"]], "x": [[1], []]})
    message = SequenceExample.FromString(data)
    assert len(message.feature_lists.feature_list["w"].feature) == 2
    context, lists = decode_sequence_example(data)
    assert context["n"].tolist() == [2]
    assert [s.tolist() for s in lists["w"]] == [[b"a"], [b"b", b"c"]]


def test_encode_errors():
    with pytest.raises(ValueError, match="does not fit in int64"):
        encode_example({"u": np.array([2**63], dtype=np.uint64)})
    with pytest.raises(TypeError, match="cannot store values of dtype complex128"):
        encode_example({"c": np.array([1j])})


# Feature values written by the determinism tests (plain Python values: their repr rebuilds them).
_DETERMINISM_FEATURES = {
    "id": 7, "label": [1, -2], "weights": [0.5, 1.5, -3.25], "name": "item-7",
    "image": b"\x00\x01\xfe\xff", "tokens": [], "zeta": ["z", b"y"], "alpha": [True, False],
    "mu": 2.0, "nu": b"",
}
_DETERMINISM_SCRIPT = f"""
import json
from feedline.formats.example_proto import encode_example, encode_sequence_example
base = {_DETERMINISM_FEATURES!r}
# A set of str iterates in an order that follows PYTHONHASHSEED, so the dicts do too.
features = {{name: base[name] for name in set(base)}}
lists = {{name: [value, value] for name, value in features.items()}}
print(json.dumps({{"order": list(features),
                  "example": encode_example(features).hex(),
                  "sequence": encode_sequence_example(features, lists).hex()}}))
"""


def _encode_in_process_with_hash_seed(seed: int) -> dict:
    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    result = subprocess.run([sys.executable, "-c", _DETERMINISM_SCRIPT], env=env,
                            capture_output=True, text=True, check=True, timeout=60)
    return json.loads(result.stdout)


@pytest.mark.slow
def test_encoding_is_the_same_under_every_hash_seed():
    runs = [_encode_in_process_with_hash_seed(seed) for seed in range(6)]
    # The input dicts really come in different orders, so the test can tell.
    assert len({tuple(run["order"]) for run in runs}) > 1
    examples = {run["example"] for run in runs}
    sequences = {run["sequence"] for run in runs}
    assert len(examples) == 1 and len(sequences) == 1
    example = bytes.fromhex(examples.pop())
    sequence = bytes.fromhex(sequences.pop())
    # The same bytes as in this process, from the dict in its written order.
    lists = {name: [value, value] for name, value in _DETERMINISM_FEATURES.items()}
    assert example == encode_example(_DETERMINISM_FEATURES)
    assert sequence == encode_sequence_example(_DETERMINISM_FEATURES, lists)
    # Features on the wire sorted by name: protobuf's own deterministic form of the message.
    message = Example.FromString(example)
    assert example == message.SerializeToString(deterministic=True)
    names = sorted(_DETERMINISM_FEATURES)
    offsets = [example.index(b"\n" + bytes([len(name)]) + name.encode()) for name in names]
    assert offsets == sorted(offsets)
    # ... and the values are the ones given.
    decoded = decode_example(example)
    assert sorted(decoded) == names
    assert {name: values.tolist() for name, values in decoded.items()} == {
        "alpha": [1, 0], "id": [7], "image": [b"\x00\x01\xfe\xff"], "label": [1, -2],
        "mu": [2.0], "name": [b"item-7"], "nu": [b""], "tokens": [],
        "weights": [0.5, 1.5, -3.25], "zeta": [b"z", b"y"]}
    assert decoded["weights"].dtype == np.float32 and decoded["id"].dtype == np.int64
    context, steps = decode_sequence_example(sequence)
    assert {name: values.tolist() for name, values in context.items()} == {
        name: values.tolist() for name, values in decoded.items()}
    assert {name: [step.tolist() for step in values] for name, values in steps.items()} == {
        name: [values.tolist()] * 2 for name, values in decoded.items()}


def test_encoding_golden_examples_gives_their_sorted_serialization(golden_dir):
    # TensorFlow wrote the features in its hash order; re-encoding what they hold gives the
    # same message, serialized with the features sorted by name.
    records = list(TFRecordDataset(str(golden_dir / "examples.tfrecord")))
    expected = json.loads((golden_dir / "examples.expected.json").read_text())
    for i, record in enumerate(records):
        message = Example.FromString(record)
        encoded = encode_example(decode_example(record))
        assert Example.FromString(encoded) == message
        assert encoded == message.SerializeToString(deterministic=True)
        decoded = decode_example(encoded)
        assert decoded["id"].tolist() == [expected["id"][i]]
        assert decoded["name"].tolist() == [expected["name"][i].encode()]


def test_sets_of_values_are_refused():
    with pytest.raises(TypeError, match="feature 'tags': a set has no order"):
        encode_example({"tags": {b"a", b"b"}})
    with pytest.raises(TypeError, match="feature list 'w': a set has no order"):
        encode_sequence_example({}, {"w": frozenset({(1,), (2,)})})


def test_decode_errors():
    with pytest.raises(ValueError, match="not a valid serialized tf.train.Example"):
        decode_example(b"\xff\xff\xff")
    with pytest.raises(TypeError, match="must be bytes"):
        decode_example("text")


@given(st.binary(max_size=200))
@settings(max_examples=150, deadline=None)
def test_random_bytes_decode_or_raise_value_error(data):
    for decode in (decode_example, decode_sequence_example):
        try:
            decode(data)
        except ValueError as error:
            assert "not a valid serialized" in str(error)
