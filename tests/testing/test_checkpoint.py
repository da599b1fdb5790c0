"""feedline.testing.check_checkpointing: that it passes conforming pipelines and catches the
faults it is meant to catch (lost or moved failures, growing states, settings that break
restores)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import feedline as fl
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.testing import (
    Failed,
    InjectedError,
    check_checkpointing,
    fail_at,
    no_leaked_threads,
    state_size,
    take_outcomes,
)
from feedline.testing.checkpoint import compare


# ----------------------------------------------------------------------------- fail_at
def test_fail_at_replaces_the_chosen_positions_and_goes_on():
    outcomes = take_outcomes(iter(fail_at(fl.Dataset.range(6), [0, 4])))
    assert outcomes == [Failed("InjectedError"), 1, 2, 3, Failed("InjectedError"), 5]


def test_fail_at_counts_failures_of_its_input_as_positions():
    ds = fail_at(fail_at(fl.Dataset.range(5), [1]), [2], KeyError)
    assert take_outcomes(iter(ds)) == [0, Failed("InjectedError"), Failed("KeyError"), 3, 4]


def test_fail_at_validates_its_arguments():
    with pytest.raises(TypeError, match="Exception class"):
        fail_at(fl.Dataset.range(3), [1], error_type=int)
    with pytest.raises(TypeError, match="positions"):
        fail_at(fl.Dataset.range(3), [1.5])


def test_failed_counts_a_restored_error_as_its_original_type():
    from feedline.core.error_records import error_record, restore_error

    restored = restore_error(error_record(InjectedError("x")))
    assert isinstance(restored, ValueError)
    assert Failed.of(restored) == Failed.of(InjectedError("x")) == Failed("InjectedError")


def test_take_outcomes_stops_an_iterator_that_fails_without_moving_on():
    class Stuck:
        def __next__(self):
            raise OSError("stuck")

    with pytest.raises(AssertionError, match="without moving on"):
        take_outcomes(Stuck())
    assert take_outcomes(Stuck(), limit=3) == [Failed("OSError")] * 3


def test_compare_tells_failures_from_values():
    compare([np.int64(1), Failed("KeyError")], [np.int64(1), Failed("KeyError")], True, "")
    with pytest.raises(AssertionError, match="outcome 1 differs"):
        compare([np.int64(1), Failed("KeyError")], [np.int64(1), Failed("ValueError")], True, "")
    with pytest.raises(AssertionError, match="outcome 0 differs"):
        compare([Failed("KeyError")], [np.int64(1)], True, "")
    with pytest.raises(AssertionError, match="multiset"):
        compare([Failed("KeyError"), 1], [1, 1], False, "")


# ----------------------------------------------------------------------------- (a) errors
def test_failing_elements_are_restored_in_their_place():
    ds = fail_at(fl.Dataset.range(10), [0, 3, 9]).filter(lambda x: x % 4 != 1)
    reference = check_checkpointing(ds, constant_state_size=True)
    assert reference == [Failed("InjectedError"), 2, Failed("InjectedError"), 4, 6, 7, 8,
                         Failed("InjectedError")]


@pytest.mark.timeout(120)
def test_failures_buffered_by_read_ahead_stages_survive_the_checkpoint():
    ds = fail_at(fl.Dataset.range(8), [1, 2, 6]).prefetch(3)
    with no_leaked_threads():
        check_checkpointing(ds)


class _ReadAhead(UnaryDataset):
    """A faulty stage: it reads one outcome ahead and, in its state, forgets a buffered
    failure (the kind of bug the error check exists for)."""

    def _make_iterator(self, ctx):
        return _ReadAheadIterator(ctx, self._make_input_iterator(ctx))


class _ReadAheadIterator(UnaryIterator):
    def __init__(self, ctx, upstream):
        super().__init__(ctx, upstream)
        self._ahead: list = []  # [("value", x)] or [("error", e)] or []

    def _fill(self):
        if not self._ahead:
            try:
                self._ahead = [("value", next(self._upstream))]
            except StopIteration:
                self._ahead = [("end", None)]
            except Exception as error:  # noqa: BLE001 -- kept, as a read-ahead stage does
                self._ahead = [("error", error)]

    def __next__(self):
        self._fill()
        (kind, item), = self._ahead
        if kind == "end":
            raise StopIteration
        self._ahead = []
        self._fill()
        if kind == "error":
            raise item
        return item

    def _get_state(self):
        kept = [int(item) for kind, item in self._ahead if kind == "value"]
        return self._with_input_state({"ahead": kept})

    def _set_state(self, state):
        self._load_input_state(state)
        self._ahead = [("value", np.int64(x)) for x in state["ahead"]]


def test_a_stage_that_loses_a_buffered_failure_is_caught():
    clean = _ReadAhead(fl.Dataset.range(6))
    check_checkpointing(clean)  # without failures the faulty stage looks fine
    with pytest.raises(AssertionError, match="outcome 0 differs.*Failed"):
        check_checkpointing(_ReadAhead(fail_at(fl.Dataset.range(6), [3])))


# ----------------------------------------------------------------------------- (b) sizes
class _Remember(UnaryDataset):
    """A stage that keeps every position it passed in its state (its state grows)."""

    def _make_iterator(self, ctx):
        return _RememberIterator(ctx, self._make_input_iterator(ctx))


class _RememberIterator(UnaryIterator):
    def __init__(self, ctx, upstream):
        super().__init__(ctx, upstream)
        self._seen: list[int] = []

    def __next__(self):
        element = next(self._upstream)
        self._seen.append(len(self._seen))
        return element

    def _get_state(self):
        return self._with_input_state({"seen": list(self._seen)})

    def _set_state(self, state):
        self._load_input_state(state)
        self._seen = list(state["seen"])


def test_state_size_is_the_json_length():
    assert state_size({"a": [1, 2]}) == len(json.dumps({"a": [1, 2]}))


def test_a_state_over_max_state_bytes_is_caught():
    ds = fl.Dataset.range(30).shuffle(10, seed=1)
    with iter(ds) as it:
        size = state_size(it.state_dict())
    check_checkpointing(fl.Dataset.range(30).skip(2), max_state_bytes=2000)
    with pytest.raises(AssertionError, match="over max_state_bytes"):
        check_checkpointing(ds, max_state_bytes=size, epochs=1)  # the buffer fills


def test_counters_growing_do_not_count_as_a_growing_state():
    # position 9 -> 10 -> 100 adds digits, not layout
    check_checkpointing(fl.Dataset.range(120).skip(3).take(110), constant_state_size=True,
                        steps=[0, 5, 9, 10, 99, 100, 110])


def test_a_state_that_grows_with_the_position_is_caught():
    with pytest.raises(AssertionError, match="size changes with the position"):
        check_checkpointing(_Remember(fl.Dataset.range(5)), constant_state_size=True)
    check_checkpointing(_Remember(fl.Dataset.range(5)))  # allowed when not asked


# ----------------------------------------------------------------------------- (c) variants
@pytest.mark.timeout(120)
def test_states_load_into_other_prefetch_buffer_sizes():
    def build(buffer_size):
        return fail_at(fl.Dataset.range(12), [4]).filter(lambda x: x % 3 != 0) \
            .prefetch(buffer_size)

    check_checkpointing(build(1), variants=[build(2), build(5)])


def test_states_load_with_other_options():
    def build(deterministic):
        options = fl.Options(deterministic=deterministic, seed=3)
        return fl.Dataset.range(10).shuffle(4).skip(1).with_options(options)

    check_checkpointing(build(None), variants=[build(True), build(False)])


class _Offset(UnaryDataset):
    """Adds ``offset``, which is (wrongly) declared an execution setting, so a state of one
    offset loads into another: the variant check must see the elements differ."""

    _NOT_FINGERPRINTED = frozenset({"offset"})

    def __init__(self, input_dataset, offset):
        super().__init__(input_dataset)
        self.offset = offset

    def _element_spec(self):
        return None

    def _make_iterator(self, ctx):
        return _OffsetIterator(ctx, self._make_input_iterator(ctx), self.offset)


class _OffsetIterator(UnaryIterator):
    def __init__(self, ctx, upstream, offset):
        super().__init__(ctx, upstream)
        self._offset = offset

    def __next__(self):
        return next(self._upstream) + self._offset

    def _get_state(self):
        return self._with_input_state({})

    def _set_state(self, state):
        self._load_input_state(state)


def test_a_variant_that_continues_differently_is_caught():
    ds = fl.Dataset.range(4)
    check_checkpointing(_Offset(ds, 1), variants=[_Offset(ds, 1)])
    with pytest.raises(AssertionError, match="into variant 0"):
        check_checkpointing(_Offset(ds, 1), variants=[_Offset(ds, 2)])


def test_a_variant_the_state_does_not_load_into_is_caught():
    with pytest.raises(AssertionError, match="does not load.*variant 0"):
        check_checkpointing(fl.Dataset.range(4), variants=[fl.Dataset.range(5)])
    with pytest.raises(TypeError, match="variants"):
        check_checkpointing(fl.Dataset.range(4), variants=[[1, 2]])


@pytest.mark.timeout(120)
def test_unordered_pipelines_compare_outcomes_as_multisets():
    def build(n):
        return fail_at(fl.Dataset.range(8), [2]).map(lambda x: x + 1, num_parallel_calls=n,
                                                      deterministic=False)

    with no_leaked_threads():
        check_checkpointing(build(2), ordered=False, epochs=1, steps=[0, 3, 8])


@pytest.mark.timeout(120)
def test_states_load_into_maps_with_other_parallelism_and_fusion():
    def build(fusion, num_parallel_calls, deterministic=None):
        options = fl.Options(optimization=fl.OptimizationOptions(map_fusion=fusion))
        return fail_at(fl.Dataset.range(10), [2]) \
            .map(lambda x: x * 2, num_parallel_calls=num_parallel_calls,
                 deterministic=deterministic) \
            .map(lambda x: x + 1).with_options(options)

    check_checkpointing(build(True, None), variants=[
        build(False, None), build(True, 2), build(False, 4, deterministic=True)])
