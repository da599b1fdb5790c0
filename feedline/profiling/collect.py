"""Collecting statistics from a running pipeline.

When ``Options().profiling.statistics`` is on, :class:`~feedline.pipeline.PipelineIterator`
gives its :class:`~feedline.core.iterator.IteratorContext` a
:class:`Collector`, and every stage iterator is built through :meth:`Collector.build`
(``Dataset.__init_subclass__`` routes each node's ``_make_iterator``). The collector hands
the stage's consumer a *probe* in place of the iterator: a C object
(:mod:`feedline.profiling._probe`) that counts every ``next()`` and times a sample of
them, and forwards everything else to the iterator (attributes, ``__class__``), so stage
code, ``isinstance`` checks and checkpoints see the iterator itself. Without the compiled
extension a Python probe does the same, at a higher cost per element.

Every ``interval`` seconds the pipeline's outermost probe, on the thread that reads the
pipeline, takes a sample (:meth:`Collector.drive`): the fill of each stage's read-ahead
buffer and the CPU time of each stage's worker threads. The probes measure the size of
the first ``SIZED_FIRST`` timed elements, then one in ``SIZE_EVERY``, as they hand them out,
and keep the number, never the element (holding a 38 MB batch of images a while made every
later batch fault in fresh pages: 12% slower); :meth:`Collector.statistics` turns it all
into a :class:`~feedline.profiling.records.PipelineStatistics`. Not a thread of its own: a thread
that wakes to sample must take the GIL, which numpy calls release and take back at once,
so it waited for it nearly all the time (a thread waking every 0.1 s ran 0-1 times in 2 s
beside a pipeline with a shuffle), and a thread waiting for the GIL costs the others.

How times are attributed: a stage's calls are timed on the thread that makes them, so a
stage's own time is its ``next()`` time less the ``next()`` time of the inputs it called on
the same threads. A stage working ahead on threads of its own (prefetch, parallel map and
batch, interleave) is credited with the CPU time of those threads less the inputs' time
spent on them; its consumer-side time is waiting, reported as ``wait_seconds``.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from feedline.profiling.records import (
    ConsumerStatistics,
    PipelineStatistics,
    Span,
    StageStatistics,
    TimelinePoint,
)
from feedline.core.structure import element_bytes

if TYPE_CHECKING:
    from feedline.core.dataset import Dataset
    from feedline.core.iterator import DatasetIterator, IteratorContext

try:
    from feedline.profiling._probe import SAMPLE_EVERY, SIZE_EVERY, SIZED_FIRST, SLOW_NS
    from feedline.profiling._probe import Probe as _CProbe
except ImportError:  # not compiled: the Python probe below
    _CProbe = None
    SAMPLE_EVERY, SLOW_NS, SIZED_FIRST, SIZE_EVERY = 64, 20_000, 8, 64

_WEYL, _U64 = 0x9E3779B97F4A7C15, (1 << 64) - 1


def spread(number: int, bits: int) -> int:
    """The top ``bits`` of ``number`` times 2**64/phi (Fibonacci hashing), as ``_probe.c``'s
    ``SPREAD``: a probe times call ``n`` when ``spread(n, 6) == 0`` (one in 64) while calls
    are fast. Not every 64th call: a stage with a period of its own (a batch of 8 pulling
    chunks of 8) would then time only its cheap or only its dear calls.

    Example:
        >>> [n for n in range(300) if spread(n, 6) == 0]
        [0, 34, 89, 178, 233, 267]
    """
    return ((number * _WEYL) & _U64) >> (64 - bits)

MAX_SPANS_PER_STAGE = 20_000
"""Timed calls kept per stage for a trace: a few seconds of a busy stage, bounded memory."""

MAX_TIMELINE_POINTS = 1024
"""Timeline samples kept: past this many, every other one is dropped and later samples are
kept half as often, so a run of days holds as much as a run of minutes (the timeline grew
by a sample every ``interval``: 3 kB/s in each worker process of a soak, issue 29). Charts
draw far fewer (``html.MAX_THROUGHPUT_POINTS``)."""


class PythonProbe:
    """The probe in Python, for installs without the compiled extension (same counts and
    sampling, ~250 ns more per element).

    Example:
        >>> probe = PythonProbe(iter([1, 2]))
        >>> list(probe), probe._probe_counts()["calls"], probe._probe_counts()["stops"]
        ([1, 2], 3, 1)
    """

    def __init__(self, inner: Any, spans: list[Any] | None = None, max_spans: int = 0,
                 sizer: Callable[[Any], int] | None = None) -> None:
        if sizer is not None and not callable(sizer):
            raise TypeError("Probe(sizer): a callable or None")
        state = self.__dict__
        state["_probe_inner"] = inner
        state["_probe_next"] = type(inner).__next__
        state["_probe_spans"] = spans
        state["_probe_max_spans"] = max_spans
        state["_probe_sizer"] = sizer
        # calls stops errors sampled ns mask first_ns cpu_ns first_cpu_ns untimed sized bytes
        state["_probe_state"] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        state["_probe_threads"] = set()
        state["_probe_tick"] = None  # (callable, interval ns, next ns), as _probe_drive sets

    def _probe_drive(self, tick: Callable[[], Any] | None, seconds: float) -> None:
        """Call ``tick()`` from this probe's timed calls, at most every ``seconds``."""
        if tick is not None and not callable(tick):
            raise TypeError("_probe_drive(tick, seconds): tick must be callable")
        if not seconds > 0:
            raise ValueError("_probe_drive(tick, seconds): seconds must be > 0")
        interval = int(seconds * 1e9)
        self.__dict__["_probe_tick"] = None if tick is None else \
            [tick, interval, time.monotonic_ns() + interval]

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance() sees the stage iterator's class
        return type(self.__dict__["_probe_inner"])

    def __iter__(self) -> PythonProbe:
        return self

    def __next__(self) -> Any:
        counts = self._probe_state
        counts[0] += 1
        if spread(counts[0], 6) & counts[5]:
            counts[9] += 1
            try:
                return self._probe_next(self._probe_inner)
            except StopIteration:
                counts[1] += 1
                raise
            except BaseException:
                counts[2] += 1
                raise
        cpu_start = time.thread_time_ns()
        start = time.monotonic_ns()
        result, error = None, None
        try:
            result = self._probe_next(self._probe_inner)
        except BaseException as raised:  # noqa: BLE001 - counted, then raised again
            error = raised
        duration = time.monotonic_ns() - start
        cpu = time.thread_time_ns() - cpu_start
        if counts[0] == 1:  # kept apart: a first call often fills buffers, opens files
            counts[6], counts[8] = duration, cpu
        else:
            counts[3] += 1
            counts[4] += duration
            counts[7] += cpu
        counts[5] = 0 if not counts[3] or counts[4] // counts[3] > SLOW_NS else SAMPLE_EVERY - 1
        self._probe_threads.add(threading.get_ident())
        spans = self._probe_spans
        if spans is not None and len(spans) < self._probe_max_spans:
            spans.append((start, duration, threading.get_ident()))
        if error is not None:
            counts[1 if isinstance(error, StopIteration) else 2] += 1
            raise error
        if self._probe_sizer is not None and (counts[3] <= SIZED_FIRST
                                              or counts[3] % SIZE_EVERY == 1):
            self._probe_size(result)
        self._probe_maybe_tick(start, duration)
        return result

    def _probe_size(self, element: Any) -> None:
        """Add ``element``'s size to the sized count (the number, never the element: holding
        one changes how memory is reused)."""
        counts = self._probe_state
        try:
            counts[11] += int(self._probe_sizer(element))
            counts[10] += 1
        except Exception as error:  # noqa: BLE001 - statistics never break the pipeline
            self.__dict__["_probe_sizer"] = None
            warnings.warn(f"feedline: measuring an element's size failed: {error!r}",
                          RuntimeWarning, stacklevel=3)

    def _probe_maybe_tick(self, start: int, duration: int) -> None:
        """Take the pipeline's sample if its interval has passed (see :meth:`_probe_drive`)."""
        tick = self._probe_tick
        if tick is not None and start >= tick[2]:
            tick[2] = start + duration + tick[1]
            try:
                tick[0]()
            except Exception as error:  # noqa: BLE001 - a sample never breaks the pipeline
                warnings.warn(f"feedline: a statistics sample failed: {error!r}",
                              RuntimeWarning, stacklevel=3)

    def _probe_counts(self) -> dict[str, Any]:
        (calls, stops, errors, sampled, sampled_ns, _, first_ns, cpu_ns, first_cpu_ns, untimed,
         sized, sized_bytes) = self._probe_state
        # Every timed call reads the CPU clock here (cpu_sampled == sampled).
        return {"calls": calls, "untimed": untimed, "stops": stops, "errors": errors,
                "sampled": sampled, "sampled_ns": sampled_ns, "first_ns": first_ns,
                "cpu_sampled": sampled, "sampled_cpu_ns": cpu_ns, "first_cpu_ns": first_cpu_ns,
                "sized": sized, "sized_bytes": sized_bytes,
                "threads": tuple(self._probe_threads)}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_probe_inner"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.__dict__["_probe_inner"], name, value)


class ChunkProbe(PythonProbe):
    """The probe of a stage that also hands out elements in chunks (``next_chunk``): a
    chunk of ``n`` counts as ``n`` calls, every one timed at the chunk's mean, so the stage
    keeps its chunked path with statistics on (per element, the chess prefix cost 2.5 µs a
    record more: statistics on ran at 0.64 of off).

    Example:
        >>> from feedline.core.iterator import IteratorContext
        >>> import feedline as fl
        >>> stage = fl.Dataset.range(5).shuffle(5, seed=1)._make_iterator(IteratorContext())
        >>> probe = ChunkProbe(stage)
        >>> chunk = probe.next_chunk(3)
        >>> len(chunk) == probe._probe_counts()["calls"]
        True
        >>> sorted(int(x) for x in chunk + list(probe))
        [0, 1, 2, 3, 4]

    Its per-element calls go through the compiled probe when built (the Python one cost the
    per-element pipeline of benchmarks/profiling.py 18%); :meth:`_probe_counts` adds both.
    """

    def __init__(self, inner: Any, spans: list[Any] | None = None, max_spans: int = 0,
                 sizer: Callable[[Any], int] | None = None) -> None:
        super().__init__(inner, spans, max_spans, sizer)
        self.__dict__["_probe_elements"] = None if _CProbe is None else \
            _CProbe(inner, spans, max_spans, sizer)

    def __next__(self) -> Any:
        elements = self.__dict__["_probe_elements"]
        return super().__next__() if elements is None else next(elements)

    def _probe_drive(self, tick: Callable[[], Any] | None, seconds: float) -> None:
        super()._probe_drive(tick, seconds)
        elements = self.__dict__["_probe_elements"]
        if elements is not None:
            elements._probe_drive(tick, seconds)

    def _probe_counts(self) -> dict[str, Any]:
        chunks = super()._probe_counts()
        elements = self.__dict__["_probe_elements"]
        if elements is None:
            return chunks
        counts = elements._probe_counts()
        merged = {key: counts[key] + chunks[key] for key in _COUNTS}
        merged["threads"] = tuple(set(counts["threads"]) | set(chunks["threads"]))
        return merged

    def next_chunk(self, limit: int) -> list[Any]:
        counts = self._probe_state
        cpu_start = time.thread_time_ns()
        start = time.monotonic_ns()
        try:
            values = self._probe_inner.next_chunk(limit)
        except BaseException as error:
            counts[0] += 1
            counts[1 if isinstance(error, StopIteration) else 2] += 1
            raise
        duration = time.monotonic_ns() - start
        cpu = time.thread_time_ns() - cpu_start
        count = len(values)
        if not count:
            return values
        timed, wall, used = count, float(duration), float(cpu)
        elements = self.__dict__["_probe_elements"]
        if counts[0] == 0 and (elements is None or not elements._probe_counts()["calls"]):
            # The first element is kept apart, as __next__ does.
            counts[6] = int(wall / count + _CLOCK_NS)
            counts[8] = int(used / count + _CPU_CLOCK_NS)
            timed, wall, used = count - 1, wall - wall / count, used - used / count
        counts[0] += count
        if timed:
            # One clock read for the whole chunk: add back the per-call clock cost that
            # the estimate subtracts from each timed call.
            counts[3] += timed
            counts[4] += int(wall + timed * _CLOCK_NS)
            counts[7] += int(used + timed * _CPU_CLOCK_NS)
        self._probe_threads.add(threading.get_ident())
        spans = self._probe_spans
        if spans is not None and len(spans) < self._probe_max_spans:
            spans.append((start, duration, threading.get_ident()))
        if self._probe_sizer is not None:
            self._probe_size(values[0])
        self._probe_maybe_tick(start, duration)
        return values


def make_probe(inner: Any, spans: list[Any] | None = None, max_spans: int = 0,
               sizer: Callable[[Any], int] | None = None) -> Any:
    """A probe of ``inner``: a :class:`ChunkProbe` for a stage that reads in chunks, else
    the compiled one when built, else :class:`PythonProbe`.

    ``sizer(element) -> bytes`` is called on the first ``SIZED_FIRST`` timed calls, then
    one in ``SIZE_EVERY`` (the probe keeps the count and the sum, ``sized`` and
    ``sized_bytes``, never the element).

    Example:
        >>> probe = make_probe(iter("ab"))
        >>> "".join(probe), probe._probe_counts()["calls"]
        ('ab', 3)
    """
    from feedline.core.iterator import chunk_reader

    if chunk_reader(inner) is not None:
        return ChunkProbe(inner, spans, max_spans, sizer)
    if _CProbe is not None:
        return _CProbe(inner, spans, max_spans, sizer)
    return PythonProbe(inner, spans, max_spans, sizer)


def is_probe(value: Any) -> bool:
    return type(value) in (_CProbe, PythonProbe, ChunkProbe)


def _thread_cpu(thread: threading.Thread) -> float | None:
    ident = thread.ident
    if ident is None or not thread.is_alive():
        return None
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (OSError, AttributeError, ProcessLookupError):  # ended meanwhile
        return None


def _read_aheads(iterator: Any) -> list[Any]:
    """The read-ahead windows a stage iterator declares (``DatasetIterator.read_aheads``)."""
    declared = getattr(iterator, "read_aheads", None)
    return declared() if callable(declared) else []


class _Stage:
    """What the collector keeps of one stage: its probes (one per iterator built: each
    ``repeat`` epoch, each file of an ``interleave``) and what the sampler saw."""

    def __init__(self, stage_id: int, parent: int | None, name: str) -> None:
        self.id = stage_id
        self.parent = parent
        self.name = name
        self.operation = name
        self.probes: list[Any] = []
        # Counts of the stage's iterators that have closed, added up (see add()).
        self.retired: dict[str, Any] = dict.fromkeys(_COUNTS, 0)
        self.retired.update(estimated_ns=0.0, estimated_cpu_ns=0.0)
        self.retired_threads: set[int] = set()
        self.spans: list[tuple[int, int, int]] | None = None
        self.buffer_size: int | None = None
        self.buffer_fill: list[float] = [0.0, 0.0]  # sum and count of the fills sampled
        self.parallelism = 1
        self.executor = "inline"
        self.worker_cpu: dict[int, float] = {}  # thread ident: CPU seconds at last sample
        self.busy: dict[int, float] = {}  # id(iterator): its tasks' seconds at last sample
        self.processes = 0  # worker processes running the stages below (multiprocess)
        self.process_statistics: list[tuple[PipelineStatistics, int]] = []
        self.worker_idents: set[int] = set()
        self.lock = threading.Lock()
        self.node: Any = None  # the dataset node (the first built), for rewrites

    def add(self, probe: Any) -> None:
        with self.lock:
            # Fold the counts of iterators that are closed (a past epoch, a finished file)
            # so a long run keeps a handful of probes, not one per epoch or file.
            if len(self.probes) >= 8:
                keep = []
                for old in self.probes:
                    if getattr(old, "_closed", False):
                        counts = old._probe_counts()
                        _accumulate(self.retired, counts)
                        self.retired_threads.update(counts["threads"])
                    else:
                        keep.append(old)
                self.probes = keep
            self.probes.append(probe)

    def counts(self) -> dict[str, Any]:
        """Calls, ends, errors and the estimated ``next()`` time (``estimated_ns``) over
        every iterator of this stage, with the threads that called them."""
        with self.lock:
            probes = list(self.probes)
            total: dict[str, Any] = dict(self.retired)
            threads = set(self.retired_threads)
        for probe in probes:
            counts = probe._probe_counts()
            _accumulate(total, counts)
            threads.update(counts["threads"])
        total["threads"] = threads
        return total

    def live_iterators(self) -> list[Any]:
        with self.lock:
            probes = list(self.probes)
        return [probe._probe_inner for probe in probes
                if not getattr(probe._probe_inner, "_closed", False)]


class Collector:
    """Statistics of one pipeline run (see the module doc).

    Args:
        trace: Keep timed calls as spans for a Chrome trace.
        interval: Seconds between samples of buffers, worker CPU and output.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.from_tensor_slices(list(range(1000))).map(str).batch(10)
        >>> options = fl.Options(profiling=fl.ProfilingOptions(statistics=True))
        >>> with iter(ds.with_options(options)) as it:
        ...     _ = list(it)
        ...     stats = it.statistics()
        >>> [(s.name, s.elements) for s in stats.stages]
        [('batch', 100), ('map(str)', 1000), ('tensor_slices', 1000)]
    """

    def __init__(self, trace: bool = False, interval: float = 0.1) -> None:
        self._trace = trace
        self._interval = interval
        self._stages: list[_Stage] = []
        self._by_key: dict[tuple[Any, ...], _Stage] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self._started = time.perf_counter()
        self._started_ns = time.monotonic_ns()  # the probes' clock (CLOCK_MONOTONIC)
        self._timeline: list[TimelinePoint] = []
        self._samples = 0
        self._timeline_every = 1  # samples per timeline point (MAX_TIMELINE_POINTS)
        self._stop = threading.Event()
        self._ended_at: float | None = None
        self._thread_names: dict[int, str] = {}

    # ------------------------------------------------------------------ building
    def build(self, node: Dataset, ctx: IteratorContext,
              make: Callable[[Any, IteratorContext], DatasetIterator]) -> DatasetIterator:
        """Build ``node``'s iterator with ``make`` and hand back its probe."""
        stack: list[tuple[Any, _Stage]] = self._local.__dict__.setdefault("stack", [])
        if stack and stack[-1][0] is node:  # a subclass calling super()._make_iterator
            return make(node, ctx)
        # Built inside its parent's build, or while running (repeat's next epoch, a
        # concatenated dataset): then the parent is the stage whose node reads this node.
        parent_node, parent = stack[-1] if stack else self._reader_of(node)
        stage = self._stage_for(node, parent_node, parent)
        stack.append((node, stage))
        try:
            iterator = make(node, ctx)
        finally:
            stack.pop()
        if is_probe(iterator):  # a node that hands out its input's iterator (with_options)
            return iterator
        if not stage.probes:
            stage.operation = _operation(node, iterator)
        probe = make_probe(iterator, stage.spans, MAX_SPANS_PER_STAGE if self._trace else 0,
                           element_bytes)
        stage.add(probe)
        return probe

    def build_inner(self, dataset: Dataset, ctx: IteratorContext, owner: str) -> DatasetIterator:
        """Build the iterator of ``dataset``, made while running by the stage named ``owner``
        (``interleave``, ``flat_map``): its stages are measured under that stage."""
        stack: list[tuple[Any, _Stage]] = self._local.__dict__.setdefault("stack", [])
        with self._lock:
            stage = next((s for s in reversed(self._stages) if s.name == owner), None)
        if stage is None:
            return dataset._make_iterator(ctx)
        stack.append((stage.node, stage))
        try:
            return dataset._make_iterator(ctx)
        finally:
            stack.pop()

    def _reader_of(self, node: Any) -> tuple[Any, _Stage | None]:
        with self._lock:
            for stage in self._stages:
                if any(child is node for child in getattr(stage.node, "_inputs", ())):
                    return stage.node, stage
        return None, None

    def _stage_for(self, node: Any, parent_node: Any, parent: _Stage | None) -> _Stage:
        name = str(getattr(node, "name", None) or _operation(node, None))
        inputs = getattr(parent_node, "_inputs", ())
        # Input i of the stage above, or (-1) a node made while running (interleave's per
        # file datasets): one stage per place in the graph, not per object.
        place = next((i for i, candidate in enumerate(inputs) if candidate is node), -1)
        key = (parent.id if parent else None, name, place)
        with self._lock:
            stage = self._by_key.get(key)
            if stage is None:
                stage = _Stage(len(self._stages), parent.id if parent else None, name)
                stage.node = node
                if self._trace:
                    stage.spans = []
                self._stages.append(stage)
                self._by_key[key] = stage
            return stage

    # ------------------------------------------------------------------ sampling
    def drive(self, root: Any) -> None:
        """Sample every ``interval`` seconds from ``root``'s calls: the pipeline's outermost
        stage, on the thread that reads the pipeline (see the module doc)."""
        if is_probe(root):
            root._probe_drive(self._tick, self._interval)

    def _tick(self) -> None:
        if not self._stop.is_set():
            self.sample()

    def sample(self) -> None:
        """Take one sample now (the pipeline's outermost probe calls this every
        ``interval``)."""
        buffers: dict[int, float] = {}
        for stage in list(self._stages):
            iterators = stage.live_iterators()
            for iterator in iterators:
                busy = getattr(iterator, "busy_seconds", None)
                if isinstance(busy, float):
                    stage.busy[id(iterator)] = busy
                from_workers = getattr(iterator, "worker_statistics", None)
                if callable(from_workers):
                    stage.processes = int(iterator.workers)
                    stage.process_statistics = from_workers() or stage.process_statistics
            windows = [w for it in iterators for w in _read_aheads(it)]
            if not windows:
                continue
            limit = sum(w.limit for w in windows)
            # Finished elements only: a window full of tasks in flight holds nothing its
            # consumer can take, and its consumer waits.
            held = sum(w.finished() for w in windows)
            stage.buffer_size = limit
            fill = held / limit if limit else 0.0
            stage.buffer_fill[0] += fill
            stage.buffer_fill[1] += 1
            buffers[stage.id] = fill
            workers = sum(w.workers for w in windows)
            if workers:
                stage.parallelism = max(stage.parallelism, workers)
                stage.executor = windows[0].executor_kind
            for window in windows:
                for thread in window.threads():
                    cpu = _thread_cpu(thread)
                    if cpu is not None and thread.ident is not None:
                        stage.worker_cpu[thread.ident] = cpu
                        stage.worker_idents.add(thread.ident)
                        self._thread_names[thread.ident] = thread.name
        measured = [stage for stage in self._stages if stage.probes]
        elements = measured[0].counts() if measured else None
        produced = 0 if elements is None else elements["calls"] - elements["stops"]
        self._samples += 1
        if self._samples % self._timeline_every:
            return
        self._timeline.append(TimelinePoint(time.perf_counter() - self._started, produced,
                                            buffers))
        if len(self._timeline) > MAX_TIMELINE_POINTS:
            del self._timeline[1::2]
            self._timeline_every *= 2
        # buffers are keyed by the collector's own stage numbers; statistics() renumbers

    # ------------------------------------------------------------------ results
    @property
    def started_ns(self) -> int:
        """When measuring started, on the probes' clock (``time.monotonic_ns``)."""
        return self._started_ns

    def stop(self) -> None:
        """Take one last sample and no more (call it before the pipeline's iterators close:
        the sample reads them). Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self.sample()
        self._ended_at = time.perf_counter()

    def statistics(self) -> PipelineStatistics:
        """Everything measured so far (see the module doc for how times are attributed)."""
        if not self._stop.is_set():
            self.sample()
        seconds = (self._ended_at or time.perf_counter()) - self._started
        stages = self._measured_stages()
        counts = [stage.counts() for stage in stages]
        next_seconds = [_estimated_seconds(c) for c in counts]
        next_cpu = [c["estimated_cpu_ns"] / 1e9 for c in counts]
        children: dict[int, list[int]] = {}
        for stage in stages:
            if stage.parent is not None:
                children.setdefault(stage.parent, []).append(stage.id)
        records: list[StageStatistics] = []
        for stage, count, seconds_in_next in zip(stages, counts, next_seconds):
            kids = children.get(stage.id, [])
            own_threads = count["threads"]
            asynchronous = (bool(stage.worker_idents) or stage.buffer_size is not None
                            or stage.processes > 0)
            same_thread = [k for k in kids if counts[k]["threads"] & own_threads]
            on_workers = sum(next_cpu[k] for k in kids
                             if counts[k]["threads"] & stage.worker_idents)
            input_seconds = sum(next_seconds[k] for k in kids)
            if asynchronous:
                cpu_seconds = self_seconds = max(
                    0.0, sum(stage.worker_cpu.values()) - on_workers)
                if stage.busy:
                    # Its tasks' own timing: the workers' occupied time (sleeps, file
                    # waits and the GIL included), never less than their CPU time.
                    self_seconds = max(cpu_seconds, sum(stage.busy.values()))
            else:
                cpu_seconds = max(0.0, next_cpu[stage.id] - sum(next_cpu[k] for k in same_thread))
                self_seconds = cpu_seconds
                if not count["untimed"]:
                    # Every call timed: wall time is exact, and counts waiting for files,
                    # sleeps, the GIL (see StageStatistics).
                    wall = seconds_in_next - sum(next_seconds[k] for k in same_thread)
                    self_seconds = max(cpu_seconds, wall)
            elements = count["calls"] - count["stops"]
            mean_bytes = count["sized_bytes"] / count["sized"] if count["sized"] else 0.0
            fill = stage.buffer_fill
            records.append(StageStatistics(
                id=stage.id, parent=stage.parent, name=stage.name, operation=stage.operation,
                elements=elements, bytes=int(mean_bytes * elements),
                self_seconds=self_seconds, input_seconds=input_seconds,
                wait_seconds=seconds_in_next,
                parallelism=(stage.processes or stage.parallelism) if asynchronous else 1,
                asynchronous=asynchronous, buffer_size=stage.buffer_size,
                buffer_mean=fill[0] / fill[1] if fill[1] else None,
                executor=("processes" if stage.processes else stage.executor)
                if asynchronous else "inline",
                cpu_seconds=cpu_seconds))
        spans = self._spans(stages)
        for stage in stages:
            if stage.process_statistics:
                self._add_worker_stages(records, spans, stage)
        consumer = self._consumer(counts, next_seconds, seconds)
        spans.sort(key=lambda span: span.start)
        return PipelineStatistics(seconds=seconds, stages=tuple(records), consumer=consumer,
                                  timeline=self._timeline_renumbered(stages),
                                  spans=tuple(spans))

    def _add_worker_stages(self, records: list[StageStatistics], spans: list[Span],
                           stage: _Stage) -> None:
        """The stages the worker processes of ``stage`` (``multiprocess``) ran, one record
        per place in their pipeline (every worker runs the same shape on its shard), added
        up over the workers, below ``stage``; their spans moved onto this clock."""
        reports = stage.process_statistics
        first = len(records)
        shapes = min(len(report.stages) for report, _ in reports)
        for position in range(shapes):
            parts = [report.stages[position] for report, _ in reports]
            head = parts[0]
            parent = stage.id if head.parent is None else first + head.parent
            records.append(dataclasses.replace(
                head, id=first + position, parent=parent,
                elements=sum(p.elements for p in parts), bytes=sum(p.bytes for p in parts),
                self_seconds=sum(p.self_seconds for p in parts),
                input_seconds=sum(p.input_seconds for p in parts),
                wait_seconds=sum(p.wait_seconds for p in parts),
                cpu_seconds=sum(p.cpu_seconds for p in parts),
                # Each worker runs its own copy: the stage's parallelism, times the workers.
                parallelism=sum(p.parallelism for p in parts),
                executor="processes" if not head.asynchronous else head.executor))
        for report, started_ns in reports:
            shift = (started_ns - self._started_ns) / 1e9
            spans.extend(dataclasses.replace(span, stage=first + span.stage,
                                             start=span.start + shift)
                         for span in report.spans if span.stage < shapes)

    def _measured_stages(self) -> list[_Stage]:
        """The stages that built iterators of their own (not ``with_options``, which hands
        out its input's), numbered again from 0 in building order (output first), each
        parent the nearest such ancestor."""
        with self._lock:
            every = list(self._stages)
        kept = [stage for stage in every if stage.probes or stage.retired["calls"]]
        new_id = {stage.id: number for number, stage in enumerate(kept)}
        by_id = {stage.id: stage for stage in every}
        result = []
        for stage in kept:
            parent = stage.parent
            while parent is not None and parent not in new_id:
                parent = by_id[parent].parent
            view = _Stage.__new__(_Stage)
            view.__dict__.update(stage.__dict__)
            view.original_id = stage.id
            view.id = new_id[stage.id]
            view.parent = None if parent is None else new_id[parent]
            result.append(view)
        return result

    def stage_nodes(self) -> list[Any]:
        """The dataset node of each stage, in the order and numbering of
        :meth:`statistics` (for rewrites that act on the stage)."""
        return [stage.node for stage in self._measured_stages()]

    def _timeline_renumbered(self, stages: list[_Stage]) -> tuple[TimelinePoint, ...]:
        old_to_new = {stage.original_id: stage.id for stage in stages}
        return tuple(TimelinePoint(point.seconds, point.elements,
                                   {old_to_new[k]: v for k, v in point.buffers.items()
                                    if k in old_to_new})
                     for point in list(self._timeline))

    def _consumer(self, counts: list[dict[str, Any]], next_seconds: list[float],
                  seconds: float) -> ConsumerStatistics:
        if not counts:
            return ConsumerStatistics(0, 0.0, seconds)
        calls = counts[0]["calls"] - counts[0]["stops"]
        wait = min(next_seconds[0], seconds)
        return ConsumerStatistics(calls=calls, wait_seconds=wait,
                                  between_seconds=max(0.0, seconds - wait))

    def _spans(self, stages: list[_Stage]) -> list[Span]:
        if not self._trace:
            return []
        names = dict(self._thread_names)
        for thread in threading.enumerate():
            if thread.ident is not None:
                names.setdefault(thread.ident, thread.name)
        start_ns = self._started_ns
        return [Span(stage.id, (start - start_ns) / 1e9, duration / 1e9,
                     names.get(ident, f"thread {ident}"), os.getpid())
                for stage in stages for start, duration, ident in (stage.spans or ())]


def _operation(node: Any, iterator: Any) -> str:
    """``"map"``, ``"range"``: the iterator's operation, else the node's name up to its
    ``(``, else the node's class without ``Dataset``, in snake case."""
    operation = getattr(iterator, "OPERATION", None)
    if operation:
        return str(operation)
    own_name = getattr(node, "name", None)
    if isinstance(own_name, str) and own_name.split("(")[0].isidentifier():
        return own_name.split("(")[0]
    name = type(node).__name__.removesuffix("Dataset") or type(node).__name__
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower()
                   for i, c in enumerate(name))


_COUNTS = ("calls", "untimed", "stops", "errors", "sampled", "cpu_sampled", "sampled_ns",
           "first_ns", "sampled_cpu_ns", "first_cpu_ns", "sized", "sized_bytes")
"""The probe's counters that add up over a stage's iterators."""


def _accumulate(total: dict[str, Any], counts: dict[str, Any]) -> None:
    """Add one probe's counts to ``total``, with its estimated time in ``next()``: its first
    call as measured, the others at the sampled calls' mean (less the clock's own cost)."""
    for key in _COUNTS:
        total[key] += counts[key]
    wall = _estimate(counts, "first_ns", "sampled_ns", "sampled", _CLOCK_NS)
    cpu = _estimate(counts, "first_cpu_ns", "sampled_cpu_ns", "cpu_sampled", _CPU_CLOCK_NS)
    total["estimated_ns"] += wall
    # One thread's CPU time in a call is at most the call's wall time; the two means come
    # from different samples (the CPU clock is read on one timed call in 8).
    total["estimated_cpu_ns"] += min(cpu, wall)


def _estimate(counts: dict[str, Any], first: str, sampled: str, taken: str,
              cost: float) -> float:
    estimated = max(0.0, counts[first] - cost) if counts["calls"] else 0.0
    if counts[taken]:
        mean = max(0.0, counts[sampled] / counts[taken] - cost)
        estimated += mean * (counts["calls"] - 1)
    return estimated


def _estimated_seconds(counts: dict[str, Any]) -> float:
    """Time in ``next()`` over all calls of a stage."""
    return counts["estimated_ns"] / 1e9


def _clock_cost_ns() -> tuple[float, float]:
    """What timing one call adds to its measured wall and CPU time (the clock reads), in ns."""
    probe = make_probe(iter(range(SAMPLE_EVERY * 2000)))
    for _ in probe:
        pass
    # Builtin range's next costs a few ns: the sampled mean is the clock's own cost.
    counts = probe._probe_counts()
    return (min(counts["sampled_ns"] / max(1, counts["sampled"]), 1000.0),
            min(counts["sampled_cpu_ns"] / max(1, counts["cpu_sampled"]), 1000.0))


_CLOCK_NS = _CPU_CLOCK_NS = 0.0
_CLOCK_NS, _CPU_CLOCK_NS = _clock_cost_ns()


def collector_for(ctx_options: Any) -> Collector | None:
    """The collector a pipeline with these options needs (``None``: statistics off)."""
    profiling = ctx_options.profiling
    if not (profiling.statistics or profiling.trace):
        return None
    return Collector(trace=profiling.trace, interval=profiling.interval)
