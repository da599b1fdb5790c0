"""The model of a running pipeline that ``fl.profile`` and the tuner share.

It is tf.data's and Plumber's: a pipeline is a set of *segments* running at once, each a
group of stages that share the threads they run on (the consumer's thread; each read-ahead
stage's workers). A segment's *load* is the work its stages did per second, divided by the
threads it has: a load of 1 means its threads never rested. The segment with the highest
load limits throughput; within it, the stage with the most own time is the *bottleneck*.

Two views of it:

* over a whole measured run (:class:`~feedline.profiling.records.PipelineStatistics`):
  :func:`segments`, :func:`loads`, :func:`gil_bound_cores` and :func:`bottleneck`, what
  :func:`feedline.profile`'s analysis (:mod:`feedline.profiling.report`) is built on;
* over the last seconds of one tuned stage (:class:`StageWindow`, from two snapshots of its
  tuning counters): its rate, how often its consumer waited, its workers' load, what the
  tuner (:mod:`feedline.autotune.tuner`) decides on; :func:`most_loaded` names the
  bottleneck among several such stages (a tuned stage is a segment of its own: its workers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from feedline.profiling.records import PipelineStatistics, StageStatistics

GIL_BOUND_CORES = 1.2
"""A threaded stage whose workers together use at most this many cores while its buffer
is not full is taken to be serialized by the GIL."""

PULL_ON_WORKERS = ("prefetch", "interleave", "snapshot", "load", "multiprocess")
"""Read-ahead stages whose workers (threads, or processes) pull their input: the stages
below them run in those workers' segment."""

MAPS = ("map", "fused_inline")
"""Operations running user functions element by element (``fused_inline``: maps and filters
that map fusion runs as one stage)."""

Snapshot = tuple[float, int, int, int, float, float, float]
"""A tuned stage's counters at one moment: (time, elements handed out, ``next()`` calls,
calls that waited, busy seconds of its tasks, seconds pulling its input, CPU seconds of its
tasks)."""


# ---------------------------------------------------------------------- a measured run
def segments(stages: Sequence[StageStatistics]) -> dict[int, str]:
    """The segment each stage's own work runs in, by stage id.

    Args:
        stages: A pipeline's stages, output first (parents before their children), each
            ``id`` its position.

    Returns:
        ``"consumer"`` (the consumer's thread) or ``"workers:<id>"`` (the threads or
        processes of read-ahead stage ``id``) for each stage id.

    Example:
        >>> def stage(id, parent, operation, asynchronous=False):
        ...     return StageStatistics(id=id, parent=parent, name=operation,
        ...         operation=operation, elements=0, bytes=0, self_seconds=0.0,
        ...         input_seconds=0.0, wait_seconds=0.0, parallelism=1,
        ...         asynchronous=asynchronous)
        >>> stages = (stage(0, None, "batch"), stage(1, 0, "prefetch", True),
        ...           stage(2, 1, "map"), stage(3, 2, "range"))
        >>> segments(stages)
        {0: 'consumer', 1: 'workers:1', 2: 'workers:1', 3: 'workers:1'}
    """
    segment_of: dict[int, str] = {}
    for stage in stages:  # parents come before children (output first)
        if stage.asynchronous:
            segment_of[stage.id] = f"workers:{stage.id}"
        elif stage.parent is None:
            segment_of[stage.id] = "consumer"
        else:
            segment_of[stage.id] = caller_segment(stages[stage.parent], stages, segment_of)
    return segment_of


def caller_segment(stage: StageStatistics, stages: Sequence[StageStatistics],
                   segment_of: dict[int, str]) -> str:
    """The segment that calls the ``next()`` of ``stage``'s input.

    Its own segment when ``stage`` is synchronous, its workers' when it reads ahead on them
    (:data:`PULL_ON_WORKERS`), else (a parallel map or batch pulls its input where it is
    called) its caller's.

    Args:
        stage: The stage whose input is called.
        stages: Every stage of the pipeline, output first.
        segment_of: The segments of ``stage`` and its ancestors (as :func:`segments`
            fills them).

    Returns:
        The segment's key.

    Example:
        >>> def stage(id, parent, operation, asynchronous=False):
        ...     return StageStatistics(id=id, parent=parent, name=operation,
        ...         operation=operation, elements=0, bytes=0, self_seconds=0.0,
        ...         input_seconds=0.0, wait_seconds=0.0, parallelism=4,
        ...         asynchronous=asynchronous)
        >>> stages = (stage(0, None, "map", True), stage(1, 0, "range"))
        >>> caller_segment(stages[0], stages, {0: "workers:0"})  # a parallel map
        'consumer'
    """
    if not stage.asynchronous:
        return segment_of[stage.id]
    if stage.operation in PULL_ON_WORKERS:
        return f"workers:{stage.id}"
    if stage.parent is None:
        return "consumer"
    return caller_segment(stages[stage.parent], stages, segment_of)


def loads(statistics: PipelineStatistics, segment_of: dict[int, str], cores: int,
          own: dict[int, float] | None = None, threads: dict[str, float] | None = None
          ) -> dict[str, float]:
    """Each segment's load: the busy share of its threads over the run.

    A threaded stage the GIL serializes (:func:`gil_bound_cores`) counts its CPU time as
    its work, on the cores its threads used.

    Args:
        statistics: The measured run.
        segment_of: Each stage's segment (:func:`segments`; a prediction may move a stage).
        cores: CPUs of the machine.
        own: Each stage's own seconds, by id, instead of the measured ones (to predict a
            rewrite: a stage made free, a prefix snapshotted).
        threads: Threads of some segments instead of the measured ones.

    Returns:
        The load of each segment, plus ``"cpu"`` (all work over the cores) and ``"step"``
        (the consumer's own work between its ``next()`` calls).

    Example:
        >>> from feedline.profiling.records import ConsumerStatistics
        >>> stage = StageStatistics(id=0, parent=None, name="map(f)", operation="map",
        ...     elements=100, bytes=800, self_seconds=0.9, input_seconds=0.05,
        ...     wait_seconds=0.95, parallelism=1, asynchronous=False, cpu_seconds=0.8)
        >>> stats = PipelineStatistics(seconds=1.0, stages=(stage,),
        ...     consumer=ConsumerStatistics(calls=100, wait_seconds=0.95, between_seconds=0.05))
        >>> {key: round(value, 3) for key, value in loads(stats, {0: "consumer"}, 4).items()}
        {'consumer': 0.9, 'cpu': 0.2, 'step': 0.05}
    """
    wall = statistics.seconds or 1e-9
    own = dict(own or {s.id: s.self_seconds for s in statistics.stages})
    for stage in statistics.stages:
        if gil_bound_cores(statistics, stage) is not None:
            # Its threads' occupied time is mostly waiting for the GIL: its work is its CPU.
            own[stage.id] = min(own[stage.id], stage.cpu_seconds)
    work: dict[str, float] = {}
    for stage in statistics.stages:
        work[segment_of[stage.id]] = work.get(segment_of[stage.id], 0.0) + own[stage.id]
    sizes: dict[str, float] = {"consumer": 1}
    for stage in statistics.stages:
        if stage.asynchronous:
            # A threaded stage the GIL serializes has the cores its threads used, not
            # its thread count.
            gil = gil_bound_cores(statistics, stage)
            sizes[f"workers:{stage.id}"] = gil if gil is not None else max(1, stage.parallelism)
    sizes.update(threads or {})
    result = {key: value / (sizes.get(key, 1) * wall) for key, value in work.items()}
    cpu = {s.id: min(s.cpu_seconds, own[s.id]) for s in statistics.stages}
    result["cpu"] = sum(cpu.values()) / (cores * wall)
    result["step"] = statistics.consumer.between_seconds / wall
    return result


def gil_bound_cores(statistics: PipelineStatistics, stage: StageStatistics) -> float | None:
    """The cores a threaded stage's workers kept busy, when the GIL limited them.

    A stage is GIL-bound when two or more threads together used at most
    :data:`GIL_BOUND_CORES` cores (and more than 0.3) while its buffer was mostly empty
    (its consumer waited for it).

    Args:
        statistics: The measured run (its length).
        stage: One of its stages.

    Returns:
        The cores its threads used, or ``None`` when it is not GIL-bound.

    Example:
        >>> from feedline.profiling.records import ConsumerStatistics
        >>> stage = StageStatistics(id=0, parent=None, name="map(f)", operation="map",
        ...     elements=100, bytes=800, self_seconds=3.6, input_seconds=0.0,
        ...     wait_seconds=0.9, parallelism=4, asynchronous=True, buffer_size=8,
        ...     buffer_mean=0.1, executor="threads", cpu_seconds=1.0)
        >>> stats = PipelineStatistics(seconds=1.0, stages=(stage,),
        ...     consumer=ConsumerStatistics(calls=100, wait_seconds=0.9, between_seconds=0.1))
        >>> gil_bound_cores(stats, stage)  # 4 threads, one core's work
        1.0
    """
    if not (stage.asynchronous and stage.executor == "threads" and stage.parallelism >= 2
            and stage.operation in MAPS + ("batch",)):
        return None
    cores = stage.cpu_seconds / (statistics.seconds or 1e-9)
    starving = stage.buffer_mean is None or stage.buffer_mean < 0.5
    if cores <= GIL_BOUND_CORES and starving and cores > 0.3:
        return max(cores, 1e-3)
    return None


def bottleneck(stages: Sequence[StageStatistics], segment_of: dict[int, str],
               segment_loads: dict[str, float]) -> StageStatistics:
    """The stage with the most own time in the most loaded segment.

    Args:
        stages: The pipeline's stages (at least one).
        segment_of: Each stage's segment (:func:`segments`).
        segment_loads: Each segment's load (:func:`loads`; its ``"cpu"`` and ``"step"``
            are not segments of the pipeline, and are ignored). Ties go to the first
            segment, then to the first stage (output first).

    Returns:
        The bottleneck stage.

    Example:
        >>> def stage(id, parent, name, seconds, asynchronous=False):
        ...     return StageStatistics(id=id, parent=parent, name=name,
        ...         operation=name.split("(")[0], elements=100, bytes=0,
        ...         self_seconds=seconds, input_seconds=0.0, wait_seconds=0.0,
        ...         parallelism=1, asynchronous=asynchronous)
        >>> stages = (stage(0, None, "batch", 0.1), stage(1, 0, "prefetch", 0.0, True),
        ...           stage(2, 1, "map(parse)", 0.7), stage(3, 2, "tfrecord", 0.2))
        >>> bottleneck(stages, segments(stages),
        ...            {"consumer": 0.1, "workers:1": 0.9, "cpu": 0.5, "step": 0.95}).name
        'map(parse)'
    """
    pipeline_loads = {k: v for k, v in segment_loads.items() if k not in ("step", "cpu")}
    critical = max(pipeline_loads, key=lambda key: pipeline_loads[key])
    members = [s for s in stages if segment_of[s.id] == critical]
    return max(members, key=lambda s: s.self_seconds)


# ---------------------------------------------------------------------- a tuned stage
@dataclass(frozen=True)
class StageWindow:
    """One tuned stage over a window of time: what the tuner decides on.

    A tuned stage's workers are a segment of their own; its :attr:`load` is that segment's.

    Attributes:
        seconds: Length of the window.
        rate: Elements handed out per second.
        waited: Share of its consumer's ``next()`` calls that had to wait for a result.
        occupied: Workers its tasks kept busy, on average (computing, reading files,
            waiting for the GIL).
        pulling: Share of the time it spent pulling its input (on its consumer's thread).
        share: Share of its tasks' busy time on a CPU (``None``: its tasks took no time).
        workers: Workers it had (allowed to run at once).
    """

    seconds: float
    rate: float
    waited: float
    occupied: float
    pulling: float
    share: float | None
    workers: int

    @property
    def load(self) -> float:
        """Busy share of its workers: ``occupied / workers`` (1: they never rested).

        Example:
            >>> StageWindow(1.0, 1000.0, 0.5, 3.0, 0.0, 1.0, workers=4).load
            0.75
        """
        return self.occupied / max(1, self.workers)

    @classmethod
    def between(cls, since: Snapshot, now: Snapshot, workers: int) -> StageWindow:
        """The window from snapshot ``since`` to snapshot ``now`` of a stage's counters.

        Args:
            since: The counters at the window's start (a :data:`Snapshot`).
            now: The counters at its end.
            workers: The stage's workers meanwhile.

        Returns:
            Its figures (rates of 0 over a window of no time).

        Example:
            >>> window = StageWindow.between((10.0, 0, 0, 0, 0.0, 0.0, 0.0),
            ...                              (12.0, 2000, 2000, 500, 6.0, 0.2, 3.0), 4)
            >>> window  # doctest: +NORMALIZE_WHITESPACE
            StageWindow(seconds=2.0, rate=1000.0, waited=0.25, occupied=3.0, pulling=0.1,
                        share=0.5, workers=4)
            >>> window.load
            0.75
        """
        held = now[0] - since[0]
        busy = now[4] - since[4]
        return cls(
            seconds=held,
            rate=(now[1] - since[1]) / held if held > 0 else 0.0,
            waited=(now[3] - since[3]) / max(1, now[2] - since[2]),
            occupied=max(0.0, busy / held) if held > 0 else 0.0,
            pulling=max(0.0, (now[5] - since[5]) / held) if held > 0 else 0.0,
            share=min(1.0, max(0.0, (now[6] - since[6]) / busy)) if busy > 0 else None,
            workers=workers)


def most_loaded(windows: Sequence[StageWindow]) -> int:
    """Which of several tuned stages is their bottleneck: the one whose workers are the
    most loaded (ties to the first).

    Args:
        windows: The stages' windows (at least one), in the order they registered.

    Returns:
        The bottleneck's index in ``windows``.

    Example:
        >>> a = StageWindow(1.0, 1000.0, 0.5, 1.4, 0.0, 1.0, workers=2)
        >>> b = StageWindow(1.0, 1000.0, 0.5, 1.9, 0.0, 1.0, workers=2)
        >>> most_loaded([a, b]), most_loaded([a, a])
        (1, 0)
    """
    if not windows:
        raise ValueError("most_loaded() needs at least one stage's window")
    return max(range(len(windows)), key=lambda index: windows[index].load)
