"""Errors keep their place (tf.data semantics): behind parallel stages, in zip, in checkpoints,
and the iterator goes on after them. Issue 7, "No silent loss, errors in their place"."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline.testing import no_leaked_threads

TIMEOUT = 60


def fail_every_1000th(x):
    if int(x) % 1000 == 999:
        raise ValueError(f"bad record {int(x)}")
    return x


def fail_at(bad: int, error: type[Exception] = ValueError):
    def fn(x):
        if int(x) == bad:
            raise error(f"element {bad} is bad")
        return x
    return fn


def drain(iterator) -> list:
    """Every outcome of ``iterator``: ints, and ``("error", type name)`` for each failure."""
    outcomes: list = []
    while True:
        try:
            outcomes.append(int(next(iterator)))
        except StopIteration:
            return outcomes
        except Exception as error:  # noqa: BLE001 - recorded in its place
            outcomes.append(("error", type(error).__name__))


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("deterministic", [True, None])
def test_parallel_map_drops_only_the_failed_elements(deterministic):
    # tf.data: 9,990 (the 10 failed elements); before the fix: 9,590 (whole chunks lost).
    with no_leaked_threads():
        ds = (fl.Dataset.range(10_000).map(fail_every_1000th)
              .map(lambda x: x + 1, num_parallel_calls=2, deterministic=deterministic)
              .ignore_errors())
        out = sorted(int(x) for x in ds)
    assert out == [x + 1 for x in range(10_000) if x % 1000 != 999]


@pytest.mark.timeout(TIMEOUT)
def test_parallel_map_raises_the_input_error_after_the_elements_before_it():
    with no_leaked_threads(), iter(fl.Dataset.range(8).map(fail_at(3))
                                   .map(lambda x: x * 10, num_parallel_calls=4)) as it:
        assert drain(it) == [0, 10, 20, ("error", "ValueError"), 40, 50, 60, 70]


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("num_parallel_calls", [None, 2])
def test_batch_drops_the_batch_being_built_and_goes_on(num_parallel_calls):
    # tf.data's batch: the failure replaces the batch it interrupted; the next batch starts
    # after the failed element.
    with no_leaked_threads(), iter(fl.Dataset.range(50).map(fail_at(25))
                                   .batch(10, num_parallel_calls=num_parallel_calls)) as it:
        firsts = []
        while True:
            try:
                batch = next(it)
            except StopIteration:
                break
            except ValueError:
                firsts.append("error")
                continue
            firsts.append(batch.tolist())
    assert firsts == [list(range(10)), list(range(10, 20)), "error", list(range(26, 36)),
                      list(range(36, 46)), list(range(46, 50))]


def test_zip_drops_exactly_the_failed_pair_and_stays_aligned():
    left = fl.Dataset.range(6).map(fail_at(2))
    right = fl.Dataset.range(6).map(lambda x: x * 100)
    pairs = [(int(a), int(b)) for a, b in fl.Dataset.zip((left, right)).ignore_errors()]
    assert pairs == [(0, 0), (1, 100), (3, 300), (4, 400), (5, 500)]
    # The failing input second: the first input is not advanced twice either.
    pairs = [(int(a), int(b)) for a, b in fl.Dataset.zip((right, left)).ignore_errors()]
    assert pairs == [(0, 0), (100, 1), (300, 3), (400, 4), (500, 5)]


def test_zip_raises_an_error_at_the_position_where_another_input_ends():
    short = fl.Dataset.range(2)
    failing = fl.Dataset.range(5).map(fail_at(2))
    with iter(fl.Dataset.zip((failing, short))) as it:
        assert [tuple(map(int, next(it))) for _ in range(2)] == [(0, 0), (1, 1)]
        with pytest.raises(ValueError):
            next(it)
        with pytest.raises(StopIteration):
            next(it)


def raise_stop_iteration_at_2(x):
    if int(x) == 2:
        raise StopIteration
    return x


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("build, stage", [
    (lambda ds: ds.map(raise_stop_iteration_at_2), "map(raise_stop_iteration_at_2)"),
    (lambda ds: ds.map(raise_stop_iteration_at_2, num_parallel_calls=2),
     "map(raise_stop_iteration_at_2)"),
    (lambda ds: ds.filter(lambda x: raise_stop_iteration_at_2(x) >= 0), "filter("),
    (lambda ds: ds.flat_map(lambda x: fl.Dataset.from_tensors(raise_stop_iteration_at_2(x))),
     "flat_map("),
    (lambda ds: ds.scan(0, lambda s, x: (s, raise_stop_iteration_at_2(x))), "scan("),
])
def test_stop_iteration_in_a_user_function_is_an_error_not_the_end(build, stage):
    with no_leaked_threads(), iter(build(fl.Dataset.range(5))) as it:
        assert [int(next(it)) for _ in range(2)] == [0, 1]
        with pytest.raises(fl.StopIterationError) as info:
            next(it)
        assert str(info.value).startswith(stage) and "input element 2" in str(info.value)
        assert isinstance(info.value.__cause__, StopIteration)
        # Preserved cardinality: the rest of the data still comes.
        assert [int(x) for x in it] == [3, 4]


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("build", [
    lambda ds: ds.map(fail_at(2)),
    lambda ds: ds.map(fail_at(2), num_parallel_calls=2),
    lambda ds: ds.map(fail_at(2)).prefetch(2),
    lambda ds: ds.map(fail_at(2)).batch(1, num_parallel_calls=2).unbatch(),
    lambda ds: ds.interleave(lambda x: fl.Dataset.from_tensors(x).map(fail_at(2)),
                             cycle_length=2, num_parallel_calls=2),
], ids=["map", "parallel-map", "prefetch", "parallel-batch", "parallel-interleave"])
def test_the_iterator_goes_on_after_an_error(build):
    with no_leaked_threads(), iter(build(fl.Dataset.range(6))) as it:
        assert drain(it) == [0, 1, ("error", "ValueError"), 3, 4, 5]


def test_the_iterator_goes_on_after_a_corrupt_record(tmp_path):
    # As TensorFlow's TFRecordDataset: a damaged file raises DataLossError after its good
    # records, and the next call goes on with the next file.
    paths = [str(tmp_path / name) for name in ("a.tfrecord", "b.tfrecord")]
    for path, records in zip(paths, [(b"a0", b"a1", b"a2"), (b"b0", b"b1")], strict=True):
        with fl.TFRecordWriter(path) as writer:
            for record in records:
                writer.write(record)
    data = bytearray(Path(paths[0]).read_bytes())
    record_size = 12 + 2 + 4
    data[record_size + 12] ^= 0xFF  # the payload of a1
    Path(paths[0]).write_bytes(bytes(data))
    with iter(fl.TFRecordDataset(paths)) as it:
        assert next(it) == b"a0"
        with pytest.raises(fl.DataLossError, match=r"a\.tfrecord"):
            next(it)
        assert list(it) == [b"b0", b"b1"]


@pytest.mark.timeout(TIMEOUT)
def test_prefetch_checkpoint_keeps_a_buffered_error_in_its_place():
    reached_5 = threading.Event()

    def fail_at_3_and_signal_5(x):
        if int(x) == 5:
            reached_5.set()
        if int(x) == 3:
            raise KeyError("element 3 is bad")
        return x

    def build():
        return fl.Dataset.range(8).map(fail_at_3_and_signal_5).prefetch(6)

    with no_leaked_threads(), iter(build()) as it:
        assert int(next(it)) == 0
        # The thread has run past element 3: its error sits in the buffer.
        assert reached_5.wait(TIMEOUT)
        state = json.loads(json.dumps(it.state_dict()))
    with no_leaked_threads(), iter(build()) as restored:
        restored.load_state_dict(state)
        assert drain(restored) == [1, 2, ("error", "RestoredKeyError"), 4, 5, 6, 7]
    with no_leaked_threads(), iter(build()) as restored:
        restored.load_state_dict(state)
        assert [int(next(restored)) for _ in range(2)] == [1, 2]
        with pytest.raises(KeyError, match="element 3 is bad") as info:
            next(restored)
        assert isinstance(info.value, fl.RestoredError)
        assert any("raised originally as builtins.KeyError" in n for n in info.value.__notes__)
        assert [int(x) for x in restored] == [4, 5, 6, 7]


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("build", [
    lambda: fl.Dataset.range(8).map(fail_at(3)).map(lambda x: x, num_parallel_calls=3),
    lambda: fl.Dataset.range(8).map(fail_at(3)).batch(1, num_parallel_calls=6).unbatch(),
], ids=["parallel-map", "parallel-batch"])
def test_parallel_stage_checkpoint_keeps_an_input_error_in_its_place(build):
    with no_leaked_threads(), iter(build()) as it:
        assert int(next(it)) == 0
        state = json.loads(json.dumps(it.state_dict()))
    with no_leaked_threads(), iter(build()) as restored:
        restored.load_state_dict(state)
        assert drain(restored) == [1, 2, ("error", "RestoredValueError"), 4, 5, 6, 7]
    # ignore_errors() skips a restored error like the original.
    with iter(build().ignore_errors()) as it:
        next(it)
        state = it.state_dict()
    with iter(build().ignore_errors()) as restored:
        restored.load_state_dict(state)
        assert [int(x) for x in restored] == [1, 2, 4, 5, 6, 7]


def test_a_state_naming_an_arbitrary_error_type_builds_nothing_else():
    with iter(fl.Dataset.range(8).map(fail_at(3)).prefetch(6)) as it:
        next(it)
        state = it.state_dict()
    hostile = json.loads(json.dumps(state).replace("builtins.ValueError", "os.system"))
    # The checksum covers the state: an edited record is refused before anything is built.
    with iter(fl.Dataset.range(8).map(fail_at(3)).prefetch(6)) as restored, \
            pytest.raises(fl.CheckpointError):
        restored.load_state_dict(hostile)


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("build", [
    lambda: fl.Dataset.range(20_000).map(lambda x: x, num_parallel_calls=2).prefetch(4),
    lambda: fl.Dataset.range(20_000).batch(7, num_parallel_calls=2).unbatch(),
    lambda: fl.Dataset.range(40).interleave(
        lambda x: fl.Dataset.range(500).map(lambda y: x * 500 + y), cycle_length=4,
        num_parallel_calls=2),
], ids=["map-prefetch", "parallel-batch", "parallel-interleave"])
def test_two_threads_draining_one_iterator_get_every_element_once(build):
    results: list[list[int]] = [[], []]
    with no_leaked_threads(), iter(build()) as it:
        def consume(out: list[int]) -> None:
            for element in it:
                out.append(int(element))

        threads = [threading.Thread(target=consume, args=(out,)) for out in results]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT)
        assert not any(thread.is_alive() for thread in threads)
    assert sorted(results[0] + results[1]) == list(range(20_000))


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("parallel", [None, 2])
def test_close_from_another_thread_ends_a_blocked_next_with_stop_iteration(parallel):
    release = threading.Event()

    def wait_for_release(x):
        if int(x) >= 2:
            release.wait(TIMEOUT)
        return x

    outcome: list[object] = []
    with no_leaked_threads():
        it = iter(fl.Dataset.range(10).map(wait_for_release, num_parallel_calls=parallel)
                  .prefetch(1))
        assert [int(next(it)) for _ in range(2)] == [0, 1]

        def consume() -> None:
            try:
                outcome.append(next(it))
            except BaseException as error:  # noqa: BLE001 - recorded for the assertion
                outcome.append(type(error).__name__)

        consumer = threading.Thread(target=consume)
        consumer.start()
        consumer.join(0.2)  # the consumer now waits in next()
        closer = threading.Thread(target=it.close)
        closer.start()
        consumer.join(TIMEOUT)
        release.set()  # the user function blocked in a thread returns; close() then ends
        closer.join(TIMEOUT)
        assert not consumer.is_alive() and not closer.is_alive()
    assert outcome == ["StopIteration"]
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize("result, shown", [
    (None, r"None \(NoneType\)"),
    (object(), "a value of type object"),
    (int, "the class int"),
    ({"a": [1, None]}, r"a list at \['a'\] holding None"),
])
@pytest.mark.parametrize("parallel", [None, 2])
def test_a_function_returning_no_element_is_a_type_error_naming_the_stage(result, shown,
                                                                          parallel):
    def bad(x):
        return result

    with iter(fl.Dataset.range(3).map(bad, num_parallel_calls=parallel)) as it, \
            pytest.raises(TypeError, match=shown) as info:
        next(it)
    assert any("map(test_a_function_returning_no_element_is_a_type_error_naming_the_stage"
               ".<locals>.bad) at input element 0" in note for note in info.value.__notes__)


def test_str_from_user_functions_and_padding_values_becomes_bytes():
    batch = next(iter(fl.Dataset.range(3).map(lambda x: ("ab", b"cd")[int(x) % 2]).batch(3)))
    assert batch.dtype == object and batch.tolist() == [b"ab", b"cd", b"ab"]
    record = next(iter(fl.Dataset.range(1).map(lambda x: {"name": "é", "tags": ["a", "b"]})))
    assert record["name"] == "é".encode() and record["tags"].tolist() == [b"a", b"b"]
    padded = next(iter(fl.Dataset.range(1, 3).map(lambda n: np.array(["w"] * int(n)))
                       .padded_batch(2, padding_values="<pad>")))
    assert padded.tolist() == [[b"w", b"<pad>"], [b"w", b"w"]]


def test_lists_from_user_functions_and_scan_states_become_arrays():
    # tf.data's own example: the returned list is a tuple; the nested list is one tensor.
    out = next(iter(fl.Dataset.from_tensors(np.array([1, 2, 3]))
                    .map(lambda a: ([a[1], a[0] + a[2]], a[1]))))
    assert type(out) is tuple and isinstance(out[0], np.ndarray)
    assert out[0].tolist() == [2, 4] and int(out[1]) == 2
    # [0, 0] is an int32 state (tf.data), so the elements are int32 too.
    states = fl.Dataset.from_tensor_slices([0, 1, 2]).scan(
        [0, 0], lambda s, x: ([s[0] + x, s[1] - x], s))
    out = list(states)
    assert all(isinstance(s, np.ndarray) for s in out)
    assert [s.tolist() for s in out] == [[0, 0], [0, 0], [1, -1]]
