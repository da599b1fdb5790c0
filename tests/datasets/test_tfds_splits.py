"""TFDS's split expressions resolved to (split, from, to) exactly as tensorflow-datasets 4.9.10
does (recorded by record_tfds.py), and to the shards and records to read."""

import pytest
from tfds_golden import expected

from feedline.datasets import ReadInstruction
from feedline.datasets.tfds_splits import file_instructions, parse_split

ARITH = expected()["split_arithmetic"]
SIZES = ARITH["sizes"]
PCT1 = [("big", 10, 20), ("big", None, 33), ("big", -5, None), ("big", 0.5, 99.5),
        ("train", 1, 2)]


def _absolute(spec):
    return parse_split(spec).to_absolute(SIZES)


@pytest.mark.parametrize("spec", list(ARITH["specs"]))
def test_split_arithmetic_matches_tfds(spec):
    want = ARITH["specs"][spec]
    if want["error"] is None:
        assert _absolute(spec) == [tuple(x) for x in want["value"]]
    else:
        # TFDS raises ValueError (NotImplementedError for 'all[:5]'); an unknown split is a
        # KeyError here, turned into SplitNotFoundError (a ValueError) by load().
        with pytest.raises((ValueError, KeyError)):
            _absolute(spec)


@pytest.mark.parametrize("index", range(len(PCT1)))
def test_pct1_dropremainder_matches_tfds(index):
    split, from_, to = PCT1[index]
    want = ARITH["pct1"][index]
    instruction = ReadInstruction(split, from_, to, unit="%", rounding="pct1_dropremainder")
    if want["error"] is None:
        assert instruction.to_absolute(SIZES) == [
            (s, int(a), int(b)) for s, a, b in want["value"]]
    else:
        with pytest.raises(ValueError, match="pct1_dropremainder"):
            instruction.to_absolute(SIZES)


def test_closest_rounds_half_to_even():
    # 12.5% of 1001 = 125.125 -> 125; 50% of 7 = 3.5 -> 4; 50% of 103 = 51.5 -> 52.
    assert _absolute("big[12.5%:]") == [("big", 125, 1001)]
    assert _absolute("seven[:50%]") == [("seven", 0, 4)]
    assert _absolute("train[:50%]") == [("train", 0, 52)]
    assert ReadInstruction("seven", 50, None, unit="%").to_absolute(SIZES) == [("seven", 4, 7)]


def test_instructions_add_up():
    inst = ReadInstruction("train", to=10, unit="%") + "test[:2]"
    assert inst.to_absolute(SIZES) == [("train", 0, 10), ("test", 0, 2)]
    assert str(inst) == "train[:10%]+test[:2]"


@pytest.mark.parametrize("spec, message", [
    ("train[1]", "only shards can be selected alone"),
    ("train[10%]", "only shards can be selected alone"),
    ("train[:]", "bad slice"),
    ("train[1.5:]", "needs integers"),
    ("train[a:b]", "bad slice"),
    ("train[", "is not a split"),
    ("", "malformed split ''"),
    ("train++test", "malformed split"),
    ("all[:5]", "'all' cannot be sliced"),
])
def test_malformed_expressions_say_what_was_expected(spec, message):
    with pytest.raises(ValueError, match=message) as error:
        parse_split(spec)
    assert "split" in str(error.value)


def test_bad_instruction_fields():
    with pytest.raises(ValueError, match="Unit should be one of"):
        ReadInstruction("train", unit="pct")
    with pytest.raises(ValueError, match="Rounding should be one of"):
        ReadInstruction("train", rounding="up")
    with pytest.raises(ValueError, match=r"in \[-100, 100\]"):
        ReadInstruction("train", to=101, unit="%")
    with pytest.raises(TypeError, match="split must be a string"):
        parse_split(3)


def test_file_instructions_skip_whole_shards():
    names = ["s0", "s1", "s2", "s3"]
    lengths = [26, 26, 25, 26]
    got = [(i.filename, i.skip, i.take) for i in file_instructions(30, 60, names, lengths)]
    assert got == [("s1", 4, -1), ("s2", 0, 8)]  # s0 and s3 are never opened
    assert [(i.filename, i.skip, i.take) for i in file_instructions(0, 103, names, lengths)] \
        == [(n, 0, -1) for n in names]
    assert file_instructions(5, 5, names, lengths) == []
    assert [i.filename for i in file_instructions(0, 10, ["e", "a"], [0, 20])] == ["a"]
