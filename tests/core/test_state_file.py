"""fl.save_state / fl.load_state: compact binary checkpoints that restore exactly."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

import feedline as fl

# The binary sections hold elements: shuffle buffers are stored by value here.
pytestmark = pytest.mark.usefixtures("shuffle_buffers_by_value")


def _shuffled(n: int, element_bytes: int) -> fl.Dataset:
    payload = np.arange(n * element_bytes, dtype=np.uint8).reshape(n, element_bytes)
    return fl.Dataset.from_tensor_slices((payload, [b"x%d" % i for i in range(n)])).shuffle(
        n, seed=7)


def test_saved_file_restores_exactly(tmp_path):
    ds = _shuffled(64, 100)
    it = iter(ds)
    [next(it) for _ in range(5)]
    path = tmp_path / "it.state"
    fl.save_state(path, it.state_dict())
    loaded = fl.load_state(path)
    assert loaded == json.loads(json.dumps(it.state_dict()))  # the same dict, checksum included
    restored = iter(ds)
    restored.load_state_dict(loaded)
    for (a, b), (c, d) in zip(restored, it, strict=True):
        assert np.array_equal(a, c) and b == d


def test_file_objects_work_too():
    it = iter(fl.Dataset.range(10).shuffle(4, seed=2))
    next(it)
    buffer = io.BytesIO()
    written = fl.save_state(buffer, it.state_dict())
    assert written == len(buffer.getvalue())
    buffer.seek(0)
    assert fl.load_state(buffer) == it.state_dict()


def test_a_shuffle_buffer_costs_at_most_1_1_times_its_payload(tmp_path):
    """Issue target: shuffle(10_000) of 1 KiB elements, saved, <= 1.1x the buffered bytes."""
    n, size = 10_000, 1024
    payload = np.zeros((n + 1, size), np.uint8)
    it = iter(fl.Dataset.from_tensor_slices(payload).shuffle(n, seed=1))
    next(it)  # the buffer now holds n elements
    path = tmp_path / "shuffle.state"
    written = fl.save_state(path, it.state_dict())
    assert written == path.stat().st_size
    assert written <= 1.1 * n * size, written / (n * size)


def test_damage_is_a_checkpoint_error(tmp_path):
    ds = _shuffled(16, 32)
    it = iter(ds)
    next(it)
    path = tmp_path / "it.state"
    fl.save_state(path, it.state_dict())
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    with pytest.raises(fl.CheckpointError, match="outside its binary section"):
        fl.load_state(path)
    flipped = bytearray(data)
    flipped[-5] ^= 0xFF  # a byte of an element payload
    path.write_bytes(bytes(flipped))
    with pytest.raises(fl.CheckpointError, match="checksum"):
        iter(ds).load_state_dict(fl.load_state(path))
    path.write_bytes(b"something else entirely")
    with pytest.raises(fl.CheckpointError, match="not a feedline state file"):
        fl.load_state(path)
    path.write_bytes(data[:30])
    with pytest.raises(fl.CheckpointError, match="truncated"):
        fl.load_state(path)


def test_text_that_looks_like_base64_is_kept_as_text(tmp_path):
    state = {"feedline_iterator": 2, "root": {"b": "ab==", "raw": "abcd", "x": {"b": "QUJD"}}}
    path = tmp_path / "s"
    fl.save_state(path, state)
    assert fl.load_state(path) == state


def test_a_buffer_of_bytes_is_written_raw(tmp_path):
    from feedline.core.state_codec import decode, encode_elements

    records = [bytes([i]) * 1000 for i in range(100)]
    state = {"buffer": encode_elements(records)}
    size = fl.save_state(tmp_path / "state", state)
    assert size < 100_000 * 1.05  # base64 in JSON would be 1.33 times the payload
    loaded = fl.load_state(tmp_path / "state")
    assert loaded == state and decode(loaded["buffer"]) == records


def _state_file(json_text: str) -> io.BytesIO:
    """A state file whose JSON part is ``json_text`` and whose binary section is 4 bytes."""
    from feedline.core.state_file import MAGIC

    data = json_text.encode()
    return io.BytesIO(MAGIC + len(data).to_bytes(8, "little") + data + b"abcd")


@pytest.mark.parametrize("json_text, message", [
    # Was RecursionError from deep inside json.
    ('{"a":' * 100_000 + "1" + "}" * 100_000, "nested deeper than any state"),
    # Were TypeError, IndexError, ValueError, OverflowError.
    ('{"x": {"raw@": 5}}', r"'raw@' must hold a payload reference \[offset, length\] .*found 5"),
    ('{"x": {"b@": [1]}}', r"'b@' must hold a payload reference .*found \[1\]"),
    ('{"x": {"bl@": ["a", 2]}}', "'bl@' must hold a payload reference"),
    ('{"x": {"raw@": [1e400, 2]}}', "'raw@' must hold a payload reference"),
    ('{"x": {"raw@": [-1, 2]}}', "'raw@' must hold a payload reference"),
    ('{"x": {"raw@": [3, 2]}}', r"payload \[3, 2\] lies outside its binary section of 4 bytes"),
])
def test_a_crafted_state_file_is_a_checkpoint_error_naming_it(json_text, message):
    file = _state_file(json_text)
    file.name = "crafted.state"
    with pytest.raises(fl.CheckpointError, match=f"crafted.state: .*{message}"):
        fl.load_state(file)


def test_a_well_formed_reference_still_restores():
    file = _state_file('{"x": {"b@": [1, 2], "n": 3}}')
    assert fl.load_state(file) == {"x": {"b": "YmM=", "n": 3}}
