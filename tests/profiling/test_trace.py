"""Chrome trace-event export: exact events for hand-built statistics."""

from __future__ import annotations

import dataclasses
import json

from feedline.profiling.records import (
    ConsumerStatistics,
    PipelineStatistics,
    Span,
    StageStatistics,
    TimelinePoint,
    TuningDecision,
)
from feedline.profiling.trace import FALLBACK_PID, chrome_trace, write_chrome_trace

MAIN, WORKER_A, WORKER_B = 100, 200, 300


def _stage(id: int, parent: int | None, name: str, operation: str, **extra) -> StageStatistics:
    return StageStatistics(id=id, parent=parent, name=name, operation=operation, elements=12,
                           bytes=96, self_seconds=0.01, input_seconds=0.01, wait_seconds=0.02,
                           parallelism=1, asynchronous=False, **extra)


STAGES = (
    _stage(0, None, "prefetch", "prefetch", buffer_size=4, buffer_mean=0.25),
    _stage(1, 0, "map(parse)", "map", buffer_size=8, buffer_mean=0.5),
    _stage(2, 1, "range", "range"),
)
CONSUMER = ConsumerStatistics(calls=12, wait_seconds=0.02, between_seconds=0.03)


def _statistics(spans=(), timeline=()) -> PipelineStatistics:
    return PipelineStatistics(seconds=0.05, stages=STAGES, consumer=CONSUMER,
                              timeline=tuple(timeline), spans=tuple(spans))


SPANS = (
    # Out of order on purpose: the export sorts. The earliest span is a worker's; the main
    # process is the one running stage 0, whatever its pid or start.
    Span(stage=0, start=0.010, duration=0.0025, thread="MainThread", process=MAIN),
    Span(stage=1, start=0.0001, duration=0.0002, thread="MainThread", process=WORKER_A),
    Span(stage=2, start=0.0003, duration=0.00015, thread="feedline-prefetch", process=MAIN),
    Span(stage=1, start=0.012, duration=0.001, thread="MainThread", process=WORKER_B),
    Span(stage=1, start=0.0105, duration=0.001, thread="MainThread", process=WORKER_A),
)
TIMELINE = (
    TimelinePoint(seconds=0.0, elements=0, buffers={0: 0.0}),
    TimelinePoint(seconds=0.05, elements=12, buffers={1: 0.25, 0: 0.5}),
)


def test_events_are_exact():
    trace = chrome_trace(_statistics(SPANS, TIMELINE))
    assert trace["displayTimeUnit"] == "ms"

    def meta(name, pid, tid, args):
        return {"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args}

    def span(name, cat, ts, dur, pid, tid, stage):
        return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": pid,
                "tid": tid, "args": {"stage": stage}}

    def counter(name, ts, args):
        return {"name": name, "ph": "C", "ts": ts, "pid": MAIN, "args": args}

    assert trace["traceEvents"] == [
        meta("process_name", MAIN, 0, {"name": "feedline pipeline"}),
        meta("process_sort_index", MAIN, 0, {"sort_index": 0}),
        meta("process_name", WORKER_A, 0, {"name": "worker 1"}),
        meta("process_sort_index", WORKER_A, 0, {"sort_index": 1}),
        meta("process_name", WORKER_B, 0, {"name": "worker 2"}),
        meta("process_sort_index", WORKER_B, 0, {"sort_index": 2}),
        # tids in order of each (process, thread)'s first span, unique across processes.
        meta("thread_name", WORKER_A, 1, {"name": "MainThread"}),
        meta("thread_sort_index", WORKER_A, 1, {"sort_index": 1}),
        meta("thread_name", MAIN, 2, {"name": "feedline-prefetch"}),
        meta("thread_sort_index", MAIN, 2, {"sort_index": 2}),
        meta("thread_name", MAIN, 3, {"name": "MainThread"}),
        meta("thread_sort_index", MAIN, 3, {"sort_index": 3}),
        meta("thread_name", WORKER_B, 4, {"name": "MainThread"}),
        meta("thread_sort_index", WORKER_B, 4, {"sort_index": 4}),
        counter("elements handed out", 0.0, {"elements": 0}),
        counter("buffer 0: prefetch", 0.0, {"filled": 0.0}),
        span("map(parse)", "map", 100.0, 200.0, WORKER_A, 1, 1),
        span("range", "range", 300.0, 150.0, MAIN, 2, 2),
        span("prefetch", "prefetch", 10000.0, 2500.0, MAIN, 3, 0),
        span("map(parse)", "map", 10500.0, 1000.0, WORKER_A, 1, 1),
        span("map(parse)", "map", 12000.0, 1000.0, WORKER_B, 4, 1),
        counter("elements handed out", 50000.0, {"elements": 12}),
        counter("buffer 0: prefetch", 50000.0, {"filled": 0.5}),
        counter("buffer 1: map(parse)", 50000.0, {"filled": 0.25}),
    ]


def test_events_are_sorted_by_ts_and_the_same_every_time():
    statistics = _statistics(SPANS, TIMELINE)
    events = chrome_trace(statistics)["traceEvents"]
    stamps = [event["ts"] for event in events]
    assert stamps == sorted(stamps)
    # The spans' order in the record changes nothing, tids included.
    shuffled = _statistics(SPANS[::-1], TIMELINE)
    assert chrome_trace(shuffled) == chrome_trace(statistics)


def test_times_are_microseconds_rounded_to_nanoseconds_and_nesting_survives_rounding():
    parent = Span(stage=0, start=0.5000010004, duration=0.000002, thread="T", process=7)
    # The child ends 0.2 ns before its parent. Rounding start and duration apart would give
    # it ts 500001.001 and dur 2.0, ending 1 ns after its parent (broken nesting in the
    # viewers); rounding both ends keeps it inside.
    child = Span(stage=1, start=0.5000010006, duration=0.0000019996, thread="T", process=7)
    events = [e for e in chrome_trace(_statistics([child, parent]))["traceEvents"]
              if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"]) for e in events] == [
        ("prefetch", 500001.0, 2.0), ("map(parse)", 500001.001, 1.999)]
    assert events[1]["ts"] + events[1]["dur"] <= events[0]["ts"] + events[0]["dur"]


def test_without_spans_the_counters_get_a_named_process():
    events = chrome_trace(_statistics(timeline=TIMELINE[:1]))["traceEvents"]
    assert events == [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": FALLBACK_PID, "tid": 0,
         "args": {"name": "feedline pipeline"}},
        {"name": "process_sort_index", "ph": "M", "ts": 0, "pid": FALLBACK_PID, "tid": 0,
         "args": {"sort_index": 0}},
        {"name": "elements handed out", "ph": "C", "ts": 0.0, "pid": FALLBACK_PID,
         "args": {"elements": 0}},
        {"name": "buffer 0: prefetch", "ph": "C", "ts": 0.0, "pid": FALLBACK_PID,
         "args": {"filled": 0.0}},
    ]


def test_a_span_of_an_unknown_stage_and_buffers_keyed_by_strings():
    # Statistics read back from JSON have string keys; a span may name a stage not listed.
    statistics = _statistics(
        [Span(stage=9, start=0.0, duration=0.001, thread="T", process=5)],
        [TimelinePoint(seconds=0.0, elements=0, buffers={"1": 0.5})])
    events = chrome_trace(statistics)["traceEvents"]
    assert [e for e in events if e["ph"] == "X"] == [
        {"name": "stage 9", "cat": "unknown", "ph": "X", "ts": 0.0, "dur": 1000.0, "pid": 5,
         "tid": 1, "args": {"stage": 9}}]
    assert [e["name"] for e in events if e["ph"] == "C"] == [
        "elements handed out", "buffer 1: map(parse)"]


def test_autotune_decisions_are_instant_events_of_the_pipeline_process():
    decision = TuningDecision(seconds=0.011, stage="map(parse)", setting="workers", old=4,
                              new=2, reason="idle workers")
    statistics = dataclasses.replace(_statistics(SPANS), tuning=(decision,))
    events = chrome_trace(statistics)["traceEvents"]
    marks = [(i, e) for i, e in enumerate(events) if e["ph"] == "i"]
    assert marks == [(18, {
        "name": "AUTOTUNE workers of map(parse): 4 -> 2", "ph": "i", "s": "p", "ts": 11000.0,
        "pid": MAIN, "args": {"stage": "map(parse)", "setting": "workers", "old": 4, "new": 2,
                              "reason": "idle workers"}})]
    # Between the span starting at 10.5 ms and the one at 12 ms.
    assert events[17]["ts"] == 10500.0 and events[19]["ts"] == 12000.0


def test_the_file_is_valid_json_and_holds_the_trace(tmp_path):
    statistics = _statistics(SPANS, TIMELINE)
    path = write_chrome_trace(statistics, tmp_path / "traces" / "run.json")
    assert path == tmp_path / "traces" / "run.json"
    assert json.loads(path.read_text(encoding="utf-8")) == chrome_trace(statistics)


def test_the_sample_report_exports(report):
    events = chrome_trace(report.statistics)["traceEvents"]
    assert [e["args"]["name"] for e in events if e["name"] == "thread_name"] == [
        "MainThread", "feedline-map-0"]
    assert sum(e["ph"] == "C" for e in events) == 41 * 3
    assert [e["ts"] for e in events if e["ph"] == "i"] == [750000.0]
