"""The C fast path of parse_example (feedline/formats/_example_fast.c) against the protobuf path.

Both paths must give identical results, and identical errors (the C code never raises its own:
it returns None and the protobuf path runs). The tests switch paths by setting
``feedline.formats.example.cbridge.extension`` (None: protobuf only).
"""

import os
import struct
import threading

import numpy as np
import pytest
from golden_spec import GOLDEN_SPEC
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.formats.example import (
    ExampleParseError,
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedValues,
    VarLenFeature,
    cbridge,
    encode_example,
    parse_example,
    parse_single_example,
)

BUILD_DISABLED = os.environ.get("FEEDLINE_PURE_PYTHON", "") not in ("", "0")
NATIVE = cbridge.extension
needs_native = pytest.mark.skipif(
    NATIVE is None and BUILD_DISABLED, reason="FEEDLINE_PURE_PYTHON is set: no C fast path")


def test_extension_is_built_and_used():
    if BUILD_DISABLED:
        pytest.skip("FEEDLINE_PURE_PYTHON is set: the C fast path is disabled on purpose")
    from feedline.formats import _example_fast  # fails if it was not compiled
    assert cbridge.extension is _example_fast


# --------------------------------------------------------------------------------- helpers
class Counting:
    """Wraps the native module, counting calls that returned a result vs. fell back."""

    def __init__(self):
        self.results = 0
        self.fallbacks = 0

    def parse_examples(self, records, plan):
        out = NATIVE.parse_examples(records, plan)
        if out is None:
            self.fallbacks += 1
        else:
            self.results += 1
        return out


def outcome(function, *args):
    try:
        return "ok", function(*args)
    except Exception as error:  # noqa: BLE001 (compared between the paths)
        return "error", error


def run_both(function, *args):
    """(native outcome, pure outcome, Counting) of ``function(*args)``."""
    counting = Counting()
    saved = cbridge.extension
    try:
        cbridge.extension = counting
        native = outcome(function, *args)
        cbridge.extension = None
        pure = outcome(function, *args)
    finally:
        cbridge.extension = saved
    return native, pure, counting


def assert_same_value(a, b):
    if isinstance(b, RaggedValues):
        assert isinstance(a, RaggedValues)
        assert a.ragged_rank == b.ragged_rank
        assert all(x.dtype == y.dtype and np.array_equal(x, y)
                   for x, y in zip(a.nested_row_splits, b.nested_row_splits))
        a, b = a.values, b.values
    if isinstance(b, bytes):
        assert type(a) is bytes and a == b
        return
    assert isinstance(a, np.ndarray | np.generic) and type(a) is type(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    if isinstance(a, np.ndarray):
        assert a.flags.writeable == b.flags.writeable
    if a.dtype == object:
        assert all(type(x) is bytes for x in np.ravel(a))
        assert np.ravel(a).tolist() == np.ravel(b).tolist()
    else:
        np.testing.assert_array_equal(a, b)  # NaN == NaN (see test_nan_payloads)


def assert_same_outcome(native, pure):
    assert native[0] == pure[0], (native, pure)
    if pure[0] == "error":
        a, b = native[1], pure[1]
        assert type(a) is type(b) and str(a) == str(b)
        if isinstance(b, ExampleParseError):
            assert (a.feature, a.record_index, a.expected, a.found) == (
                b.feature, b.record_index, b.expected, b.found)
        return
    a, b = native[1], pure[1]
    assert list(a) == list(b)
    for name in b:
        assert_same_value(a[name], b[name])


def check_both(records, spec, *, native_result=None):
    """Batch and one-record parsing agree; ``native_result``: whether C must (not) decide."""
    native, pure, counting = run_both(parse_example, records, spec)
    assert_same_outcome(native, pure)
    if native_result is not None and NATIVE is not None:
        assert (counting.results == 1) is native_result, (counting.results, counting.fallbacks)
    for record in records[:3]:
        native1, pure1, _ = run_both(parse_single_example, record, spec)
        assert_same_outcome(native1, pure1)
    return native, pure


# ---------------------------------------------------------------------------- golden files


@needs_native
def test_golden_examples_identical_on_both_paths(golden):
    records, expected = golden
    (_, out), _ = check_both(records, GOLDEN_SPEC, native_result=True)
    assert out["id"].tolist() == expected["id"]
    assert out["label"].tolist() == expected["label"]
    np.testing.assert_array_equal(out["weights"], np.array(expected["weights"], np.float32))
    assert out["name"].tolist() == [n.encode() for n in expected["name"]]
    assert out["image"].tolist() == [bytes.fromhex(h) for h in expected["image_hex"]]
    assert out["tokens"].to_list() == expected["tokens_ragged"]
    assert out["tokens"].to_padded(0).tolist() == expected["tokens_dense_padded"]
    # As an object array, and other specs over the same records.
    check_both(np.array(records, dtype=object), GOLDEN_SPEC, native_result=True)
    check_both(tuple(records), GOLDEN_SPEC, native_result=True)
    from_iterator = parse_example(iter(records), GOLDEN_SPEC)  # the protobuf path
    assert_same_outcome(("ok", from_iterator), ("ok", parse_example(records, GOLDEN_SPEC)))
    check_both(records, {
        "weights": VarLenFeature("float32"), "name": VarLenFeature("string"),
        "label": VarLenFeature("int64"), "absent": VarLenFeature("string"),
        "tokens": FixedLenSequenceFeature([], "int64", allow_missing=True, default_value=-7),
        "w2": FixedLenSequenceFeature([2], "float32", allow_missing=True),
        "image": FixedLenFeature([1, 1], "string", default_value=b"?"),
        "none": FixedLenFeature([2], "float32", default_value=[1.5, 2.5]),
    }, native_result=True)
    check_both(records, {}, native_result=True)
    check_both([], GOLDEN_SPEC, native_result=True)


@needs_native
def test_golden_errors_identical_on_both_paths(golden):
    records, _ = golden
    for spec in ({"label": FixedLenFeature([], "int64")},
                 {"weights": FixedLenFeature([4], "int64")},
                 {"weights": FixedLenFeature([3], "float32")},
                 {"tokens": FixedLenFeature([], "int64")},
                 {"weights": FixedLenSequenceFeature([3], "float32", allow_missing=True)},
                 {"id": VarLenFeature("string")}):
        # (C reads a FixedLenSequenceFeature's values; cbridge.py checks their count.)
        sequence = isinstance(spec.get("weights"), FixedLenSequenceFeature)
        native, _ = check_both(records, spec, native_result=None if sequence else False)
        assert native[0] == "error" and isinstance(native[1], ExampleParseError)


# ----------------------------------------------------- hand-made wire bytes, unusual forms
def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(number, payload, wire_type=2):
    head = varint(number << 3 | wire_type)
    return head + (varint(len(payload)) + payload if wire_type == 2 else payload)


def entry(key, feature=None, value_first=False):
    parts = [field(1, key)] if key is not None else []
    if feature is not None:
        parts.insert(0 if value_first else len(parts), field(2, feature))
    return field(1, b"".join(parts))


def ex(*entries, extra=b""):
    return field(1, b"".join(entries)) + extra


def ints(*values, packed=True):
    body = (field(1, b"".join(map(varint, values))) if packed
            else b"".join(field(1, varint(v), 0) for v in values))
    return field(3, body)


def floats(*values, packed=True):
    raw = [struct.pack("<f", v) for v in values]
    return field(2, field(1, b"".join(raw)) if packed else b"".join(field(1, r, 5) for r in raw))


def strings(*values):
    return field(1, b"".join(field(1, v) for v in values))


UNKNOWN = field(9, varint(300), 0) + field(10, b"\x01" * 8, 1) + field(11, b"zz") + field(
    12, b"\x00" * 4, 5)

# Valid records the C parser decides itself (protobuf semantics it reproduces).
HANDLED = {
    "unpacked": ex(entry(b"i", ints(1, -2, packed=False)), entry(b"f", floats(0.5, packed=False))),
    "chunks": ex(entry(b"i", field(3, field(1, varint(1)) + field(1, varint(2), 0)
                                   + field(1, varint(3) + varint(4))))),
    "duplicate_key_last_wins": ex(entry(b"i", ints(1)), entry(b"f", floats(1.0)),
                                  entry(b"i", ints(7, 8))),
    "features_twice": ex(entry(b"i", ints(1))) + ex(entry(b"f", floats(2.0)), entry(b"i", ints(3))),
    "unknown_fields": field(1, entry(b"i", field(3, field(1, varint(4)) + UNKNOWN) + UNKNOWN)
                            + UNKNOWN) + UNKNOWN,
    "value_before_key": ex(entry(b"i", ints(5), value_first=True)),
    "entry_without_value": ex(entry(b"i")),
    "entry_without_key": ex(entry(None, ints(6))),
    "empty_lists": ex(entry(b"i", field(3, b"")), entry(b"f", field(2, b"")),
                      entry(b"s", field(1, b""))),
    "big_varints": ex(entry(b"i", ints(-1, 2**63 - 1, -2**63, 0, packed=False))),
    "overlong_varint": ex(entry(b"i", field(3, field(1, b"\x81\x80\x80\x00")))),
    "utf8_keys": ex(entry("é€😀".encode(), ints(1)), entry(b"i", ints(2))),
    "empty_record": b"",
}
# Valid records the C parser leaves to protobuf (it would have to merge or imitate).
DEFERRED = {
    "oneof_twice_same": ex(entry(b"i", ints(1) + ints(2))),
    "oneof_switch": ex(entry(b"i", floats(1.0) + ints(2))),
    "entry_value_twice": ex(field(1, field(1, b"i") + field(2, ints(1)) + field(2, ints(2)))),
    "entry_unknown_field": ex(field(1, field(1, b"i") + field(2, ints(1)) + field(3, b"x"))),
    "varint_10th_byte": ex(entry(b"i", field(3, field(1, b"\xff" * 9 + b"\x7f")))),
    "unknown_group": ex(entry(b"i", ints(1))) + varint(13 << 3 | 3) + varint(13 << 3 | 4),
    "wire_type_mismatch": ex(entry(b"i", ints(1))) + field(1, varint(5), 0),
}
# Records protobuf rejects.
BROKEN = {
    "truncated": b"\x0a\x05\x01",
    "length_past_end": ex(entry(b"i", ints(1)))[:-1],
    "bad_utf8_key": ex(entry(b"\xff", ints(1))),
    "surrogate_key": ex(entry(b"\xed\xa0\x80", ints(1))),
    "packed_floats_not_4": ex(entry(b"f", field(2, field(1, b"\x00\x00\x80")))),
    "packed_varint_cut": ex(entry(b"i", field(3, field(1, b"\x01\x80")))),
    "varint_11_bytes": ex(entry(b"i", field(3, field(1, b"\xff" * 10 + b"\x01")))),
    "field_zero": b"\x02\x00" + ex(entry(b"i", ints(1))),
    "wire_type_7": ex(entry(b"i", ints(1))) + b"\x0f",
    "bad_unrequested_feature": ex(entry(b"i", ints(1)), entry(b"z", floats()[:2] + b"\x0a\x03")),
}
SPEC = {"i": VarLenFeature("int64"), "f": VarLenFeature("float32"), "s": VarLenFeature("string")}


@needs_native
@pytest.mark.parametrize("name", sorted(HANDLED))
def test_valid_unusual_encodings_parsed_natively(name):
    check_both([HANDLED[name], encode_example({"i": 1})], SPEC, native_result=True)


@needs_native
@pytest.mark.parametrize("name", sorted(DEFERRED))
def test_valid_encodings_left_to_protobuf(name):
    native, _ = check_both([encode_example({"i": 1}), DEFERRED[name]], SPEC, native_result=False)
    assert native[0] == "ok"


@needs_native
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_records_raise_the_protobuf_error(name):
    native, _ = check_both([encode_example({"i": 1}), BROKEN[name]], SPEC, native_result=False)
    assert native[0] == "error" and native[1].record_index == 1


def test_expected_values_of_unusual_encodings():
    out = parse_example([HANDLED["duplicate_key_last_wins"], HANDLED["features_twice"],
                         HANDLED["entry_without_key"], HANDLED["big_varints"]],
                        {"i": VarLenFeature("int64"), "": FixedLenFeature([], "int64", -1)})
    assert out["i"].to_list() == [[7, 8], [3], [], [-1, 2**63 - 1, -2**63, 0]]
    assert out[""].tolist() == [-1, -1, 6, -1]


@needs_native
def test_spec_errors_and_bad_batches_identical():
    records = [encode_example({"p": [1, 2, 3], "q": [0.5]}), encode_example({"p": [4]})]
    for spec in ({"p": FixedLenSequenceFeature([2], "int64", allow_missing=True)},
                 {"q": FixedLenSequenceFeature([0], "float32", allow_missing=True)},
                 {"p": FixedLenFeature([3], "int64")},
                 {"q": FixedLenFeature([1], "float32")},
                 {"q": FixedLenFeature([1], "float32", default_value=[9.0])},
                 {"p": FixedLenFeature([0], "int64")},
                 {"zz": FixedLenFeature([0], "string")},
                 {"\udc80": FixedLenFeature([], "int64", default_value=3)}):
        check_both(records, spec)
    for batch in ([records[0], bytearray(records[1])], [records[0], 5], records[0]):
        check_both(batch, {"p": VarLenFeature("int64")})


@needs_native
def test_nan_payloads():
    # The C path keeps a float's bits as TensorFlow does (NaN payloads included); protobuf's
    # Python floats may quiet a signaling NaN. Both read as NaN.
    raw = ex(entry(b"f", field(2, field(1, bytes.fromhex("0100a07f")))))
    out = parse_example([raw], {"f": FixedLenFeature([], "float32")})["f"]
    assert out.view(np.uint32).tolist() == [0x7FA00001]


# --------------------------------------------------------------------- random Examples
KEYS = ["a", "b", "é", ""]
KINDS = {"int64": st.integers(-2**63, 2**63 - 1),
         "float32": st.floats(width=32, allow_nan=False),
         "string": st.binary(max_size=6)}


@st.composite
def wire_feature(draw):
    kind = draw(st.sampled_from([None, *KINDS]))
    if kind is None:
        return b""
    values = draw(st.lists(KINDS[kind], max_size=4))
    if kind == "string":
        return field(1, _payload(strings(*values)) + (UNKNOWN if draw(st.booleans()) else b""))
    encode = ints if kind == "int64" else floats
    return field(3 if kind == "int64" else 2, _list_body(encode, values, draw))


def _list_body(encode, values, draw):
    """The list message of ``values``, split into packed/unpacked chunks."""
    parts = []
    start = 0
    while start < len(values):
        stop = draw(st.integers(start + 1, len(values)))
        chunk = encode(*values[start:stop], packed=draw(st.booleans()))
        parts.append(_payload(chunk))
        start = stop
    if draw(st.booleans()):
        parts.append(UNKNOWN)
    return b"".join(parts)


def _payload(message_field):
    """The payload of one length-delimited field (tag and length stripped)."""
    p = 1
    while message_field[p] & 0x80:
        p += 1
    return message_field[p + 1:]


@st.composite
def wire_example(draw):
    entries = [entry(draw(st.sampled_from(KEYS)).encode(), draw(wire_feature()),
                     value_first=draw(st.booleans()))
               for _ in range(draw(st.integers(0, 5)))]
    cut = draw(st.integers(0, len(entries)))
    record = ex(*entries[:cut])
    if cut < len(entries) or draw(st.booleans()):
        record += ex(*entries[cut:])  # Features twice: merged
    return record


@st.composite
def feature_spec(draw):
    dtype = draw(st.sampled_from(list(KINDS)))
    shape = draw(st.sampled_from([[], [1], [2], [0], [2, 1]]))
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return VarLenFeature(dtype)
    if choice == 1:
        return FixedLenSequenceFeature(shape, dtype, allow_missing=True)
    default = None
    if draw(st.booleans()):
        value = {"int64": 3, "float32": 0.25, "string": b"d"}[dtype]
        default = np.full(shape, value, dtype=object if dtype == "string" else dtype)
    return FixedLenFeature(shape, dtype, default_value=default)


@needs_native
@given(st.lists(wire_example(), max_size=4),
       st.dictionaries(st.sampled_from(KEYS + ["zz"]), feature_spec(), max_size=3))
@settings(max_examples=150, deadline=None)
def test_random_examples_agree(records, spec):
    check_both(records, spec)


@needs_native
@given(st.lists(st.dictionaries(st.sampled_from(KEYS), st.one_of(
    st.lists(KINDS["int64"], min_size=1, max_size=3),
    st.lists(KINDS["float32"], min_size=1, max_size=3),
    st.lists(KINDS["string"], min_size=1, max_size=3))), max_size=4),
    st.dictionaries(st.sampled_from(KEYS), feature_spec(), max_size=3))
@settings(max_examples=100, deadline=None)
def test_random_encoded_examples_agree(features, spec):
    check_both([encode_example(f) for f in features], spec)


# ------------------------------------------------------------------------------- fuzzing
FUZZ_PLAN = ((b"a", 3, -1, True), (b"b", 1, 1, True), (b"c", 2, 2, False), (b"", 1, -1, True))
FUZZ_SPEC = {"a": VarLenFeature("int64"), "b": FixedLenFeature([1], "string", [b"x"]),
             "c": FixedLenSequenceFeature([], "float32", allow_missing=True)}


@needs_native
@given(st.lists(st.binary(max_size=80), max_size=4))
@settings(max_examples=200, deadline=None)
def test_random_bytes_never_crash_and_agree(records):
    result = NATIVE.parse_examples(records, FUZZ_PLAN)
    assert result is None or len(result) == len(FUZZ_PLAN)
    check_both(records, FUZZ_SPEC)


@needs_native
def test_mutated_records_never_crash_and_agree():
    rng = np.random.default_rng(1)
    base = [encode_example({"a": [1, 300, -5], "b": [b"xyz"], "c": [0.5, 1.5]}),
            HANDLED["unknown_fields"], HANDLED["features_twice"], HANDLED["chunks"]]
    for trial in range(1500):
        record = bytearray(base[trial % len(base)])
        for _ in range(rng.integers(1, 4)):
            choice = rng.integers(0, 4)
            position = int(rng.integers(0, len(record) + 1))
            if choice == 0 and record:
                record[position % len(record)] ^= 1 << int(rng.integers(0, 8))
            elif choice == 1:
                record[position:] = record[position:position + int(rng.integers(0, 8))]
            elif choice == 2:
                record[position:position] = rng.integers(0, 256, int(rng.integers(1, 4)),
                                                         dtype=np.uint8).tobytes()
            elif record:
                record[position % len(record)] = int(rng.integers(0, 256))
        records = [bytes(record)]
        NATIVE.parse_examples(records, FUZZ_PLAN)
        if trial % 3 == 0:
            native, pure, _ = run_both(parse_example, records, FUZZ_SPEC)
            assert_same_outcome(native, pure)


@needs_native
def test_bad_plans_raise():
    with pytest.raises(TypeError):
        NATIVE.parse_examples([b""], ((b"a", 3, -1),))
    with pytest.raises(ValueError, match="bad plan entry"):
        NATIVE.parse_examples([b""], ((b"a", 4, -1, True),))
    with pytest.raises(TypeError):
        NATIVE.parse_examples((b"",), ())
    assert NATIVE.parse_examples([b"", "text"], ()) is None  # protobuf path names the record


# ------------------------------------------------------------------------------ threads
@needs_native
def test_parallel_calls_agree():
    # The GIL is released while walking records: parallel calls must not interfere.
    records = [encode_example({"d": [bytes([i % 256]) * 50], "s": [i], "v": list(range(i % 7))})
               for i in range(300)]
    spec = {"d": FixedLenFeature([], "string"), "s": FixedLenFeature([], "int64"),
            "v": VarLenFeature("int64")}
    expected = parse_example(records, spec)
    failures = []

    def work():
        for _ in range(20):
            out = parse_example(records, spec)
            if not (np.array_equal(out["s"], expected["s"]) and out["v"] == expected["v"]
                    and out["d"].tolist() == expected["d"].tolist()):
                failures.append(out)

    threads = [threading.Thread(target=work, name=f"test-parse-{i}") for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
