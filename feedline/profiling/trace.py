"""Chrome trace-event JSON of a profiled run: open it in chrome://tracing or ui.perfetto.dev.

:func:`chrome_trace` turns a :class:`~feedline.profiling.records.PipelineStatistics` into
Chrome's trace-event format (its JSON object form):

* one ``"X"`` (complete) event per :class:`~feedline.profiling.records.Span`: the stage's
  name, its operation as the category, the stage id in ``args``;
* ``"M"`` (metadata) events naming each process (``"feedline pipeline"`` for the one the
  consumer reads from, ``"worker N"`` for worker processes) and each thread;
* ``"C"`` (counter) events from the timeline: the elements handed out so far, and each
  buffered stage's fill share;
* ``"i"`` (instant) events marking each setting AUTOTUNE changed, with its reason.

Spans only exist when profiling was asked to trace; without them the trace still shows the
counters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from feedline.profiling.records import PipelineStatistics, Span

MAIN_PROCESS_NAME = "feedline pipeline"
"""Name shown for the process the consumer reads the pipeline in."""

FALLBACK_PID = 1
"""Process id the counters are drawn under when no span says which process ran the pipeline."""

_MICROSECONDS = 1e6


def chrome_trace(statistics: PipelineStatistics) -> dict[str, Any]:
    """The run as a Chrome trace-event JSON object (``{"traceEvents": [...], ...}``).

    Events are sorted by ``ts`` (microseconds since measuring started); metadata events come
    first with ``ts`` 0. Each (process, thread name) pair gets its own ``tid``, numbered from 1
    in order of its first span, so the same statistics always give the same trace and no two
    processes share a ``tid`` (Perfetto keys threads by ``tid`` alone).

    Args:
        statistics: What was measured (its ``spans`` are empty unless tracing was asked for).

    Returns:
        A JSON-ready dict with ``traceEvents`` and ``displayTimeUnit`` (``"ms"``).

    Example:
        >>> from feedline.profiling.records import (
        ...     ConsumerStatistics, PipelineStatistics, Span, StageStatistics)
        >>> stage = StageStatistics(id=0, parent=None, name="map(f)", operation="map",
        ...     elements=1, bytes=8, self_seconds=0.002, input_seconds=0.0, wait_seconds=0.002,
        ...     parallelism=1, asynchronous=False)
        >>> statistics = PipelineStatistics(seconds=0.01, stages=(stage,),
        ...     consumer=ConsumerStatistics(calls=1, wait_seconds=0.002, between_seconds=0.008),
        ...     spans=(Span(stage=0, start=0.001, duration=0.002, thread="MainThread",
        ...                 process=42),))
        >>> span = chrome_trace(statistics)["traceEvents"][-1]
        >>> span["ph"], span["name"], span["cat"], span["ts"], span["dur"], span["tid"]
        ('X', 'map(f)', 'map', 1000.0, 2000.0, 1)
    """
    stages = {stage.id: stage for stage in statistics.stages}
    spans = sorted(statistics.spans, key=lambda s: (s.start, s.process, s.thread, s.stage))
    main_pid = _main_process(spans)

    # Threads numbered in order of first appearance: deterministic, and the consumer's thread
    # (the first to call the output stage) usually comes first, at the top of the view.
    tids: dict[tuple[int, str], int] = {}
    for span in spans:
        tids.setdefault((span.process, span.thread), len(tids) + 1)
    workers = sorted({span.process for span in spans} - {main_pid})

    metadata: list[dict[str, Any]] = []
    for index, pid in enumerate([main_pid, *workers]):
        name = MAIN_PROCESS_NAME if index == 0 else f"worker {index}"
        metadata.append(_metadata("process_name", pid, 0, {"name": name}))
        # Without a sort index the viewers order processes by pid: the pipeline goes first.
        metadata.append(_metadata("process_sort_index", pid, 0, {"sort_index": index}))
    for (pid, thread), tid in tids.items():
        metadata.append(_metadata("thread_name", pid, tid, {"name": thread}))
        metadata.append(_metadata("thread_sort_index", pid, tid, {"sort_index": tid}))

    timed: list[dict[str, Any]] = []
    for span in spans:
        stage = stages.get(span.stage)
        # Round both ends rather than start and duration apart: rounding is monotonic, so a
        # span nested in another on the same thread stays nested after rounding (the viewers
        # flag children that end after their parent).
        start = _microseconds(span.start)
        end = _microseconds(span.start + span.duration)
        timed.append({
            "name": stage.name if stage else f"stage {span.stage}",
            "cat": stage.operation if stage else "unknown",
            "ph": "X",
            "ts": start,
            "dur": round(end - start, 3),
            "pid": span.process,
            "tid": tids[span.process, span.thread],
            "args": {"stage": span.stage},
        })
    for point in statistics.timeline:
        ts = _microseconds(point.seconds)
        timed.append(_counter("elements handed out", ts, main_pid, {"elements": point.elements}))
        for stage_id, share in sorted((int(k), v) for k, v in point.buffers.items()):
            timed.append(_counter(_buffer_counter_name(stages, stage_id), ts, main_pid,
                                  {"filled": share}))
    for decision in statistics.tuning:
        timed.append({
            "name": f"AUTOTUNE {decision.setting} of {decision.stage}: "
                    f"{decision.old} -> {decision.new}",
            "ph": "i",
            "s": "p",  # a mark across the pipeline's process, not one thread
            "ts": _microseconds(decision.seconds),
            "pid": main_pid,
            "args": {"stage": decision.stage, "setting": decision.setting,
                     "old": decision.old, "new": decision.new, "reason": decision.reason},
        })
    # Longer spans first among equal starts, so a parent precedes the children it encloses;
    # the sort is stable, so counters of one sample keep their order (elements, then buffers).
    timed.sort(key=lambda e: (e["ts"], e["ph"] != "X", -e.get("dur", 0.0), e["pid"],
                              e.get("tid", 0)))
    return {"traceEvents": metadata + timed, "displayTimeUnit": "ms"}


def write_chrome_trace(statistics: PipelineStatistics, path: str | Path) -> Path:
    """Write :func:`chrome_trace`'s JSON to ``path`` (parent folders created).

    Args:
        statistics: What was measured.
        path: The file to write (``.json``; open it in chrome://tracing or ui.perfetto.dev).

    Returns:
        The path written.

    Example:
        >>> import json, tempfile
        >>> from feedline.profiling.records import ConsumerStatistics, PipelineStatistics
        >>> empty = PipelineStatistics(seconds=0.0, stages=(),
        ...     consumer=ConsumerStatistics(calls=0, wait_seconds=0.0, between_seconds=0.0))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     written = write_chrome_trace(empty, Path(folder) / "trace.json")
        ...     json.loads(written.read_text())["traceEvents"][0]["args"]
        {'name': 'feedline pipeline'}
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Compact separators: a traced run holds many thousands of spans.
    path.write_text(json.dumps(chrome_trace(statistics), separators=(",", ":")),
                    encoding="utf-8")
    return path


def _main_process(spans: list[Span]) -> int:
    """The process the consumer reads in: the one running the output stage (id 0), else the
    one with the earliest span (workers start after the pipeline does)."""
    for span in spans:
        if span.stage == 0:
            return span.process
    return spans[0].process if spans else FALLBACK_PID


def _microseconds(seconds: float) -> float:
    # Nanosecond precision is what the viewers resolve; more digits are float noise.
    return round(seconds * _MICROSECONDS, 3)


def _metadata(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args}


def _counter(name: str, ts: float, pid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "C", "ts": ts, "pid": pid, "args": args}


def _buffer_counter_name(stages: dict[int, Any], stage_id: int) -> str:
    # The id keeps two stages of the same name (two map(parse)) on separate tracks.
    stage = stages.get(stage_id)
    return f"buffer {stage_id}: {stage.name if stage else 'stage'}"
