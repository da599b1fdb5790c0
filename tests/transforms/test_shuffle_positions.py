"""shuffle checkpoints its buffer by position: a snapshot of the input and the buffered
items' numbers, read again on restore; by value where the input cannot be read again."""

from __future__ import annotations

import json

import numpy as np
import pytest

import feedline as fl
from feedline.core import pipeline_state
from feedline.core.errors import CheckpointError
from feedline.core.fingerprint import PipelineFingerprint
from feedline.core.iterator import IteratorContext
from feedline.testing import check_checkpointing, fail_at, no_leaked_threads
from feedline.testing.failures import InjectedError
from feedline.transforms import shuffle


def _shuffle_state(state: dict) -> dict:
    node = state["root"]
    while node["type"] != "ShuffleIterator":
        node = node["input"]
    return node


def _saved_after(ds: fl.Dataset, steps: int) -> tuple[list, dict, list]:
    """The elements before a checkpoint after ``steps``, the state (through JSON), and the
    elements the same iterator gives after it."""
    with fl.PipelineIterator(ds) as it:
        before = [np.asarray(next(it)).tolist() for _ in range(steps)]
        state = json.loads(json.dumps(it.state_dict()))
        after = [np.asarray(x).tolist() for x in it]
    return before, state, after


def _restored(ds: fl.Dataset, state: dict) -> list:
    with fl.PipelineIterator(ds) as it:
        it.load_state_dict(state)
        return [np.asarray(x).tolist() for x in it]


def _fixed(ds: fl.Dataset, buffer: int) -> fl.Dataset:
    return ds.shuffle(buffer, seed=3, reshuffle_each_iteration=False)


@pytest.mark.parametrize("steps", [1, 2, 63, 64, 65, 300, 999, 1000])
def test_the_buffer_is_numbers_and_the_restore_is_exact(steps):
    ds = _fixed(fl.Dataset.range(1000).map(lambda x: x * 3), 100)
    before, state, after = _saved_after(ds, steps)
    saved = _shuffle_state(state)
    numbers = saved["positions"]["numbers"]
    assert saved["buffer"] == []
    assert len(numbers) == min(99, 1000 - steps)  # refilled just before the next draw
    # Every buffered element is one read after the snapshot and not yet handed out.
    assert len(set(numbers)) == len(numbers)
    assert all(0 <= n < saved["positions"]["replay"] for n in numbers)
    assert _restored(ds, state) == after
    assert sorted(before + after) == [3 * i for i in range(1000)]


def test_chunked_reads_and_the_c_loops_number_exactly_as_one_by_one():
    # A parallel interleave hands shuffle chunks; the consumer below reads in chunks too.
    ds = _fixed(fl.Dataset.range(4).interleave(
        lambda i: fl.Dataset.range(i * 500, (i + 1) * 500), cycle_length=2,
        num_parallel_calls=2), 300).batch(7)
    for steps in (0, 1, 40, 100, 285, 286):
        _, state, after = _saved_after(ds, steps)
        assert _restored(ds, state) == after, steps


def test_the_python_loops_number_as_the_c_loops(monkeypatch):
    ds = _fixed(fl.Dataset.range(3000), 700).batch(64)
    states = []
    for fast in (shuffle._shuffle_fast, None):
        monkeypatch.setattr(shuffle, "_shuffle_fast", fast)
        _, state, after = _saved_after(ds, 20)
        assert _restored(ds, state) == after
        states.append(_shuffle_state(state)["positions"])
    assert states[0] == states[1]


def test_the_state_is_positions_not_elements():
    # 10,000 buffered elements of 1 KiB each: by value that is over 10 MB of state.
    payload = np.zeros((20_000, 1024), np.uint8)
    ds = fl.Dataset.from_tensor_slices(payload).shuffle(10_000, seed=1)
    with fl.PipelineIterator(ds) as it:
        for _ in range(500):
            next(it)
        size = len(json.dumps(it.state_dict()))
    assert size < 200_000, size


def test_an_input_that_cannot_be_read_again_keeps_the_buffer_by_value():
    unordered = fl.Dataset.range(200).map(lambda x: int(x) + 1, num_parallel_calls=2,
                                          deterministic=False)
    ds = unordered.shuffle(50, seed=1)
    with no_leaked_threads(), fl.PipelineIterator(ds) as it:
        taken = [int(next(it)) for _ in range(10)]
        state = json.loads(json.dumps(it.state_dict()))
        saved = _shuffle_state(state)
        assert saved["positions"] == {"replay": 0, "numbers": []}
        assert len(saved["buffer"]) == 49  # refilled just before the next draw
        with fl.PipelineIterator(ds) as restored:
            restored.load_state_dict(state)
            rest = [int(x) for x in restored]
    assert sorted(taken + rest) == list(range(1, 201))


def test_an_input_too_slow_to_read_again_keeps_the_buffer_by_value(monkeypatch):
    monkeypatch.setattr(shuffle, "MAX_REPLAY_SECONDS", 0.0)
    ds = _fixed(fl.Dataset.range(100), 10)
    _, state, after = _saved_after(ds, 5)
    saved = _shuffle_state(state)
    assert saved["positions"] == {"replay": 0, "numbers": []} and len(saved["buffer"]) == 9
    assert _restored(ds, state) == after


def test_elements_restored_by_value_go_out_before_positions_come_back(monkeypatch):
    ds = _fixed(fl.Dataset.range(2000), 20)
    monkeypatch.setattr(shuffle, "MAX_REPLAY_SECONDS", -1.0)
    _, by_value, _ = _saved_after(ds, 5)
    monkeypatch.undo()
    expected = _restored(ds, by_value)
    kinds = []
    with fl.PipelineIterator(ds) as it:
        it.load_state_dict(by_value)
        got = []
        for _ in range(400):
            got.append(int(next(it)))
            state = json.loads(json.dumps(it.state_dict()))
            kinds.append(bool(_shuffle_state(state)["positions"]["numbers"]))
            if len(got) % 50 == 0:  # every state restores exactly, whichever kind
                assert _restored(ds, state) == expected[len(got):]
    # By value while an element restored by value is buffered, by position once none is.
    assert kinds[0] is False and kinds[-1] is True
    assert kinds == sorted(kinds)


def test_a_version_1_state_restores():
    ds = _fixed(fl.Dataset.range(50), 8)
    _, state, after = _saved_after(ds, 3)
    old = json.loads(json.dumps(state))
    node = _shuffle_state(old)
    # What feedline wrote before positions: version 1, the buffer by value, no positions.
    by_value = shuffle.buffer_by_value(_shuffle_node(ds), node, IteratorContext())
    node.clear()
    node.update({key: value for key, value in by_value.items() if key != "positions"})
    node["version"] = 1
    sealed = pipeline_state.seal(old["root"], PipelineFingerprint.of(ds))
    assert _restored(ds, sealed) == after


def _shuffle_node(ds: fl.Dataset) -> shuffle.ShuffleDataset:
    node = ds
    while not isinstance(node, shuffle.ShuffleDataset):
        node = node._inputs[0]
    return node


def test_input_errors_count_as_items_and_are_not_raised_again():
    # Failures at input positions 3 and 40: each raised once, in its turn, never after a
    # restore (a failing item is never buffered), and every element is delivered once.
    ds = _fixed(fail_at(fl.Dataset.range(100), [3, 40]), 16)
    outcomes = []
    with fl.PipelineIterator(ds) as it:
        while True:
            try:
                outcomes.append(int(next(it)))
            except InjectedError:
                outcomes.append("error")
            except StopIteration:
                break
    for steps in (2, 10, 30, 60):
        with fl.PipelineIterator(ds) as it:
            taken = []
            while len(taken) < steps:
                try:
                    taken.append(int(next(it)))
                except InjectedError:
                    taken.append("error")
            state = json.loads(json.dumps(it.state_dict()))
        with fl.PipelineIterator(ds) as restored:
            restored.load_state_dict(state)
            rest = []
            while True:
                try:
                    rest.append(int(next(restored)))
                except InjectedError:
                    rest.append("error")
                except StopIteration:
                    break
        assert taken + rest == outcomes, steps


@pytest.mark.parametrize("positions, message", [
    ({"replay": 5, "numbers": [1, 1]}, "not distinct"),
    ({"replay": 5, "numbers": [7]}, "not distinct items below 5"),
    ({"replay": 5, "numbers": ["1"]}, "expected"),
    ({"numbers": [1]}, "expected"),
])
def test_damaged_positions_are_refused_naming_the_stage(positions, message):
    ds = _fixed(fl.Dataset.range(50), 8)
    _, state, _ = _saved_after(ds, 3)
    root = json.loads(json.dumps(state["root"]))
    node = root
    while node["type"] != "ShuffleIterator":
        node = node["input"]
    node["positions"] = positions
    forged = pipeline_state.seal(root, PipelineFingerprint.of(ds))
    with fl.PipelineIterator(ds) as it, pytest.raises(CheckpointError, match=message) as error:
        it.load_state_dict(forged)
    assert "ShuffleIterator" in str(error.value) or "shuffle" in str(error.value)


def test_a_shorter_input_on_restore_is_refused():
    _, state, _ = _saved_after(_fixed(fl.Dataset.range(100), 10), 20)
    shorter = _fixed(fl.Dataset.range(15), 10)
    forged = pipeline_state.seal(state["root"], PipelineFingerprint.of(shorter))
    with fl.PipelineIterator(shorter) as it, pytest.raises(CheckpointError, match="ended"):
        it.load_state_dict(forged)


def test_old_snapshots_are_dropped_as_the_buffer_moves_on():
    it = _fixed(fl.Dataset.range(200_000), 100)._make_iterator(IteratorContext())
    most = 0
    try:
        for _ in range(200_000):
            next(it)
            most = max(most, len(it._snapshots))
    finally:
        it.close()
    # A snapshot every 64 reads; the oldest buffered element is rarely more than a few
    # thousand reads old (each draw leaves it in with probability 0.99).
    assert most <= 40, most


@pytest.mark.timeout(120)
def test_every_position_restores_through_parallel_stages():
    ds = (fl.Dataset.range(6)
          .interleave(lambda i: fl.Dataset.range(i * 40, (i + 1) * 40), cycle_length=3,
                      num_parallel_calls=2)
          .map(lambda x: x * 2, num_parallel_calls=2)
          .shuffle(25, seed=5)
          .batch(4)
          .prefetch(2))
    check_checkpointing(ds, steps=[0, 1, 2, 7, 20, 40, 59, 60, 61], epochs=2)
