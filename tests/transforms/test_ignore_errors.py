import logging

import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing, fail_at, no_leaked_threads
from feedline.transforms.ignore_errors import errors_ignored


def fail_on_multiples_of_3(x):
    if x % 3 == 0:
        raise ValueError(f"bad element {int(x)}")
    return x


def ints(ds):
    if isinstance(ds, fl.Dataset):
        with iter(ds) as it:  # closed here, so no_leaked_threads() can check right away
            return [int(x) for x in it]
    return [int(x) for x in ds]


def test_ignore_errors_drops_failed_elements():
    ds = fl.Dataset.range(10).map(fail_on_multiples_of_3).ignore_errors()
    assert ints(ds) == [1, 2, 4, 5, 7, 8]


def test_documented_example():
    ds = fl.Dataset.from_tensor_slices([1.0, 0.0, 2.0]).map(lambda x: 1 / int(x))
    assert [float(x) for x in ds.ignore_errors()] == [1.0, 0.5]


@pytest.mark.parametrize("parallel", [2, fl.AUTOTUNE])
def test_after_parallel_map(parallel):
    ds = fl.Dataset.range(30).map(fail_on_multiples_of_3, num_parallel_calls=parallel)
    with no_leaked_threads():
        assert ints(ds.ignore_errors()) == [x for x in range(30) if x % 3]


def test_after_prefetch_and_parallel_map():
    ds = fl.Dataset.range(30).map(fail_on_multiples_of_3, num_parallel_calls=3).prefetch(4)
    with no_leaked_threads():
        assert ints(ds.ignore_errors()) == [x for x in range(30) if x % 3]
        assert ints(fl.Dataset.range(9).map(fail_on_multiples_of_3).prefetch(2)
                    .ignore_errors()) == [1, 2, 4, 5, 7, 8]


def test_after_batch_of_mismatched_shapes():
    ds = fl.Dataset.from_tensor_slices([1, 1, 2, 3, 3]).map(lambda n: np.zeros(n)).batch(2)
    assert [b.shape for b in ds.ignore_errors()] == [(2, 1), (1, 3)]


def test_error_count_is_exposed_and_checkpointed():
    ds = fl.Dataset.range(10).map(fail_on_multiples_of_3).ignore_errors()
    it = iter(ds)
    assert ints([next(it), next(it), next(it)]) == [1, 2, 4]
    assert errors_ignored(it) == 2
    assert it._root.errors_ignored == 2
    state = it.state_dict()
    assert state["root"]["errors_ignored"] == 2
    restored = iter(ds)
    restored.load_state_dict(state)
    assert errors_ignored(restored) == 2
    assert ints(restored) == [5, 7, 8]
    assert errors_ignored(restored) == 4


def test_log_warning(caplog):
    ds = fl.Dataset.range(4).map(fail_on_multiples_of_3)
    with caplog.at_level(logging.WARNING, logger="feedline.transforms.ignore_errors"):
        assert ints(ds.ignore_errors()) == [1, 2]
    assert caplog.records == []
    with caplog.at_level(logging.WARNING, logger="feedline.transforms.ignore_errors"):
        assert ints(ds.ignore_errors(log_warning=True)) == [1, 2]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "ValueError: bad element 0" in messages[0] and "ValueError: bad element 3" in messages[1]


def test_keyboard_interrupt_is_not_ignored():
    def interrupt(x):
        if x == 1:
            raise KeyboardInterrupt
        return x

    with pytest.raises(KeyboardInterrupt):
        list(fl.Dataset.range(3).map(interrupt).ignore_errors())


def test_everything_failing_gives_empty_dataset():
    assert list(fl.Dataset.range(0).ignore_errors()) == []
    assert list(fl.Dataset.range(6).map(lambda x: 1 // 0).ignore_errors()) == []


def test_cardinality_is_unknown_and_spec_follows_input():
    ds = fl.Dataset.range(5).ignore_errors()
    assert ds.cardinality() == fl.UNKNOWN  # tf.data's: an error may drop any element
    assert fl.Dataset.range(5).repeat().ignore_errors().cardinality() == fl.UNKNOWN
    assert ds.element_spec == fl.Dataset.range(5).element_spec


@pytest.mark.parametrize("parallel", [None, 2])
def test_ignore_errors_checkpointing(parallel):
    ds = fl.Dataset.range(12).map(fail_on_multiples_of_3, num_parallel_calls=parallel)
    check_checkpointing(ds.ignore_errors())
    check_checkpointing(ds.prefetch(2).ignore_errors())


def test_ignored_errors_do_not_keep_the_pipeline_alive():
    import gc

    ds = fl.Dataset.range(30).map(fail_on_multiples_of_3, num_parallel_calls=2).prefetch(2)
    gc.disable()  # the pipeline must be freed by reference counting alone
    try:
        with no_leaked_threads():
            assert len([int(x) for x in ds.ignore_errors()]) == 20
    finally:
        gc.enable()


def test_checkpointing_with_injected_failures_keeps_the_count():
    ds = fail_at(fl.Dataset.range(9), [0, 4, 5]).ignore_errors()
    assert [int(x) for x in check_checkpointing(ds, constant_state_size=True)] == [1, 2, 3, 6, 7, 8]
