"""Property: any pipeline built from a random chain of operations gives the same elements
with every execution setting (inline, threads, AUTOTUNE, worker processes), and a checkpoint
taken at any point under one setting restores under every other to the same continuation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import feedline as fl
from feedline.testing import check_checkpointing

INLINE, THREADS, AUTO, PROCESSES = "inline", "threads", "autotune", "processes"
SETTINGS = (INLINE, THREADS, AUTO, PROCESSES)


@dataclass(frozen=True)
class Step:
    """One operation of the chain, applied under an execution setting."""

    name: str
    apply: Callable[[fl.Dataset, str], fl.Dataset]


def _calls(setting: str) -> int | None:
    return {INLINE: None, THREADS: 2, AUTO: fl.AUTOTUNE, PROCESSES: 2}[setting]


def _map(ds: fl.Dataset, setting: str, fn: Callable) -> fl.Dataset:
    executor = "process" if setting == PROCESSES else None
    return ds.map(fn, num_parallel_calls=_calls(setting), executor=executor)


def _times_three(x):
    return x * 3 + 1


def _odd_or_big(x):
    return x % 2 == 1 or x > 40


def _two_copies(x):
    return fl.Dataset.from_tensors(x).repeat(2)


def _running_sum(total, x):
    return total + x, total


STEPS = [
    Step("map", lambda ds, s: _map(ds, s, _times_three)),
    Step("filter", lambda ds, s: ds.filter(_odd_or_big)),
    Step("batch(3)", lambda ds, s: ds.batch(3, num_parallel_calls=_calls(s)).unbatch()),
    Step("batch(4, drop)", lambda ds, s: ds.batch(4, drop_remainder=True).unbatch()),
    Step("shuffle", lambda ds, s: ds.shuffle(7, seed=5)),
    Step("take", lambda ds, s: ds.take(25)),
    Step("skip", lambda ds, s: ds.skip(3)),
    Step("repeat", lambda ds, s: ds.repeat(2)),
    Step("flat_map", lambda ds, s: ds.flat_map(_two_copies)),
    Step("interleave", lambda ds, s: ds.interleave(_two_copies, cycle_length=3, block_length=2,
                                                   num_parallel_calls=_calls(s))),
    Step("window", lambda ds, s: ds.window(3, shift=2).flat_map(lambda w: w.take(1))),
    Step("scan", lambda ds, s: ds.scan(np.int64(0), _running_sum)),
    Step("enumerate", lambda ds, s: ds.enumerate().map(lambda i, x: i * 1000 + x)),
    Step("prefetch", lambda ds, s: ds.prefetch(fl.AUTOTUNE if s == AUTO else 3)),
    Step("cache", lambda ds, s: ds.cache()),
    Step("shard", lambda ds, s: ds.shard(2, 1)),
    Step("take_while", lambda ds, s: ds.take_while(lambda x: x < 10_000)),
    Step("unique", lambda ds, s: ds.unique()),
]


def build(chain: list[int], setting: str) -> fl.Dataset:
    ds = fl.Dataset.range(30)
    for index in chain:
        ds = STEPS[index].apply(ds, setting)
    ds = ds.take(60)  # repeats and flat_maps grow it: keep the checks quick
    # Every setting ends the same way (tf.data's habit), so that states move between them.
    return ds.prefetch(fl.AUTOTUNE if setting == AUTO else 2)


def _values(ds: fl.Dataset) -> list[int]:
    return [int(x) for x in ds]


chains = st.lists(st.integers(0, len(STEPS) - 1), min_size=1, max_size=5)


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains)
def test_every_execution_setting_gives_the_same_elements(chain):
    names = [STEPS[i].name for i in chain]
    reference = _values(build(chain, INLINE))
    for setting in (THREADS, AUTO):
        assert _values(build(chain, setting)) == reference, (names, setting)


@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains)
def test_worker_processes_give_the_same_elements(chain):
    names = [STEPS[i].name for i in chain]
    assert _values(build(chain, PROCESSES)) == _values(build(chain, INLINE)), names


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains, saved_under=st.sampled_from((INLINE, THREADS, AUTO)))
def test_a_checkpoint_at_any_point_restores_under_every_setting(chain, saved_under):
    others = [build(chain, s) for s in (INLINE, THREADS, AUTO) if s != saved_under]
    check_checkpointing(build(chain, saved_under), epochs=1, variants=others,
                        steps=[0, 1, 7, 19, 60])


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains, setting=st.sampled_from((INLINE, THREADS, AUTO)))
def test_after_the_end_next_ends_again_forever(chain, setting):
    # tf.data's contract: once a dataset has ended, every later next() ends too (a partial
    # last batch asking its input again after the end once broke a file cache).
    with iter(build(chain, setting)) as it:
        for _ in it:
            pass
        for _ in range(3):
            try:
                next(it)
            except StopIteration:
                continue
            raise AssertionError(f"{[STEPS[i].name for i in chain]}: next() after the end "
                                 "gave an element")
