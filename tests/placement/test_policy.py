"""The placement policy's rules, on figures given directly (no threads, no processes)."""

from __future__ import annotations

import dataclasses

import pytest

from feedline.placement import policy
from feedline.placement.policy import (
    ExecutorDecision,
    LoopRate,
    MapCallFigures,
    ProcessDecision,
    keep_feeder,
    place_feeder,
    place_map_calls,
    place_pipeline,
    place_shards,
    runs_inline,
    try_feeder_beside,
)

# Two calls that could run at once, each 2 ms alone on a CPU the whole time, together keeping
# one CPU busy: serialized by the GIL.
HELD = MapCallFigures(busy_alone=1.0, running_alone=1.0, cores_together=1.0, concurrency=2.0,
                      seconds_per_element=0.002, thread_rate=500.0,
                      transport_per_element=1e-5, workers=2, cpus=2, idle_cpus=1.0)


def test_the_figures_derive_slowdown_and_gil_share():
    assert HELD.busy_together == 0.5
    assert HELD.slowdown == 2.0
    assert HELD.gil_share == 1.0
    assert dataclasses.replace(HELD, cores_together=2.0).gil_share == 0.0
    assert dataclasses.replace(HELD, concurrency=1.0).gil_share is None


def test_the_process_rate_charges_transport_and_the_task_cost():
    # 2 workers / (2 ms + 2 x 10 µs + 300 µs x 2 ms / 5 ms), capped by 1 / (20 µs + 120 µs).
    per_task = policy.PROCESS_TASK_SECONDS * 0.002 / policy.PROCESS_TARGET_TASK_SECONDS
    expected = min(2 / (0.002 + 2e-5 + per_task), 1 / (2e-5 + per_task))
    assert HELD.process_rate() == pytest.approx(expected)
    assert dataclasses.replace(HELD, transport_per_element=None).process_rate() is None


@pytest.mark.parametrize(("change", "reason"), [
    ({"concurrency": 1.2}, "the calls rarely ran at once (the map is not the bottleneck)"),
    ({"busy_alone": 0.1, "running_alone": 0.1},
     "the function mostly waits (I/O, sleep), which threads overlap"),
    # A 2 ms sleep alone on a loaded machine: 70% "busy" counting its run-queue waits, on a
    # CPU 2% of its time: it waits.
    ({"busy_alone": 0.7, "running_alone": 0.02},
     "the function mostly waits (I/O, sleep), which threads overlap"),
    ({"cores_together": 2.0}, "the calls run in parallel on threads (the GIL is released)"),
    ({"idle_cpus": 0.2}, ("held back by the GIL, but the machine had 0.2 CPU idle (other "
                          "processes use them): processes would not run faster")),
    ({"transport_per_element": None},
     "held back by the GIL, but its inputs or results do not pickle"),
    ({"transport_per_element": 0.01}, ("held back by the GIL, but moving its elements "
                                       "between processes would cost more than it gains")),
])
def test_a_map_stays_on_threads_for_each_reason(change, reason):
    decision = place_map_calls("map(f)", dataclasses.replace(HELD, **change))
    assert (decision.kind, decision.reason) == ("thread", reason)


def test_the_work_per_element_is_the_cpu_of_every_call_over_the_share_a_call_alone_ran():
    assert HELD.work_per_element == 0.002  # no CPU measured: the calls alone
    steady = dataclasses.replace(HELD, cpu_per_element=0.001)
    assert steady.work_per_element == 0.001
    waiting = dataclasses.replace(HELD, cpu_per_element=0.001, running_alone=0.5)
    assert waiting.work_per_element == 0.002  # half its time on I/O, in a process too


def test_a_gil_bound_map_whose_first_calls_ran_slow_still_moves_to_processes():
    # A tokenizer on 2 cores: its first 5 calls alone took 107 µs a line (first-call costs),
    # the 2,000 after them 60 µs of CPU a line; on threads 13,000 lines/s.
    tokenizer = dataclasses.replace(HELD, seconds_per_element=107e-6, thread_rate=13_000.0,
                                    transport_per_element=5e-6)
    assert place_map_calls("m", tokenizer).reason == (
        "held back by the GIL, but moving its elements between processes would cost more "
        "than it gains")
    steady = dataclasses.replace(tokenizer, cpu_per_element=60e-6)
    decision = place_map_calls("m", steady)
    assert decision.kind == "process" and decision.seconds_per_element == 60e-6
    assert decision.process_rate == pytest.approx(steady.process_rate())
    assert decision.process_rate > 1.3 * 1 / 60e-6 > 1.3 * 13_000


def test_a_map_held_by_the_gil_moves_to_processes_with_its_figures():
    decision = place_map_calls("map(f)", HELD)
    assert decision.kind == "process"
    assert decision.reason == "the calls are serialized by the GIL"
    assert (decision.gil_share, decision.busy_alone, decision.busy_together,
            decision.concurrency, decision.seconds_per_element, decision.thread_rate) == (
        1.0, 1.0, 0.5, 2.0, 0.002, 500.0)
    assert decision.process_rate == pytest.approx(HELD.process_rate())
    assert str(decision).startswith("map(f): processes: the calls are serialized by the GIL")


def test_a_map_kept_on_threads_by_option_or_by_a_function_that_does_not_pickle():
    assert place_map_calls("m", HELD, allow_processes=False).reason == (
        "held back by the GIL; kept on threads (AutotuneOptions(choose_executor=False))")
    assert place_map_calls("m", HELD, function_pickles=lambda: False).reason == (
        "held back by the GIL, but the function does not pickle")


def test_unknown_idle_cpus_do_not_keep_a_map_on_threads():
    assert place_map_calls("m", dataclasses.replace(HELD, idle_cpus=None)).kind == "process"


def test_processes_cannot_pay_for_cheap_calls_whatever_the_gil_does():
    # 1 µs calls that take 5 µs each way to send: even every call in parallel, processes
    # run slower than one call at a time. 2 ms calls: processes may pay.
    assert policy.processes_cannot_pay(1e-6, 5e-6, workers=2, cpus=2)
    assert not policy.processes_cannot_pay(2e-3, 5e-6, workers=2, cpus=2)
    assert policy.processes_cannot_pay(2e-3, None, workers=2, cpus=2)  # does not pickle


@pytest.mark.parametrize("seconds", [1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2])
@pytest.mark.parametrize("transport", [1e-7, 1e-6, 1e-5, 1e-4, 1e-3])
@pytest.mark.parametrize("workers", [2, 8])
def test_where_processes_cannot_pay_the_decision_keeps_threads(seconds, transport, workers):
    # Whatever the calls together measure (here: fully serialized, on idle CPUs, threads
    # slower than one call at a time), the decision agrees with the shortcut.
    if not policy.processes_cannot_pay(seconds, transport, workers=workers, cpus=workers):
        return
    figures = dataclasses.replace(HELD, seconds_per_element=seconds, thread_rate=1.0,
                                  transport_per_element=transport, workers=workers,
                                  cpus=workers, idle_cpus=float(workers))
    assert place_map_calls("m", figures).kind == "thread"


def test_inline_only_for_short_calls_that_hold_the_gil():
    limit = policy.INLINE_MAX_CALL_SECONDS
    short = ExecutorDecision("m", "thread", "", seconds_per_element=limit / 2)
    long = ExecutorDecision("m", "thread", "", seconds_per_element=limit)
    assert runs_inline(short, True) is True
    assert runs_inline(long, True) is False
    assert runs_inline(short, False) is False
    assert runs_inline(None, True) is False
    assert runs_inline(ExecutorDecision("m", "thread", ""), True) is False


@pytest.mark.parametrize(("args", "move", "reason"), [
    ((2, False, [], "file", False, True, True), None, "AutotuneOptions(processes=False)"),
    ((1, None, [], "file", False, True, True), None, "one CPU to run on"),
    ((2, None, ["map(f)"], "file", False, True, True), None,
     "map(f): calls already in worker processes (executor='process')"),
    ((2, None, [], "output", False, True, True), "feeder",
     "no stage boundary to shard the input at"),
    ((2, None, [], "data", False, True, True), "feeder",
     ("sharding by data would make every worker read all of it (only in-memory sources are "
      "worth it)")),
    ((2, None, [], "data", True, True, True), "shards", ""),
    ((2, None, [], "file", False, False, True), "feeder",
     ("sharding by file would change the element order (allow it with "
      "Options(deterministic=False))")),
    ((2, None, [], "file", False, False, False), "shards", ""),
    # Forced: the maps in processes and the cost of re-reading no longer keep it here.
    ((2, True, ["map(f)"], "data", False, True, True), "shards", ""),
])
def test_what_a_pipeline_may_do_before_a_trial(args, move, reason):
    assert place_pipeline(*args) == policy.PipelinePlan(move, reason)


def test_shards_from_the_cores_the_trial_kept_busy():
    assert place_shards(2, 1.5).mode == "threads"  # 2 < 1.5 x 1.5
    decision = place_shards(2, 1.0)
    assert (decision.mode, decision.workers, decision.reason) == (
        "processes", 2, "threads kept 1.00 of 2 cores busy")
    assert place_shards(16, 2.0).workers == 8
    assert place_shards(16, 0.3).workers == 16  # busy under one core counts as one
    forced = place_shards(4, None)
    assert (forced.workers, forced.reason) == (4, "forced by AutotuneOptions(processes=True)")


@pytest.mark.parametrize(("budget", "busy", "seconds", "size", "stay"), [
    (2, 1.0, 1e-3, 100, ("threads keep 1.00 of 2 cores busy, too few left for a feeder "
                         "process beside the training loop")),
    (8, 0.3, 1e-3, 100, ("threads keep only 0.30 cores busy here (a feeder process would "
                         "not pay)")),
    (8, 1.0, 1e-6, 4e6, ("an element costs 1 µs here, not much more than receiving its "
                         "4,000,000 bytes would")),
])
def test_a_feeder_stays_on_threads_for_each_reason(budget, busy, seconds, size, stay):
    decision = place_feeder(budget, busy, "why not split", seconds, size)
    assert (decision.mode, decision.workers) == ("threads", 0)
    assert decision.reason == f"why not split; and {stay}"


def test_a_feeder_moves_when_it_frees_this_process():
    decision = place_feeder(8, 1.2, "why not split", 40e-6, 4000)
    assert (decision.mode, decision.workers, decision.cores_busy) == ("feeder", 1, 1.2)
    assert decision.reason == ("why not split; the whole pipeline runs in one feeder "
                               "process, in its order (threads kept 1.20 of 8 cores busy in "
                               "this process)")
    assert place_feeder(2, None, "x").mode == "feeder"  # forced


def test_only_missing_spare_cores_make_the_threads_decision_provisional():
    assert place_feeder(2, 1.0, "why not split", 1e-3, 100).provisional
    assert not place_feeder(2, 0.3, "why not split", 1e-3, 100).provisional  # idle here
    assert not place_feeder(2, 1.9, "why not split", 1e-3, 100).provisional  # no core left
    assert not place_feeder(2, 1.0, "why not split", 1e-6, 4e6).provisional  # cheap element
    assert not place_feeder(8, 1.2, "why not split", 40e-6, 4000).provisional  # moves


PROVISIONAL = ProcessDecision("threads", 0, 1.2, 2, "why not split; and too few", True)


@pytest.mark.parametrize(("waited", "tries"), [
    (0.0, True), (policy.FEEDER_TRY_MAX_WAITED, True), (policy.FEEDER_TRY_MAX_WAITED + 0.01,
                                                        False)])
def test_a_feeder_is_tried_only_beside_a_loop_that_does_not_wait_on_the_pipeline(waited, tries):
    final = try_feeder_beside(PROVISIONAL, LoopRate(1000.0, waited))
    if tries:
        assert final is None
    else:
        assert (final.mode, final.provisional, final.cores_busy) == ("threads", False, 1.2)
        assert final.reason == (
            f"why not split; and too few; the training loop waits on the pipeline on threads "
            f"(1,000 elements/s, waiting {waited:.0%}), which a feeder process beside it "
            "would not feed faster here")


@pytest.mark.parametrize(("from_feeder", "mode"), [
    (1000.0 * policy.FEEDER_KEEP_SHARE, "feeder"), (1000.0 * policy.FEEDER_KEEP_SHARE - 1,
                                                     "threads"), (1500.0, "feeder")])
def test_the_feeder_stays_if_the_loop_keeps_its_rate(from_feeder, mode):
    final = keep_feeder(PROVISIONAL, LoopRate(1000.0, 0.02), LoopRate(from_feeder, 0.04))
    figures = (f"the training loop ran 1,000 elements/s, waiting 2% on threads and "
               f"{from_feeder:,.0f} elements/s, waiting 4% from a feeder process")
    assert (final.mode, final.provisional) == (mode, False)
    if mode == "feeder":
        assert (final.workers, final.reason) == (1, (
            f"why not split; the whole pipeline runs in one feeder process, in its order "
            f"({figures})"))
    else:
        assert final.reason == f"why not split; and too few ({figures})"



@pytest.mark.parametrize(("memory", "stays"), [
    ((1 << 30, 2 << 30), None),  # exactly twice this process: tried
    ((1 << 30, (2 << 30) - 1), ("a feeder process beside the training loop could need up "
                                "to 2.0 GiB (twice this process's 1.0 GiB), and 2.0 GiB are "
                                "available")),
    (None, "the memory a feeder process would have is not known here")])
def test_a_feeder_is_tried_only_where_a_second_copy_of_the_pipeline_fits(memory, stays):
    final = try_feeder_beside(PROVISIONAL, LoopRate(1000.0, 0.0), memory)
    if stays is None:
        assert final is None
    else:
        assert (final.mode, final.provisional) == ("threads", False)
        assert final.reason == f"why not split; and too few; {stays}"
