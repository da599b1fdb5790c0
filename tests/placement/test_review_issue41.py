"""Review of issue 41's worker-process changes: a state saved in worker processes continued
in this process (``feedline.placement.shards_in_process``), and the poison verdict that an
outside kill no longer earns but a crash of the worker's own code still does."""

from __future__ import annotations

import collections
import time
import warnings

import numpy as np
import pytest

import feedline as fl
from feedline.core.error_records import is_fatal
from feedline.placement.auto import AutoProcessesIterator
from feedline.placement.shards_in_process import ShardsInProcessIterator

pytestmark = pytest.mark.timeout(240)

IN_PROCESSES = fl.Options(autotune=fl.AutotuneOptions(processes=True, cpu_budget=2))
ONE_CPU = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=1))


def _root(it: fl.PipelineIterator) -> AutoProcessesIterator:
    root = it._root
    assert isinstance(root, AutoProcessesIterator)
    return root


def _fails_at_9_and_22(x):
    if int(x) in (9, 22):
        raise KeyError(f"element {int(x)}")
    return x


def _where(error: BaseException) -> list[str]:
    return [note for note in getattr(error, "__notes__", [])
            if note.startswith("feedline: raised in m at")]


def _outcomes(it, limit: int | None = None) -> list:
    out: list = []
    while limit is None or len(out) < limit:
        try:
            out.append(np.asarray(next(it)).tolist())
        except StopIteration:
            break
        except KeyError as error:
            out.append(("KeyError", _where(error)))
    return out


def test_errors_after_an_in_process_restore_name_the_pipelines_element():
    # A worker renumbers an error's element index from its shard's count to the pipeline's
    # ("input element 22 (element 10 of worker 1's shard)"); its shard continued in this
    # process named element 10, another element of the pipeline.
    ds = fl.Dataset.range(30).map(_fails_at_9_and_22, name="m").batch(3).prefetch(fl.AUTOTUNE)
    with iter(ds.with_options(IN_PROCESSES)) as it:
        reference = _outcomes(it)
        assert _root(it).decision.workers == 2
    assert ("KeyError", ["feedline: raised in m at input element 22 (element 10 of worker 1's "
                         "shard)"]) in reference
    with iter(ds.with_options(IN_PROCESSES)) as it:
        head = _outcomes(it, 4)  # past the first error: the second is in a shard's future
        state = it.state_dict()
    with iter(ds.with_options(ONE_CPU)) as again:
        again.load_state_dict(state)
        assert isinstance(_root(again)._inner, ShardsInProcessIterator)
        assert head + _outcomes(again) == reference


def _slow_some(x):
    # Elements 0 and 1 of every 6 are slow: a parallel map that may reorder does.
    time.sleep(0.03 if int(x) % 6 in (0, 1) else 0.001)
    return x


@pytest.mark.parametrize("taken", [25, 40, 41])
def test_a_state_saved_with_deterministic_false_continues_here_losing_and_repeating_nothing(
        taken):
    # Each worker keeps its shard's order whatever Options(deterministic=...) says (only the
    # merge may take the workers in any order), and a worker's position counts items in that
    # order. Run here with deterministic=False, a shard's map reordered while re-reading up
    # to the position: other items were skipped than those handed out, so elements were
    # lost and others repeated.
    saving = fl.Options(autotune=fl.AutotuneOptions(processes=True, cpu_budget=2),
                        deterministic=False)
    restoring = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=1), deterministic=False)
    ds = fl.Dataset.range(120).map(_slow_some, num_parallel_calls=4).prefetch(fl.AUTOTUNE)
    with iter(ds.with_options(saving)) as it:
        head = [int(next(it)) for _ in range(taken)]
        assert _root(it).decision.workers == 2
        state = it.state_dict()
    with iter(ds.with_options(restoring)) as again:
        again.load_state_dict(state)
        assert isinstance(_root(again)._inner, ShardsInProcessIterator)
        got = head + [int(x) for x in again]
    counts = collections.Counter(got)
    assert sorted(v for v, n in counts.items() if n > 1) == []
    assert sorted(set(range(120)) - set(got)) == []


def test_a_state_saved_on_threads_restores_after_an_in_process_restore():
    # After a state saved in processes continued here, restoring an older state saved on
    # threads into the same iterator gave that state to the shards' stage: "state of a
    # 'prefetch' stage given to a 'multiprocess' stage".
    ds = fl.Dataset.range(40).map(lambda x: x * 3).prefetch(fl.AUTOTUNE)
    with iter(ds.with_options(IN_PROCESSES)) as it:
        _ = [next(it) for _ in range(7)]
        in_processes = it.state_dict()
    with iter(ds.with_options(ONE_CPU)) as it:
        _ = [next(it) for _ in range(5)]
        on_threads = it.state_dict()
    with iter(ds.with_options(ONE_CPU)) as it:
        it.load_state_dict(in_processes)
        assert isinstance(_root(it)._inner, ShardsInProcessIterator)
        assert int(next(it)) == 21
        it.load_state_dict(on_threads)
        assert [int(x) for x in it] == [3 * i for i in range(5, 40)]
        assert _root(it).decision.reason == "restored from a state saved on threads"


# ------------------------------------------------------- a crash of the worker's own code
def _segfault_at_5(x):
    if int(x) == 5:
        import ctypes

        ctypes.string_at(0)  # SIGSEGV in this (worker) process
    return True


def _abort_at_5(x):
    if int(x) == 5:
        import os

        os.abort()  # SIGABRT
    return True


@pytest.mark.parametrize("crash", [_segfault_at_5, _abort_at_5], ids=["SIGSEGV", "SIGABRT"])
def test_a_filter_that_crashes_its_worker_still_gets_the_poison_verdict(crash):
    # A signal the worker's own code raises (a crash, an abort) is evidence against the
    # element, unlike SIGKILL/SIGTERM sent from outside: the second death on it is fatal at
    # once (not after MAX_RESTARTS deaths), and every later next() raises it again.
    ds = fl.Dataset.range(12).map(lambda x: x * 1).filter(crash).multiprocess(1)
    values, errors = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with iter(ds) as it:
            while True:
                try:
                    values.append(int(next(it)))
                except fl.WorkerProcessError as error:
                    errors.append(error)
                    if is_fatal(error):
                        break
            assert values == [0, 1, 2, 3, 4]
            assert len(errors) == 2, [str(e) for e in errors]
            assert [is_fatal(e) for e in errors] == [False, True]
            notes = " ".join(getattr(errors[-1], "__notes__", []))
            assert "died again computing element 5" in notes and "not a map function" in notes
            for _ in range(2):
                with pytest.raises(fl.WorkerProcessError) as again:
                    next(it)
                assert is_fatal(again.value)


def test_an_unseeded_global_shuffle_is_not_split_over_worker_processes():
    # Each worker drew its own permutation and kept its shard of it: range(40) gave 11
    # elements twice and lost 11. Refused before any process starts, with the way out.
    ds = fl.Dataset.range(40).global_shuffle().batch(4)
    with pytest.raises(fl.InvalidArgumentError, match=r"global_shuffle has no seed.*"
                       r"global_shuffle\(seed=\.\.\.\) or Options\(seed=\.\.\.\)"):
        with iter(ds.multiprocess(2)) as it:
            next(it)
    for exact in (ds.multiprocess(1), fl.Dataset.range(40).global_shuffle(seed=1).batch(4)
                  .multiprocess(2)):
        with iter(exact) as it:
            assert sorted(x for b in it for x in b.tolist()) == list(range(40))


def test_autotune_keeps_an_unseeded_global_shuffle_in_one_process():
    forced = fl.Options(autotune=fl.AutotuneOptions(processes=True, cpu_budget=2))
    ds = fl.Dataset.range(40).global_shuffle().map(lambda x: x * 2).batch(4) \
        .prefetch(fl.AUTOTUNE).with_options(forced)
    with iter(ds) as it:
        got = sorted(x for b in it for x in b.tolist())
        decision = it.process_decision
    assert got == [2 * x for x in range(40)]
    assert decision.workers <= 1, decision
