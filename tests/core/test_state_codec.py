"""state_codec.encode/decode: the encoded form is pinned (saved states must keep loading), the
per-type encoder choice matches the element, and round trips keep values and types."""

import collections
import json

import numpy as np
import pytest

from feedline.core.errors import CheckpointError
from feedline.core.fingerprint import DeclaredTypes
from feedline.core.state_codec import decode, encode, encode_elements, register_state_type

Point = collections.namedtuple("Point", "x y")


class Mapping(dict):
    pass


# What states written before hold for each element (the encoding is part of the format).
PINNED = [
    (None, None),
    (True, True),
    (3, 3),
    (2.5, 2.5),
    ("é", {"u": "é"}),
    (b"\x00\xff", {"b": "AP8="}),
    (np.int64(3), {"n": "<i8", "v": 3}),
    (np.float32(1.5), {"n": "<f4", "v": 1.5}),
    (np.bool_(True), {"n": "|b1", "v": True}),
    (np.bytes_(b"ab"), {"b": "YWI="}),
    (np.str_("xy"), {"A": "<U2", "sh": [], "raw": "eAAAAHkAAAA=", "s": True}),
    (np.arange(4, dtype=np.int16).reshape(2, 2).T,
     {"A": "<i2", "sh": [2, 2], "raw": "AAACAAEAAwA=", "s": False}),
    (np.zeros((0, 3), np.float32), {"A": "<f4", "sh": [0, 3], "raw": "", "s": False}),
    (np.array([b"a", 1], dtype=object), {"oa": [2], "v": [{"b": "YQ=="}, 1], "s": False}),
    ((1, [b"a"]), {"t": [1, {"l": [{"b": "YQ=="}]}]}),
    ({"k": (2,)}, {"d": [[{"u": "k"}, {"t": [2]}]]}),
    (Mapping(a=1), {"d": [[{"u": "a"}, 1]]}),
]


@pytest.mark.parametrize("element,encoded", PINNED)
def test_the_encoded_form_is_that_of_saved_states(element, encoded):
    assert encode(element) == encoded
    assert encode(element) == encoded  # the remembered per-type encoder gives the same


def test_round_trips_keep_values_and_types():
    types = DeclaredTypes()
    types.add(Point)
    elements = [Point(np.int32(1), b"z"), np.arange(10)[::3], np.datetime64("2020-01-02"),
                np.array([("a", 1)], dtype=[("n", "U2"), ("v", "i4")]), [np.float16(2)]]
    for element in elements:
        restored = decode(json.loads(json.dumps(encode(element))), types)
        assert type(restored) is type(element)
        assert repr(restored) == repr(element)


def test_a_structured_array_goes_through_npy():
    element = np.array([("a", 1)], dtype=[("n", "U2"), ("v", "i4")])
    assert set(encode(element)) == {"a", "s"}


@pytest.mark.parametrize("value", [object(), {1, 2}, bytearray(b"x")])
def test_what_cannot_be_stored_is_refused_every_time(value):
    for _ in range(2):
        with pytest.raises(CheckpointError, match="cannot store"):
            encode(value)


def test_a_type_registered_after_a_refusal_is_stored():
    class Late:
        def __init__(self, v):
            self.v = v

        def __feedline_encode__(self):
            return self.v

        @classmethod
        def __feedline_decode__(cls, value):
            return cls(value)

    with pytest.raises(CheckpointError):
        encode(Late(1))
    register_state_type(Late)
    assert decode(encode(Late(2))).v == 2


# ---------------------------------------------------------------------------- encode_elements
@pytest.mark.parametrize("elements", [
    [b"ab", b"", b"c" * 1000], [b"x"], [], [1, b"x"], [np.int64(1)] * 3, [b"a", "s"],
])
def test_a_buffer_round_trips(elements):
    restored = decode(json.loads(json.dumps(encode_elements(elements))))
    assert restored == elements and [type(e) for e in restored] == [type(e) for e in elements]


def test_a_buffer_of_bytes_is_one_payload():
    assert encode_elements([b"ab", b"c"]) == {"bl": "YWJj", "n": [2, 1]}
    assert encode_elements([b"ab", "c"]) == encode([b"ab", "c"])


@pytest.mark.parametrize("lengths", [[2, 2], [4, -1], [1.5, 1.5], "3", [True, 2]])
def test_a_buffer_whose_lengths_do_not_add_up_is_refused(lengths):
    with pytest.raises(CheckpointError, match="damaged element"):
        decode({"bl": "YWJj", "n": lengths})


def test_an_element_nested_past_the_stack_is_a_checkpoint_error():
    value = 1
    for _ in range(100_000):
        value = {"t": [value]}
    with pytest.raises(CheckpointError, match="nested deeper than the interpreter's stack"):
        decode(value)
