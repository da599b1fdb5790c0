"""Checkpoints do not depend on execution choices, and record positions, not elements.

A state is keyed by operation (``"type": "map"``), so a checkpoint taken with one
``num_parallel_calls``, ``deterministic``, ``map_fusion`` or CPU count restores with another,
and continues with exactly the remaining elements.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import feedline as fl
from feedline.testing import no_leaked_threads

TIMEOUT = 60


def _save(dataset: fl.Dataset, steps: int) -> tuple[list, dict]:
    with iter(dataset) as it:
        taken = [next(it) for _ in range(steps)]
        return taken, json.loads(json.dumps(it.state_dict()))


def _rest(dataset: fl.Dataset, state: dict) -> list:
    with iter(dataset) as it:
        it.load_state_dict(state)
        return list(it)


def _ints(elements) -> list[int]:
    return [int(x) for x in elements]


def _no_fusion(dataset: fl.Dataset, fuse: bool) -> fl.Dataset:
    return dataset.with_options(fl.Options(
        optimization=fl.OptimizationOptions(map_fusion=fuse)))


SETTINGS = [(None, None), (2, True), (8, True), (2, False), (8, False)]


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("saved", SETTINGS, ids=str)
@pytest.mark.parametrize("restored", SETTINGS, ids=str)
def test_map_restores_across_parallelism_and_determinism(saved, restored):
    def build(parallel, deterministic):
        return fl.Dataset.range(60).map(lambda x: x * 3, num_parallel_calls=parallel,
                                        deterministic=deterministic)

    with no_leaked_threads():
        taken, state = _save(build(*saved), 17)
        rest = _rest(build(*restored), state)
    assert state["root"]["type"] == "map"
    if saved[1] is False or restored[1] is False:
        assert sorted(_ints(taken + rest)) == [x * 3 for x in range(60)]
    else:
        assert _ints(taken + rest) == [x * 3 for x in range(60)]


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("saved", [None, 2, 8])
@pytest.mark.parametrize("restored", [None, 2, 8])
def test_batch_restores_across_parallelism(saved, restored):
    def build(parallel):
        return fl.Dataset.range(50).batch(3, num_parallel_calls=parallel)

    with no_leaked_threads():
        taken, state = _save(build(saved), 5)
        rest = _rest(build(restored), state)
    assert state["root"]["type"] == "batch"
    assert [b.tolist() for b in taken + rest] == [list(range(i, min(i + 3, 50)))
                                                   for i in range(0, 50, 3)]


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("saved_fused", [True, False])
@pytest.mark.parametrize("restored_fused", [True, False])
@pytest.mark.parametrize("middle", [None, 3], ids=["inline", "parallel-middle"])
def test_map_fusion_on_and_off_share_one_state(saved_fused, restored_fused, middle):
    def build(fuse, parallel=None):
        ds = (fl.Dataset.range(40).map(lambda x: x + 1).filter(lambda x: x % 3 != 0)
              .map(lambda x: x * 10, num_parallel_calls=parallel).map(lambda x: x - 1))
        return _no_fusion(ds, fuse)

    expected = [(x + 1) * 10 - 1 for x in range(40) if (x + 1) % 3 != 0]
    with no_leaked_threads():
        # A read-ahead middle stage saves a position that needs re-reading: the fused chain
        # restoring it runs unfused until it has caught up.
        taken, state = _save(build(saved_fused, middle), 7)
        rest = _rest(build(restored_fused), state)
        assert _ints(taken + rest) == expected
        taken, state = _save(build(saved_fused), 7)
        rest = _rest(build(restored_fused, middle), state)
        assert _ints(taken + rest) == expected


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("saved", [None, 2])
@pytest.mark.parametrize("restored", [None, 3])
def test_interleave_stores_its_resolved_cycle_length(monkeypatch, saved, restored):
    import feedline.transforms.interleave as interleave_module

    def build(parallel):
        return fl.Dataset.range(12).interleave(
            lambda x: fl.Dataset.range(5).map(lambda y: x * 100 + y),
            num_parallel_calls=parallel, block_length=2)

    monkeypatch.setattr(interleave_module, "schedulable_cpus", lambda: 2)
    with no_leaked_threads():
        expected = _ints(build(saved))
        taken, state = _save(build(saved), 9)
        assert state["root"]["cycle_length"] == 2
        # The restoring machine has another CPU count: the saved cycle is used.
        monkeypatch.setattr(interleave_module, "schedulable_cpus", lambda: 5)
        assert _ints(build(restored)) != expected
        rest = _rest(build(restored), state)
    assert _ints(taken + rest) == expected


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("deterministic", [True, False])
def test_interleave_restores_across_parallelism_mid_read(deterministic):
    def build(parallel, det=True):
        return fl.Dataset.range(10).interleave(
            lambda x: fl.Dataset.range(7).map(lambda y: x * 100 + y), cycle_length=3,
            num_parallel_calls=parallel, deterministic=det)

    reference = _ints(build(None))
    with no_leaked_threads():
        taken, state = _save(build(2, deterministic), 11)
        rest = _rest(build(None), state)
        if deterministic:
            assert _ints(taken + rest) == reference
        else:
            assert sorted(_ints(taken + rest)) == sorted(reference)
        taken, state = _save(build(None), 11)
        rest = _rest(build(3), state)
    assert _ints(taken + rest) == reference


MEGABYTE = 1 << 20


@pytest.mark.timeout(TIMEOUT)
def test_read_ahead_states_hold_positions_not_elements():
    def big(x):
        return np.full(MEGABYTE // 8, x, dtype=np.int64)

    def build():
        return fl.Dataset.range(64).map(big, num_parallel_calls=8).prefetch(16)

    with no_leaked_threads():
        with iter(build()) as it:
            first = [int(next(it)[0]) for _ in range(5)]
            state = it.state_dict()
            assert len(json.dumps(state)) <= 4096
            more = [int(next(it)[0]) for _ in range(20)]
            state = json.loads(json.dumps(it.state_dict()))
            assert len(json.dumps(state)) <= 4096
        rest = [int(x[0]) for x in _rest(build(), state)]
    assert first + more + rest == list(range(64))


@pytest.mark.timeout(TIMEOUT)
def test_an_input_error_read_ahead_restores_in_its_place_after_a_state():
    def fail_at_4(x):
        if int(x) == 4:
            raise ValueError("four")
        return x

    def build(parallel):
        return fl.Dataset.range(8).map(fail_at_4).map(lambda x: x, num_parallel_calls=parallel)

    for saved in (None, 3):
        for restored in (None, 3):
            with no_leaked_threads():
                _, state = _save(build(saved), 2)
                with iter(build(restored)) as it:
                    it.load_state_dict(state)
                    assert _ints([next(it), next(it)]) == [2, 3]
                    with pytest.raises(ValueError, match="four"):
                        next(it)
                    assert _ints(it) == [5, 6, 7]
