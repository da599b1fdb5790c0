"""What profiling reports: frozen records, one docstring per field.

These are the contract between collection (:mod:`feedline.profiling.collect`), analysis
(:mod:`feedline.profiling.report`) and the renderers (:mod:`feedline.profiling.trace`,
:mod:`feedline.profiling.html`). They hold plain numbers and strings only, so a report can
be rendered, compared or turned into JSON (:func:`to_json`) without the pipeline.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StageStatistics:
    """One stage of a running pipeline, over the time it was measured.

    Times are seconds summed over every thread that ran the stage, estimated from a sample
    of its calls (every call when calls are slow, one in 16 when they are fast) times the
    number of calls. A stage's own time is wall-clock time when every call was timed (so
    waiting for files or sleeping counts), CPU time when calls were sampled (a sampled
    call's wall time may include a GIL switch of 5 ms: noise sampling would multiply).
    """

    id: int
    """Position in the pipeline, output first (0 is the stage the consumer reads)."""
    parent: int | None
    """The ``id`` of the stage that reads this one (``None`` for the output stage)."""
    name: str
    """The stage's name as errors give it (``"map(parse)"``, ``"batch"``)."""
    operation: str
    """The operation (``"map"``, ``"batch"``, ``"prefetch"``, ``"tfrecord"``)."""
    elements: int
    """Elements this stage handed to its consumer (errors included)."""
    bytes: int
    """Estimated bytes of those elements (mean size of sampled elements times ``elements``)."""
    self_seconds: float
    """Time running this stage's own code, excluding the time its inputs took, over all
    of its threads: for a parallel ``map`` the function's time on its workers."""
    input_seconds: float
    """Time this stage spent waiting for its inputs' elements."""
    wait_seconds: float
    """Time the consumer of this stage spent in ``next()`` on it (what the stage cost the
    stage above it, waiting included)."""
    parallelism: int
    """Threads or processes running the stage's work (1 when it runs on its consumer's thread)."""
    asynchronous: bool
    """Whether the stage works on threads or processes of its own, ahead of its consumer."""
    buffer_size: int | None = None
    """Elements the stage may hold ready ahead of its consumer (``None``: no buffer)."""
    buffer_mean: float | None = None
    """Mean share of ``buffer_size`` holding finished elements when sampled (0: always
    empty; tasks still in flight do not count)."""
    executor: str = "inline"
    """Where its work runs: ``"inline"``, ``"threads"`` or ``"processes"``."""
    cpu_seconds: float = 0.0
    """CPU time of this stage's own code (``self_seconds`` less waiting for the GIL, for
    files, for sleeps), over all of its threads."""

    @property
    def seconds_per_element(self) -> float:
        """Own time per element handed out (0 when it handed out none)."""
        return self.self_seconds / self.elements if self.elements else 0.0


@dataclass(frozen=True)
class ConsumerStatistics:
    """The loop reading the pipeline (the training step), as the output stage saw it."""

    calls: int
    """``next()`` calls that returned an element."""
    wait_seconds: float
    """Time spent inside ``next()``: waiting for input."""
    between_seconds: float
    """Time between ``next()`` calls: the consumer's own work."""

    @property
    def wait_fraction(self) -> float:
        """Share of the consumer's time spent waiting for input (TF Profiler's "% of step
        time waiting for input")."""
        total = self.wait_seconds + self.between_seconds
        return self.wait_seconds / total if total else 0.0


@dataclass(frozen=True)
class TimelinePoint:
    """One sample of the pipeline while it ran."""

    seconds: float
    """Time since measuring started."""
    elements: int
    """Elements the output stage had handed out by then."""
    buffers: dict[int, float]
    """Filled share of each buffered stage's buffer, by stage ``id``."""


@dataclass(frozen=True)
class Span:
    """One timed call of a stage, for traces (Chrome trace-event ``"X"`` events)."""

    stage: int
    """The stage's ``id``."""
    start: float
    """Seconds since measuring started."""
    duration: float
    """Seconds the call took."""
    thread: str
    """Name of the thread that made the call."""
    process: int
    """Process id (worker processes have their own)."""


@dataclass(frozen=True)
class TuningDecision:
    """One change the tuner made."""

    seconds: float
    """When, in seconds since the pipeline started."""
    stage: str
    """The stage's name."""
    setting: str
    """What changed (``"workers"``)."""
    old: int
    """The value before."""
    new: int
    """The value after."""
    reason: str
    """Why, with the measurements behind it."""
    figures: dict[str, float] = field(default_factory=dict, hash=False)
    """The measurements behind it, by name: ``rate`` (elements per second at the setting
    judged), ``rate_before`` (at the setting before a change tried), ``waited`` (share of
    the consumer's calls that waited), ``busy`` (share of the workers' time occupied),
    ``occupied`` (workers its tasks kept busy), ``pulling`` (share of the time spent
    pulling its input), ``cpu_share`` (share of its calls' wall time on a CPU), ``bound``
    (the most workers it may have now), ``by_cpu`` and ``by_ram`` (that bound from its
    calls' CPU time and from the RAM budget); ``gil_share``, ``busy_alone``,
    ``busy_together`` and ``concurrency`` from its executor choice's measurement. Only
    those that applied."""


@dataclass(frozen=True)
class PipelineStatistics:
    """Everything measured over one run of a pipeline."""

    seconds: float
    """Wall time measured."""
    stages: tuple[StageStatistics, ...]
    """Every stage, output first (``stages[i].id == i``)."""
    consumer: ConsumerStatistics
    """The loop that read the output."""
    timeline: tuple[TimelinePoint, ...] = ()
    """Samples taken while it ran (every 100 ms by default)."""
    spans: tuple[Span, ...] = ()
    """Timed calls kept for a trace (empty unless tracing was asked for)."""
    tuning: tuple[TuningDecision, ...] = ()
    """What AUTOTUNE changed while it ran, and why (:mod:`feedline.autotune.tuner`)."""

    @property
    def elements(self) -> int:
        """Elements the pipeline handed to its consumer."""
        return self.stages[0].elements if self.stages else 0

    @property
    def throughput(self) -> float:
        """Output elements per second."""
        return self.elements / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class Advice:
    """A concrete rewrite that should make the pipeline faster."""

    kind: str
    """What to do: ``"parallelize"``, ``"processes"``, ``"vectorize"``, ``"prefetch"``,
    ``"cache"``, ``"snapshot"`` or ``"consumer"``."""
    stage: int | None
    """The stage it is about (``None``: the whole pipeline)."""
    message: str
    """What to change, in words, naming the stage (``"parallelize map(parse): ..."``)."""
    rewrite: str
    """The change as code, a method chain to put after the dataset it changes
    (``".map(parse, num_parallel_calls=fl.AUTOTUNE)"``)."""
    predicted_speedup: float
    """Throughput after / before, as the model predicts."""
    verified_speedup: float | None = None
    """Throughput after / before, measured: the median over the verification's rounds
    (``None`` unless verified)."""
    verified_range: tuple[float, float] | None = None
    """The lowest and highest speed-up measured in those rounds (``None`` unless verified):
    how far one measurement can be trusted on this machine."""


@dataclass(frozen=True)
class Bottleneck:
    """The stage that limits throughput."""

    stage: int
    """Its ``id``."""
    name: str
    """Its name."""
    share: float
    """Its share of the critical path's time (0..1)."""
    speedup_without: float
    """How much faster the pipeline would be if this stage took no time (the model's
    estimate, bounded by the next slowest part)."""


@dataclass(frozen=True)
class ProfileReport:
    """What :func:`feedline.profile` found: is the consumer input-bound, which stage limits
    the pipeline, and what to do about it."""

    statistics: PipelineStatistics
    """The measurements."""
    input_bound: bool
    """Whether the consumer waited for input a significant share of its time (> 10%)."""
    bottleneck: Bottleneck | None
    """The stage on the critical path that takes the most time (``None``: nothing measured)."""
    advice: tuple[Advice, ...] = ()
    """Rewrites, most promising first."""
    cores: int = 1
    """CPU cores available to the pipeline when it was measured."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """Remarks on the measurement (a short run, a pipeline that ended early)."""

    @property
    def throughput(self) -> float:
        """Output elements per second."""
        return self.statistics.throughput


def to_json(record: Any) -> str:
    """Any of these records as JSON (stage ids as keys become strings).

    Example:
        >>> print(to_json(ConsumerStatistics(calls=2, wait_seconds=0.5, between_seconds=1.5)))
        {"calls": 2, "wait_seconds": 0.5, "between_seconds": 1.5}
    """
    return json.dumps(dataclasses.asdict(record))
