import threading
import time

import numpy as np

import feedline as fl

SLOW_START_SECONDS = 1.0


def slow_first_element(gate: threading.Event):
    """A map function that holds element 0 until ``gate`` opens (so the consumer waits)."""

    def fn(x):
        if int(x) == 0:
            assert gate.wait(30)
        return np.zeros(256, np.uint8)

    return fn


def prefetch_stage(it: fl.PipelineIterator):
    """The pipeline's final prefetch (under AUTOTUNE's threads-or-processes stage, if any)."""
    root = it._root
    return getattr(root, "_inner", root)


def first_capacity(options: fl.Options) -> int:
    gate = threading.Event()
    timer = threading.Timer(SLOW_START_SECONDS, gate.set)
    timer.start()
    ds = fl.Dataset.range(5).map(slow_first_element(gate)).prefetch(fl.AUTOTUNE)
    with iter(ds.with_options(options)) as it:
        next(it)
        capacity = prefetch_stage(it).capacity
        assert len(list(it)) == 4
    timer.join()
    return capacity


def test_prefetch_autotune_does_not_grow_for_a_slow_first_element():
    # The consumer waited, but nothing shows yet that the input keeps up with it: a deeper
    # buffer would only be read ahead further. (Without AUTOTUNE's threads-or-processes
    # trial, which pulls elements as fast as it can.)
    assert first_capacity(fl.Options(autotune=fl.AutotuneOptions(processes=False))) == 1


def test_autotune_disabled_keeps_a_fixed_buffer():
    off = fl.Options(autotune=fl.AutotuneOptions(enabled=False))
    assert first_capacity(off) == 2
    with iter(fl.Dataset.range(3).prefetch(fl.AUTOTUNE).with_options(off)) as it:
        assert prefetch_stage(it).capacity == 2


def test_cpu_budget_caps_autotune_workers():
    names = set()

    def record(x):
        names.add(threading.current_thread().name)
        return x

    ds = fl.Dataset.range(200).map(record, num_parallel_calls=fl.AUTOTUNE)
    ds = ds.with_options(fl.Options(autotune=fl.AutotuneOptions(cpu_budget=1)))
    assert [int(x) for x in ds] == list(range(200))
    assert len(names) == 1
    assert fl.Options(autotune=fl.AutotuneOptions(cpu_budget=1)).autotune_parallelism() == 1


def test_prefetch_autotune_carries_its_grown_buffer_to_the_next_epoch():
    # Each epoch of a repeat builds a new prefetch iterator: it starts where the last
    # epoch's buffer had grown to, not at one element.
    def slow(x):
        time.sleep(0.002)
        return x

    ds = fl.Dataset.range(20).map(slow).prefetch(fl.AUTOTUNE).repeat(2)
    options = fl.Options(autotune=fl.AutotuneOptions(processes=False))
    with iter(ds.with_options(options)) as it:
        head = []
        for i in range(20):
            head.append(int(next(it)))
            if i % 4 == 3:
                time.sleep(0.02)  # a bursty consumer: it drains the buffer, which grows
        assert head == list(range(20))
        first_epoch = it._root._upstream
        grown = first_epoch.capacity
        assert int(next(it)) == 0
        second_epoch = it._root._upstream
        assert second_epoch is not first_epoch
        assert grown > 1
        assert second_epoch.capacity >= grown
        assert [int(x) for x in it] == list(range(1, 20))


def test_a_carried_over_buffer_is_cut_to_the_ram_budget_of_bigger_elements():
    from feedline.core.iterator import IteratorContext
    from feedline.transforms.prefetch import PrefetchIterator

    megabyte = 1 << 20
    ctx = IteratorContext(options=fl.Options(
        autotune=fl.AutotuneOptions(ram_budget=4 * megabyte, processes=False)))
    key = object()
    small = fl.Dataset.range(40).map(lambda i: np.zeros(1000, np.uint8))
    first = PrefetchIterator(ctx, small._make_iterator(ctx), fl.AUTOTUNE, "prefetch", key)
    first._tuning._grown[0] = 8  # as if the last epoch had grown it to 8 small elements
    second = PrefetchIterator(ctx, fl.Dataset.range(10).map(
        lambda i: np.zeros(megabyte, np.uint8))._make_iterator(ctx), fl.AUTOTUNE, "prefetch", key)
    try:
        assert second.capacity == 8
        next(second)
        assert second.capacity * megabyte <= 4 * megabyte
        assert first._tuning._grown[0] == second.capacity
    finally:
        first.close()
        second.close()


def test_prefetch_autotune_logs_each_growth_with_its_measurements():
    # A bursty consumer (a pause every fourth element) behind a faster input: each growth
    # is in the pipeline's AUTOTUNE log, as the map tuner's changes are.
    def slow(x):
        time.sleep(0.002)
        return x

    options = fl.Options(autotune=fl.AutotuneOptions(processes=False),
                         profiling=fl.ProfilingOptions(statistics=True))
    ds = fl.Dataset.range(40).map(slow).prefetch(fl.AUTOTUNE).with_options(options)
    with iter(ds) as it:
        for i, element in enumerate(it):
            assert int(element) == i
            if i % 4 == 3:
                time.sleep(0.02)
        grown = prefetch_stage(it).capacity
        changes = [d for d in it.statistics().tuning if d.setting == "buffer"]
    assert grown > 1
    assert [(d.old, d.new) for d in changes] == [(n, n + 1) for n in range(1, grown)]
    assert all("its input keeps up on average" in d.reason for d in changes)
