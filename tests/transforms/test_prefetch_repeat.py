import threading

import pytest

import feedline as fl
from feedline.testing import check_checkpointing, no_leaked_threads


def ints(ds):
    return [int(x) for x in ds]


@pytest.mark.parametrize("size", [0, 1, 3, fl.AUTOTUNE])
def test_prefetch_preserves_elements(size):
    assert ints(fl.Dataset.range(20).prefetch(size)) == list(range(20))


def test_prefetch_produces_ahead_on_its_own_thread():
    produced = threading.Semaphore(0)

    def mark(x):
        produced.release()
        return x

    with iter(fl.Dataset.range(10).map(mark).prefetch(3)) as it:
        next(it)
        for _ in range(4):  # the first element and three more, without further next() calls
            assert produced.acquire(timeout=10)


def test_prefetch_error_surfaces_after_good_elements_and_threads_end():
    def fail_at_3(x):
        if x == 3:
            raise OSError("disk gone")
        return x

    with no_leaked_threads(), iter(fl.Dataset.range(10).map(fail_at_3).prefetch(2)) as it:
        assert ints([next(it) for _ in range(3)]) == [0, 1, 2]
        with pytest.raises(OSError, match="disk gone"):
            next(it)
        # The error took element 3's place; the iterator goes on (tf.data).
        assert ints(it) == [4, 5, 6, 7, 8, 9]


def test_prefetch_negative_rejected():
    with pytest.raises(ValueError, match="prefetch"):
        fl.Dataset.range(3).prefetch(-5)


def test_prefetch_none_is_autotune():
    # tf.data reads buffer_size=None as AUTOTUNE.
    ds = fl.Dataset.range(10).prefetch(None)
    assert ds.buffer_size == fl.AUTOTUNE
    assert ints(ds) == list(range(10))
    assert ints(fl.Dataset.range(10).prefetch(buffer_size=None, name="ahead")) == list(range(10))


@pytest.mark.parametrize("size", [1, 4])
def test_prefetch_checkpointing(size):
    check_checkpointing(fl.Dataset.range(9).prefetch(size))


def test_repeat_counts():
    assert ints(fl.Dataset.range(3).repeat(2)) == [0, 1, 2, 0, 1, 2]
    assert ints(fl.Dataset.range(3).repeat(0)) == []
    assert ints(fl.Dataset.range(0).repeat()) == []
    assert ints(fl.Dataset.range(2).repeat(-1).take(5)) == [0, 1, 0, 1, 0]
    assert fl.Dataset.range(3).repeat(2).cardinality() == 6
    assert fl.Dataset.range(3).repeat().cardinality() == fl.INFINITE
    assert fl.Dataset.range(0).repeat().cardinality() == 0


def test_repeat_any_negative_count_repeats_forever():
    # tf.data's RepeatDataset tests count < 0: -3 repeats forever, like -1 and None.
    ds = fl.Dataset.range(3).repeat(-3)
    assert ds.cardinality() == fl.INFINITE
    assert [int(x) for x in ds.take(8)] == [0, 1, 2, 0, 1, 2, 0, 1]


def test_repeat_cardinality_over_an_input_of_unknown_size():
    # tf.data's rule: forever is INFINITE even if the input may turn out empty (the iterator
    # then ends); a finite count keeps it unknown; zero is zero.
    unknown = fl.Dataset.range(3).filter(lambda x: True)
    assert unknown.repeat(-3).cardinality() == fl.INFINITE
    assert unknown.repeat().cardinality() == fl.INFINITE
    assert unknown.repeat(2).cardinality() == fl.UNKNOWN
    assert unknown.repeat(0).cardinality() == 0
    empty = fl.Dataset.range(3).filter(lambda x: False).repeat()
    assert empty.cardinality() == fl.INFINITE and ints(empty) == []


def test_repeat_random_access_reads_element_i_modulo_the_input():
    from feedline.core.random_access import at, supports_random_access

    ds = fl.Dataset.range(10, 15).map(lambda x: x * 2).repeat(3)
    assert supports_random_access(ds) and len(ds) == 15
    assert [int(ds[i]) for i in range(15)] == ints(ds)
    assert int(ds[-1]) == 28 and int(at(ds, 7)) == 24
    with pytest.raises(fl.OutOfRangeError):
        at(ds, 15)
    with pytest.raises(fl.OutOfRangeError):
        at(ds, -1)
    nested = fl.Dataset.range(3).repeat(2).repeat(2)
    assert [int(nested[i]) for i in range(12)] == ints(nested)
    assert len(fl.Dataset.range(4).repeat(0)) == 0
    # Forever has no length to index, except over an empty input (tf.data's at() agrees).
    assert not supports_random_access(fl.Dataset.range(4).repeat())
    with pytest.raises(TypeError, match="repeats forever"):
        at(fl.Dataset.range(4).repeat(), 0)
    assert len(fl.Dataset.range(0).repeat()) == 0
    with pytest.raises(fl.OutOfRangeError):
        at(fl.Dataset.range(0).repeat(), 0)


def test_repeat_of_a_reshuffling_global_shuffle_has_no_random_access():
    from feedline.core.random_access import supports_random_access

    # Each epoch is another permutation, which one reader cannot give.
    reshuffled = fl.Dataset.range(6).global_shuffle(seed=1).repeat(2)
    assert not supports_random_access(reshuffled)
    with pytest.raises(TypeError, match="reshuffles each epoch"):
        reshuffled[0]
    fixed = fl.Dataset.range(6).global_shuffle(seed=1, reshuffle_each_iteration=False).repeat(2)
    assert [int(fixed[i]) for i in range(12)] == ints(fixed)


def test_global_shuffle_over_a_finite_repeat():
    ds = fl.Dataset.range(7).repeat(3).global_shuffle(seed=2)
    out = ints(ds)
    assert sorted(out) == sorted(list(range(7)) * 3) and out != list(range(7)) * 3
    check_checkpointing(ds, epochs=2)


@pytest.mark.parametrize("count", [1.5, True, "2"])
def test_repeat_invalid_count(count):
    with pytest.raises(TypeError, match=r"repeat\(count\)"):
        fl.Dataset.range(3).repeat(count)


def test_repeat_checkpointing_across_epochs():
    check_checkpointing(fl.Dataset.range(4).repeat(3), epochs=1)
    check_checkpointing(fl.Dataset.range(3).repeat(), max_elements=8, epochs=1)


def test_repeat_reruns_the_pipeline_each_epoch():
    calls = []
    ds = fl.Dataset.range(2).map(lambda x: calls.append(int(x)) or x).repeat(2)
    assert ints(ds) == [0, 1, 0, 1] and calls == [0, 1, 0, 1]
