import json
import math
import random
import threading
import time

import pytest

import feedline as fl
from feedline.core.constants import INFINITE, UNKNOWN
from feedline.core.errors import CheckpointError
from feedline.core.iterator import IteratorContext
from feedline.testing import check_checkpointing, feedline_threads, no_leaked_threads
from feedline.transforms.interleave import resolve_cycle_length, schedulable_cpus

MODES = [
    pytest.param(None, None, id="sequential"),
    pytest.param(2, None, id="parallel"),
    pytest.param(fl.AUTOTUNE, True, id="parallel-autotune"),
]


def ints(ds):
    return [int(x) for x in ds]


def reference(lists, cycle_length, block_length):
    """tf.data's reference order (python/data/kernel_tests/interleave_test.py), restated."""
    pending = [iter(items) for items in lists]
    slots = [pending.pop(0) if pending else None for _ in range(cycle_length)]
    out = []
    while any(s is not None for s in slots) or pending:
        for i in range(cycle_length):
            if slots[i] is None:
                if not pending:
                    continue
                slots[i] = pending.pop(0)
            for _ in range(block_length):
                try:
                    out.append(next(slots[i]))
                except StopIteration:
                    slots[i] = None
                    break
    return out


def sized(sizes, cycle_length, block_length, num_parallel_calls=None, deterministic=None):
    """Input element i opens a dataset of sizes[i] elements 100*i, 100*i+1, ..."""
    return fl.Dataset.from_tensor_slices(sizes).enumerate().interleave(
        lambda i, n: fl.Dataset.range(n).map(lambda j: 100 * i + j),
        cycle_length=cycle_length, block_length=block_length,
        num_parallel_calls=num_parallel_calls, deterministic=deterministic)


def expected_for(sizes, cycle_length, block_length):
    return reference([[100 * i + j for j in range(n)] for i, n in enumerate(sizes)],
                     cycle_length, block_length)


def run_collecting_errors(ds, limit=1000):
    """Elements and errors (as their type name) in order, continuing past errors."""
    it = ds._make_iterator(IteratorContext())
    out = []
    try:
        while len(out) < limit:
            try:
                out.append(int(next(it)))
            except StopIteration:
                break
            except Exception as error:  # noqa: BLE001
                out.append(type(error).__name__)
    finally:
        it.close()
    return out


# ---------------------------------------------------------------- documented order
@pytest.mark.parametrize("parallel, deterministic", MODES)
def test_tf_docstring_example(parallel, deterministic):
    ds = fl.Dataset.range(1, 6).interleave(
        lambda x: fl.Dataset.from_tensors(x).repeat(6), cycle_length=2, block_length=4,
        num_parallel_calls=parallel, deterministic=deterministic)
    assert ints(ds) == [1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2,
                        3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5]


@pytest.mark.parametrize("parallel, deterministic", MODES)
def test_feedline_docstring_example(parallel, deterministic):
    ds = fl.Dataset.range(1, 4).interleave(
        lambda x: fl.Dataset.from_tensors(x).repeat(3), cycle_length=2, block_length=2,
        num_parallel_calls=parallel, deterministic=deterministic)
    assert ints(ds) == [1, 1, 2, 2, 1, 2, 3, 3, 3]


def test_exhausted_slot_is_refilled_in_place():
    # Input 0 ends (found when its slot is next visited: the cycle moves on to 101); input 2
    # then takes slot 0, so its elements come before input 1's next ones.
    sizes = [1, 3, 2]
    for parallel in (None, 3):
        assert ints(sized(sizes, 2, 1, parallel)) == [0, 100, 101, 200, 102, 201]


@pytest.mark.parametrize("parallel", [None, 3])
def test_random_shapes_match_tf_reference(parallel):
    rng = random.Random(1234)
    for _ in range(40):
        sizes = [rng.randint(0, 5) for _ in range(rng.randint(1, 9))]
        cycle, block = rng.randint(1, 5), rng.randint(1, 4)
        assert ints(sized(sizes, cycle, block, parallel)) == expected_for(sizes, cycle, block), \
            (sizes, cycle, block)


def test_long_parallel_run_matches_sequential():
    sizes = [(7 * i) % 23 + 1 for i in range(40)]
    seq = ints(sized(sizes, 6, 3))
    assert seq == expected_for(sizes, 6, 3)
    assert ints(sized(sizes, 6, 3, num_parallel_calls=4)) == seq
    assert sorted(ints(sized(sizes, 6, 3, 4, deterministic=False))) == sorted(seq)


def test_nested_parallel_interleave():
    def inner(x):
        return fl.Dataset.range(3).interleave(
            lambda y: fl.Dataset.from_tensors(10 * x + y).repeat(2), cycle_length=2,
            num_parallel_calls=2)

    par = fl.Dataset.range(4).interleave(inner, cycle_length=2, num_parallel_calls=2)
    seq = fl.Dataset.range(4).interleave(
        lambda x: fl.Dataset.range(3).interleave(
            lambda y: fl.Dataset.from_tensors(10 * x + y).repeat(2), cycle_length=2),
        cycle_length=2)
    assert ints(par) == ints(seq)


def test_empty_input_and_empty_inner_datasets():
    for parallel in (None, 2):
        assert ints(fl.Dataset.range(0).interleave(fl.Dataset.range, 2,
                                                   num_parallel_calls=parallel)) == []
        assert ints(fl.Dataset.range(5).interleave(lambda x: fl.Dataset.range(0), 2,
                                                   num_parallel_calls=parallel)) == []


# ---------------------------------------------------------------- arguments
def test_default_cycle_length_follows_tf():
    cpus = schedulable_cpus()
    assert resolve_cycle_length(None, None) == cpus
    assert resolve_cycle_length(fl.AUTOTUNE, None) == cpus
    assert resolve_cycle_length(None, 2) == min(2, cpus)
    assert resolve_cycle_length(None, fl.AUTOTUNE) == math.ceil(cpus / 3)
    sizes = [3, 1, 4, 1, 5, 9, 2, 6]
    assert ints(sized(sizes, None, 2)) == expected_for(sizes, cpus, 2)
    assert ints(sized(sizes, None, 1, 1)) == expected_for(sizes, 1, 1)


@pytest.mark.parametrize("kwargs, match", [
    ({"cycle_length": 0}, "cycle_length"),
    ({"cycle_length": -3}, "cycle_length"),
    ({"block_length": 0}, "block_length"),
    ({"num_parallel_calls": 0}, "num_parallel_calls"),
])
def test_invalid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fl.Dataset.range(3).interleave(fl.Dataset.range, **kwargs)


def test_map_func_must_be_callable_and_return_a_dataset():
    with pytest.raises(TypeError, match="callable"):
        fl.Dataset.range(3).interleave(3)
    for parallel in (None, 2):
        ds = fl.Dataset.range(3).interleave(lambda x: [x], 2, num_parallel_calls=parallel)
        with pytest.raises(TypeError, match="must return a feedline Dataset, got list for "
                                            "input element 0"):
            list(ds)


def test_cardinality():
    assert fl.Dataset.range(3).interleave(fl.Dataset.range).cardinality() == UNKNOWN
    assert fl.Dataset.range(3).interleave(fl.Dataset.range, num_parallel_calls=2) \
        .cardinality() == UNKNOWN
    forever = fl.Dataset.range(3).repeat()
    assert forever.interleave(fl.Dataset.range, num_parallel_calls=2).cardinality() == INFINITE
    assert forever.interleave(fl.Dataset.range).cardinality() == UNKNOWN


# ---------------------------------------------------------------- parallelism
def test_parallel_reads_open_datasets_at_the_same_time():
    # Each inner dataset's first element waits for all three: only concurrent reading ends.
    barrier = threading.Barrier(3, timeout=20)

    def meet(x):
        barrier.wait()
        return x

    ds = fl.Dataset.range(3).interleave(lambda x: fl.Dataset.from_tensors(x).map(meet),
                                        cycle_length=3, num_parallel_calls=3)
    assert ints(ds) == [0, 1, 2]


def test_future_datasets_are_opened_ahead():
    # Input 2 is outside the cycle of 2, but is read ahead while the cycle is busy.
    barrier = threading.Barrier(3, timeout=20)

    def meet(x):
        barrier.wait()
        return x

    ds = fl.Dataset.range(3).interleave(lambda x: fl.Dataset.from_tensors(x).map(meet),
                                        cycle_length=2, num_parallel_calls=3)
    assert ints(ds) == [0, 1, 2]


def test_nondeterministic_takes_ready_elements_first():
    release = threading.Event()

    def slow(x):
        if x == 0:
            release.wait(20)
        return x

    ds = fl.Dataset.range(4).interleave(lambda x: fl.Dataset.from_tensors(x).map(slow),
                                        cycle_length=4, num_parallel_calls=4,
                                        deterministic=False)
    with iter(ds) as it:
        first = [int(next(it)) for _ in range(3)]
        release.set()
        rest = [int(x) for x in it]
    assert sorted(first) == [1, 2, 3] and rest == [0]


def test_options_deterministic_false_applies():
    release = threading.Event()

    def slow(x):
        if x == 0:
            release.wait(20)
        return x

    ds = fl.Dataset.range(3).interleave(lambda x: fl.Dataset.from_tensors(x).map(slow),
                                        cycle_length=3, num_parallel_calls=3)
    ds = ds.with_options(fl.Options(deterministic=False))
    with iter(ds) as it:
        assert int(next(it)) != 0
        release.set()


def test_close_stops_every_thread_mid_stream():
    sizes = [50] * 12
    with no_leaked_threads():
        it = iter(sized(sizes, 4, 2, num_parallel_calls=3))
        for _ in range(17):
            next(it)
        assert feedline_threads()
        it.close()
    assert not feedline_threads()


def test_abandoned_iterator_is_closed_by_gc_and_exceptions_stop_threads():
    import gc

    with no_leaked_threads():
        it = iter(sized([100] * 8, 4, 1, num_parallel_calls=4).prefetch(2))
        next(it)
        del it
        gc.collect()
    with no_leaked_threads(), pytest.raises(ZeroDivisionError):
        for x in sized([100] * 8, 4, 1, num_parallel_calls=4):
            if x == 201:
                raise ZeroDivisionError


def test_closing_while_inner_datasets_have_their_own_threads():
    ds = fl.Dataset.range(6).interleave(
        lambda x: fl.Dataset.range(100).map(lambda y: y, num_parallel_calls=2).prefetch(3),
        cycle_length=3, num_parallel_calls=3)
    with no_leaked_threads(), iter(ds) as it:
        assert len([next(it) for _ in range(50)]) == 50


# ---------------------------------------------------------------- errors
def failing_map_func(x):
    if x == 2:
        raise KeyError("cannot open input 2")
    return fl.Dataset.range(10 * x, 10 * x + 3)


@pytest.mark.parametrize("parallel, deterministic", MODES)
def test_map_func_error_is_annotated_and_reading_continues(parallel, deterministic):
    ds = fl.Dataset.range(5).interleave(failing_map_func, cycle_length=2, block_length=2,
                                        num_parallel_calls=parallel, deterministic=deterministic,
                                        name="open")
    with pytest.raises(KeyError) as info:
        list(ds)
    assert any("open" in n and "input element 2" in n for n in info.value.__notes__)
    # The failed element's slot takes the next input element, as in tf.data.
    assert run_collecting_errors(ds) == [0, 1, 10, 11, 2, 12, "KeyError", 30, 31, 40, 41, 32,
                                         42]


def test_inner_errors_identical_in_sequential_and_parallel():
    def check(v):
        if v % 7 == 3:
            raise ValueError(f"bad record {v}")
        return v

    def make(x):
        return fl.Dataset.range(10 * x, 10 * x + 6).map(check)

    seq = fl.Dataset.range(6).interleave(make, cycle_length=3, block_length=2)
    expected = run_collecting_errors(seq)
    assert expected.count("ValueError") == 6
    par = fl.Dataset.range(6).interleave(make, cycle_length=3, block_length=2,
                                         num_parallel_calls=2)
    assert run_collecting_errors(par) == expected
    with pytest.raises(ValueError) as info:
        list(par)
    assert any("made from input element 1" in n for n in info.value.__notes__)


def test_input_errors_propagate_at_their_place():
    def check(v):
        if v == 2:
            raise OSError("listing failed")
        return v

    outer = fl.Dataset.range(5).map(check)
    def make(x):
        return fl.Dataset.range(10 * x, 10 * x + 2)

    seq = run_collecting_errors(outer.interleave(make, cycle_length=2))
    assert seq == [0, 10, 1, 11, "OSError", 30, 40, 31, 41]
    assert run_collecting_errors(outer.interleave(make, cycle_length=2,
                                                  num_parallel_calls=2)) == seq


# ---------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("parallel, deterministic", MODES)
def test_checkpointing(parallel, deterministic):
    sizes = [3, 0, 5, 1, 4, 2]
    ds = sized(sizes, 3, 2, parallel, deterministic)
    assert ints(check_checkpointing(ds)) == expected_for(sizes, 3, 2)


def test_checkpointing_nondeterministic():
    ds = sized([3, 0, 5, 1, 4, 2], 3, 2, num_parallel_calls=3, deterministic=False)
    assert sorted(ints(check_checkpointing(ds, ordered=False))) == sorted(
        expected_for([3, 0, 5, 1, 4, 2], 3, 2))


@pytest.mark.parametrize("parallel", [None, 2])
def test_checkpointing_inner_datasets_with_threads_and_shuffle(parallel):
    ds = fl.Dataset.range(4).interleave(
        lambda x: fl.Dataset.range(10 * x, 10 * x + 5).shuffle(3, seed=1).prefetch(2),
        cycle_length=2, block_length=2, num_parallel_calls=parallel)
    check_checkpointing(ds, epochs=2)


def test_checkpointing_nondeterministic_with_bytes_elements():
    def make(x):
        return fl.Dataset.from_tensor_slices([b"a", b"bb", b"ccc"]).map(
            lambda s: s * int(x)).take(int(x))

    ds = fl.Dataset.range(5).interleave(make, cycle_length=2, num_parallel_calls=2,
                                        deterministic=False)
    ref = check_checkpointing(ds, ordered=False)
    assert sorted(ref) == sorted(w * x for x in range(5) for w in [b"a", b"bb", b"ccc"][:x])


@pytest.mark.parametrize("parallel", [None, 2])
def test_buffered_errors_survive_a_checkpoint(parallel):
    def check(v):
        if v in (11, 22):
            raise ValueError(f"bad {v}")
        return v

    ds = fl.Dataset.range(4).interleave(
        lambda x: fl.Dataset.range(10 * x, 10 * x + 4).map(check), cycle_length=2,
        num_parallel_calls=parallel)
    expected = run_collecting_errors(ds)
    assert expected.count("ValueError") == 2
    for k in range(len(expected)):
        it = ds._make_iterator(IteratorContext())
        taken = 0
        while taken < k:
            try:
                next(it)
            except ValueError:
                pass
            taken += 1
        if parallel:
            time.sleep(0.01)  # let read-ahead buffer an error, so the state must carry it
        state = json.loads(json.dumps(it.state_dict()))
        it.close()
        restored = ds._make_iterator(IteratorContext())
        restored.load_state_dict(state)
        rest = []
        while True:
            try:
                rest.append(int(next(restored)))
            except StopIteration:
                break
            except ValueError:
                rest.append("ValueError")
        restored.close()
        assert rest == expected[k:], k


def test_input_error_read_ahead_survives_a_checkpoint():
    def check(v):
        if v == 3:
            raise OSError("listing failed")
        return v

    ds = fl.Dataset.range(6).map(check).interleave(
        lambda x: fl.Dataset.from_tensors(x), cycle_length=2, num_parallel_calls=2)
    it = ds._make_iterator(IteratorContext())
    assert [int(next(it)) for _ in range(2)] == [0, 1]
    state = json.loads(json.dumps(it.state_dict()))
    it.close()
    assert any("input_error" in f for f in state["futures"])
    restored = ds._make_iterator(IteratorContext())
    restored.load_state_dict(state)
    assert int(next(restored)) == 2
    with pytest.raises(OSError, match="listing failed") as info:
        next(restored)
    assert any("checkpoint" in n for n in info.value.__notes__)
    assert [int(x) for x in restored] == [4, 5]
    restored.close()


def test_state_from_another_cycle_length_is_rejected():
    for parallel in (None, 2):
        it = iter(sized([2, 2], 2, 1, parallel))
        next(it)
        state = it.state_dict()
        it.close()
        other = iter(sized([2, 2], 3, 1, parallel))
        with pytest.raises(CheckpointError, match="cycle_length"):
            other.load_state_dict(state)
        other.close()


def test_map_func_runs_on_the_consumer_thread_in_input_order():
    calls = []

    def make(x):
        calls.append((int(x), threading.current_thread().name))
        return fl.Dataset.range(3)

    ds = fl.Dataset.range(6).interleave(make, cycle_length=2, num_parallel_calls=2)
    assert len(ints(ds)) == 18
    assert [x for x, _ in calls] == list(range(6))
    assert {name for _, name in calls} == {threading.current_thread().name}


def test_shared_inner_dataset_reshuffles_in_the_same_order_as_sequential():
    # One dataset object for every slot: each new iterator of it is a new shuffle epoch, so
    # the slots must be opened in input order for the output to match the sequential stage.
    # Each run pinned at epoch 0 (iter() would go on to the shared dataset's next epochs).
    shared = fl.Dataset.range(8).shuffle(8, seed=3)
    seq = ints(fl.PipelineIterator(
        fl.Dataset.range(5).interleave(lambda x: shared, cycle_length=3)))
    assert len({tuple(seq[i:i + 8]) for i in range(0, 40, 8)}) > 1
    for _ in range(3):
        par = fl.Dataset.range(5).interleave(lambda x: shared, cycle_length=3,
                                             num_parallel_calls=3)
        assert ints(fl.PipelineIterator(par)) == seq
