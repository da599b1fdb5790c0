"""``fl.profile``: measure a pipeline, name its bottleneck, say what to change.

The model behind the analysis is tf.data's and Plumber's: a pipeline is a set of
*segments* running at once, each a group of stages that share the threads they run on (the
consumer's thread; each read-ahead stage's workers). A segment's *load* is the work its
stages did per second of the run, divided by the threads it has: a load of 1 means its
threads never rested. The segment with the highest load limits throughput; within it, the
stage with the most own time is the bottleneck. The consumer's own work (time between its
``next()`` calls) is a segment too, and so is the CPU (all work over the cores): a pipeline
cannot be faster than its busiest part. The model's arithmetic (segments, loads, GIL-bound
threads, the bottleneck) lives in :mod:`feedline.profiling.model`, which the tuner
(:mod:`feedline.autotune.tuner`) shares; this module analyses a run with it and advises.

A rewrite's predicted speed-up is the highest load before over the highest load after the
change (a stage with no cost, a stage on more threads or processes, a buffer between the
consumer and the pipeline). ``verify=True`` applies each rewrite it can build to the
dataset and measures it against the pipeline as written, in alternating rounds (one
measurement swings by 2x on a busy machine); advice measured slower is taken back, and the
rounds' spread is reported with the median.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from statistics import median
from typing import Any

from feedline.core.constants import AUTOTUNE
from feedline.core.dataset import Dataset
from feedline.core.options import Options, ProfilingOptions
from feedline.core.validation import schedulable_cpus
from feedline.profiling import model
from feedline.profiling.records import (
    Advice,
    Bottleneck,
    PipelineStatistics,
    ProfileReport,
    StageStatistics,
)

INPUT_BOUND_WAIT = 0.10
"""Share of the consumer's time spent waiting above which it is called input-bound."""

MIN_PREDICTED_SPEEDUP = 1.1
"""Rewrites predicted to gain less than this are not advised."""

VERIFY_ROUNDS = 3
"""Rounds of the verification: each measures the pipeline as written, then each rewrite,
for ``seconds / VERIFY_ROUNDS``; a speed-up is the median of the rounds' ratios."""

VECTORIZE_BELOW_SECONDS = 50e-6
"""Per-element map calls cheaper than this are mostly call overhead: batch first."""

_LATER_EPOCHS = {"consumer": -1, "cache": 1, "snapshot": 1}
"""Sort order of advice kinds: whether the consumer is the limit comes first, changes that
pay from the second epoch on (cache, snapshot) after those that pay at once."""

_RANDOM = ("shuffle", "global_shuffle", "random")


def profile(dataset: Dataset, seconds: float = 5.0, consumer: Callable[[Any], None] | None = None,
            *, verify: bool = False, trace: bool = False,
            max_elements: int | None = None) -> ProfileReport:
    """Run ``dataset`` for ``seconds`` with statistics on and analyse what limits it.

    Args:
        dataset: The pipeline.
        seconds: How long to read it (less if it ends or ``max_elements`` are read).
        consumer: Called with every element, as the training step would be (``None``: the
            elements are only pulled, which measures the pipeline alone).
        verify: Apply each advised rewrite that can be built automatically and measure it
            against the pipeline as written (:data:`VERIFY_ROUNDS` alternating rounds that
            take ``seconds`` in all for each): the median speed-up and the rounds' range are
            reported, and advice measured slower than the pipeline as written is taken back
            (named in the notes).
        trace: Keep timed calls for :func:`feedline.profiling.trace.write_chrome_trace`.
        max_elements: Stop after this many elements.

    Returns:
        A :class:`~feedline.profiling.records.ProfileReport`. Elements whose computation
        raised are skipped and counted in its notes (with the first error); an error of
        ``consumer`` is raised.

    Example:
        >>> import time
        >>> import feedline as fl
        >>> def slow(x):
        ...     time.sleep(0.001)
        ...     return x
        >>> ds = fl.Dataset.range(400).map(slow).batch(8)
        >>> report = fl.profile(ds, seconds=2)
        >>> report.bottleneck.name, report.advice[0].kind
        ('map(slow)', 'parallelize')
    """
    if not seconds > 0:
        raise ValueError(f"profile(seconds) must be > 0, got {seconds!r}")
    statistics, nodes, delivered, errors = _measure_with_statistics(
        dataset, seconds, consumer, max_elements, trace)
    report = analyse(statistics)
    notes = list(report.notes)
    if errors.note():
        notes.append(errors.note())
    if delivered == 0 and errors.count:
        # Every element failed: the times measured are those of failing, and no rewrite
        # makes a failing pipeline useful.
        report = replace(report, advice=())
        notes.append("no advice: every element raised an error; fix it first "
                     "(or skip bad elements on purpose with ignore_errors())")
    elif statistics.elements == 0:
        notes.append("the pipeline handed out no element while measured")
    if verify and report.advice:
        report, verify_notes = _verify(dataset, report, nodes, seconds, consumer, max_elements)
        notes.extend(verify_notes)
    return replace(report, notes=tuple(notes))


def _measure_with_statistics(dataset: Dataset, seconds: float,
                             consumer: Callable[[Any], None] | None,
                             max_elements: int | None, trace: bool
                             ) -> tuple[PipelineStatistics, list[Any], int, _Errors]:
    """The statistics, the stages' dataset nodes, the elements delivered and the errors."""
    options = Options(profiling=ProfilingOptions(statistics=True, trace=trace))
    with iter(dataset.with_options(options)) as iterator:
        delivered, _, errors = _drain(iterator, seconds, consumer, max_elements)
        collector = iterator._collector
        collector.stop()
        return iterator.statistics(), collector.stage_nodes(), delivered, errors


@dataclass
class _Errors:
    """The pipeline's errors met while measuring: how many, and the first."""

    count: int = 0
    first: BaseException | None = None

    def note(self) -> str | None:
        if not self.count:
            return None
        return (f"{self.count} element(s) raised an error while measured, and were skipped "
                f"(as ignore_errors() would); the first: {type(self.first).__name__}: "
                f"{self.first}")


def _drain(iterator: Any, seconds: float, consumer: Callable[[Any], None] | None,
           max_elements: int | None) -> tuple[int, float, _Errors]:
    """Read until ``seconds`` passed, the end, or ``max_elements``: (elements, seconds,
    errors). An element whose computation raises is skipped and counted: the iterator goes
    on with the next one (tf.data's semantics), so one bad record does not end a profile."""
    started = time.perf_counter()
    deadline = started + seconds
    count = 0
    errors = _Errors()
    while True:
        try:
            element = next(iterator)
        except StopIteration:
            break
        except Exception as error:  # noqa: BLE001 - counted, reported in the notes
            errors.count += 1
            errors.first = errors.first or error
        else:
            if consumer is not None:
                consumer(element)
            count += 1
        if (max_elements is not None and count >= max_elements) or \
                time.perf_counter() >= deadline:
            break
    return count, time.perf_counter() - started, errors


def measure_throughput(dataset: Dataset, seconds: float,
                       consumer: Callable[[Any], None] | None = None,
                       max_elements: int | None = None) -> float:
    """Elements per second of ``dataset`` read for ``seconds`` (statistics off).

    Example:
        >>> import feedline as fl
        >>> measure_throughput(fl.Dataset.range(100), seconds=1) > 0
        True
    """
    with iter(dataset) as iterator:
        count, elapsed, _ = _drain(iterator, seconds, consumer, max_elements)
    return count / elapsed if elapsed > 0 else 0.0


# ---------------------------------------------------------------------- the analysis
def _speedup(before: dict[str, float], after: dict[str, float]) -> float:
    top_before, top_after = max(before.values()), max(after.values())
    if top_after <= 0:
        return 1.0
    return max(1.0, top_before / top_after)


def analyse(statistics: PipelineStatistics, cores: int | None = None) -> ProfileReport:
    """The bottleneck and advice for measured ``statistics`` (what :func:`profile` returns,
    without running anything).

    Example:
        >>> from feedline.profiling.records import (ConsumerStatistics, PipelineStatistics,
        ...                                         StageStatistics)
        >>> stage = StageStatistics(id=0, parent=None, name="map(f)", operation="map",
        ...     elements=100, bytes=800, self_seconds=0.9, input_seconds=0.05,
        ...     wait_seconds=0.95, parallelism=1, asynchronous=False)
        >>> stats = PipelineStatistics(seconds=1.0, stages=(stage,),
        ...     consumer=ConsumerStatistics(calls=100, wait_seconds=0.95, between_seconds=0.05))
        >>> report = analyse(stats, cores=4)
        >>> report.input_bound, report.bottleneck.name, report.advice[0].rewrite
        (True, 'map(f)', '.map(f, num_parallel_calls=fl.AUTOTUNE)')
    """
    cores = cores or schedulable_cpus()
    stages = statistics.stages
    consumer = statistics.consumer
    input_bound = consumer.wait_fraction > INPUT_BOUND_WAIT
    if not stages or statistics.seconds <= 0:
        return ProfileReport(statistics, input_bound, None, (), cores,
                             ("nothing was measured",))
    segment_of = model.segments(stages)
    loads = model.loads(statistics, segment_of, cores)
    worst = model.bottleneck(stages, segment_of, loads)
    members = [s for s in stages if segment_of[s.id] == segment_of[worst.id]]
    segment_work = sum(s.self_seconds for s in members) or 1e-12
    without = {s.id: (0.0 if s.id == worst.id else s.self_seconds) for s in stages}
    bottleneck = Bottleneck(stage=worst.id, name=worst.name,
                            share=worst.self_seconds / segment_work,
                            speedup_without=_speedup(loads, model.loads(
                                statistics, segment_of, cores, own=without)))
    advice = _advise(statistics, segment_of, loads, worst, cores, input_bound)
    notes = []
    if statistics.seconds < 0.5:
        notes.append(f"measured for {statistics.seconds:.2f} s only: figures are rough")
    return ProfileReport(statistics, input_bound, bottleneck, tuple(advice), cores, tuple(notes))


def _advise(statistics: PipelineStatistics, segment_of: dict[int, str],
            loads: dict[str, float], worst: StageStatistics, cores: int,
            input_bound: bool) -> list[Advice]:
    stages = statistics.stages
    advice: list[Advice] = []

    def predict(own: dict[int, float] | None = None,
                threads: dict[str, float] | None = None) -> float:
        return _speedup(loads, model.loads(statistics, segment_of, cores, own, threads))

    if not input_bound and statistics.consumer.calls:
        advice.append(Advice(
            "consumer", None,
            f"the consumer waits for input only {statistics.consumer.wait_fraction:.0%} of "
            "its time: the pipeline keeps up, speed up the training step instead",
            "(no pipeline change)", 1.0))
    if worst.operation in ("batch", "padded_batch") and not worst.asynchronous:
        advice.append(Advice(
            "parallelize", worst.id,
            f"parallelize {worst.name}: stacking its elements into arrays runs on its "
            f"caller's thread and takes {_share(worst, segment_of, stages):.0%} of that "
            "thread's work (large elements: copies)",
            f".{worst.operation}(batch_size, num_parallel_calls=fl.AUTOTUNE)",
            _parallel_prediction(statistics, segment_of, loads, worst, cores)))
    if worst.operation in model.MAPS and not worst.asynchronous:
        advice.append(Advice(
            "parallelize", worst.id,
            f"parallelize {worst.name}: it runs on its caller's thread and takes "
            f"{_share(worst, segment_of, stages):.0%} of that thread's work (threads pay if "
            'it releases the GIL: NumPy, files, decoding; else add executor="process")',
            _parallel_rewrite(worst),
            _parallel_prediction(statistics, segment_of, loads, worst, cores)))
    gil_cores = model.gil_bound_cores(statistics, worst)
    if gil_cores is not None and worst.operation == "map":  # batch has no process executor
        workers = min(worst.parallelism, cores)
        advice.append(Advice(
            "processes", worst.id,
            f"run {worst.name} in worker processes: its {worst.parallelism} threads keep "
            f"only {gil_cores:.1f} cores busy while its consumer waits (the GIL serializes "
            "its Python)",
            _chain(worst, {"map": f', num_parallel_calls={workers}, executor="process"'}),
            predict(threads={segment_of[worst.id]: workers})))
    if worst.operation in model.MAPS and worst.elements and \
            worst.seconds_per_element < VECTORIZE_BELOW_SECONDS and _batch_above(stages, worst):
        advice.append(Advice(
            "vectorize", worst.id,
            f"batch before {worst.name} and vectorize it: each call costs "
            f"{worst.seconds_per_element * 1e6:.1f} us, mostly per-call overhead; the "
            "speed-up shown is the most it can give (the map free)",
            ".batch(B)" + _chain(worst, suffix="_batched"),
            predict(own=_moved(statistics, worst.id, 0.0))))
    cache = _below(stages, worst, ("cache",))
    if worst.operation in model.MAPS and cache is not None:
        advice.append(Advice(
            "cache", cache.id,
            f"move {cache.name} after {worst.name}: the cache keeps the input of the "
            "expensive map, so every epoch computes it again",
            _chain(worst) + ".cache()",
            predict(own=_moved(statistics, worst.id, 0.0))))
    # A snapshot of a prefix that shuffles differs every epoch, and one over a repeat() would
    # write every epoch (an infinite repeat(): never finish).
    if worst.operation in model.MAPS + ("batch", "tfrecord", "text_line", "parquet") and \
            _below(stages, worst, _RANDOM + ("repeat",)) is None and \
            _above(stages, worst, ("snapshot", "cache")) is None:
        prefix = _prefix_ids(stages, worst)
        advice.append(Advice(
            "snapshot", worst.id,
            f"snapshot the deterministic prefix ending at {worst.name}: later epochs read "
            "its output from disk instead of computing it (put shuffles after it)",
            _chain(worst) + ".snapshot(path)",
            predict(own={s.id: (0.0 if s.id in prefix else s.self_seconds) for s in stages})))
    top = stages[0]
    if not top.asynchronous and statistics.consumer.between_seconds > \
            0.05 * statistics.seconds and input_bound:
        wait = statistics.consumer.wait_seconds
        between = statistics.consumer.between_seconds
        advice.append(Advice(
            "prefetch", top.id,
            f"add prefetch after {top.name}: the consumer and the pipeline take turns "
            f"({between:.2f} s working, {wait:.2f} s waiting) instead of overlapping",
            ".prefetch(fl.AUTOTUNE)", (wait + between) / max(wait, between)))
    # Advice the model gives no gain is noise, not advice.
    advice = [item for item in advice
              if item.kind == "consumer" or item.predicted_speedup >= MIN_PREDICTED_SPEEDUP]
    # Changes that pay at once first, then those that pay from the second epoch on.
    advice.sort(key=lambda item: (_LATER_EPOCHS.get(item.kind, 0), -item.predicted_speedup))
    return advice


def _parallel_rewrite(stage: StageStatistics) -> str:
    return _chain(stage, {"map": ", num_parallel_calls=fl.AUTOTUNE"})


def _chain(stage: StageStatistics, extra: dict[str, str] | None = None,
           suffix: str = "") -> str:
    """``stage`` as the code that builds it, a method chain (``".map(f).filter(g)"`` for a
    fused stage), each operation's call given ``extra[operation]`` after its function and
    each function name ``suffix``: what a rewrite tells the user to write."""
    calls = []
    for operation, function in _operations(stage):
        calls.append(f".{operation}({function}{suffix}{(extra or {}).get(operation, '')})")
    return "".join(calls)


def _operations(stage: StageStatistics) -> list[tuple[str, str]]:
    """(operation, function name) of each user function ``stage`` runs: a fused stage's
    name lists its maps and filters, ``"map(f) -> filter(g)"``. A name that is not an
    identifier (``<lambda>``) is written ``fn``."""
    parts = stage.name.split(" -> ")
    found = []
    for part in parts:
        operation, _, rest = part.partition("(")
        function = rest[:-1] if rest.endswith(")") else ""
        if len(parts) == 1 or not operation.isidentifier():
            operation = stage.operation
        found.append((operation, function if function.isidentifier() else "fn"))
    return found


def _parallel_prediction(statistics: PipelineStatistics, segment_of: dict[int, str],
                         loads: dict[str, float], stage: StageStatistics, cores: int) -> float:
    """A map moved to its own ``cores`` workers: its work leaves its segment."""
    moved = dict(segment_of)
    moved[stage.id] = f"workers:{stage.id}"
    threads: dict[str, float] = {f"workers:{stage.id}": cores}
    return _speedup(loads, model.loads(statistics, moved, cores, threads=threads))


def _moved(statistics: PipelineStatistics, stage_id: int, seconds: float) -> dict[int, float]:
    return {s.id: (seconds if s.id == stage_id else s.self_seconds) for s in statistics.stages}


def _share(stage: StageStatistics, segment_of: dict[int, str],
           stages: tuple[StageStatistics, ...]) -> float:
    total = sum(s.self_seconds for s in stages if segment_of[s.id] == segment_of[stage.id])
    return stage.self_seconds / total if total else 0.0


def _ancestors(stages: tuple[StageStatistics, ...], stage: StageStatistics
               ) -> list[StageStatistics]:
    result = []
    parent = stage.parent
    while parent is not None:
        result.append(stages[parent])
        parent = stages[parent].parent
    return result


def _descendants(stages: tuple[StageStatistics, ...], stage: StageStatistics
                 ) -> list[StageStatistics]:
    return [s for s in stages if stage in _ancestors(stages, s)]


def _batch_above(stages: tuple[StageStatistics, ...], stage: StageStatistics) -> bool:
    return any(s.operation in ("batch", "padded_batch") for s in _ancestors(stages, stage))


def _below(stages: tuple[StageStatistics, ...], stage: StageStatistics,
           operations: tuple[str, ...]) -> StageStatistics | None:
    return next((s for s in _descendants(stages, stage) if s.operation in operations), None)


def _above(stages: tuple[StageStatistics, ...], stage: StageStatistics,
           operations: tuple[str, ...]) -> StageStatistics | None:
    return next((s for s in _ancestors(stages, stage) if s.operation in operations), None)


def _prefix_ids(stages: tuple[StageStatistics, ...], stage: StageStatistics) -> set[int]:
    return {stage.id} | {s.id for s in _descendants(stages, stage)}


# ---------------------------------------------------------------------- verification
def _verify(dataset: Dataset, report: ProfileReport, nodes: list[Any], seconds: float,
            consumer: Callable[[Any], None] | None, max_elements: int | None
            ) -> tuple[ProfileReport, list[str]]:
    """Measure each rewrite that can be built against ``dataset`` as written, in
    :data:`VERIFY_ROUNDS` rounds that alternate them (a machine's load drifts: each ratio
    compares measurements a few seconds apart), and take back advice measured slower."""
    rewritten = {index: _rewrite(dataset, item, nodes)
                 for index, item in enumerate(report.advice)}
    built = {index: candidate for index, candidate in rewritten.items() if candidate is not None}
    each = seconds / VERIFY_ROUNDS
    ratios: dict[int, list[float]] = {index: [] for index in built}
    baselines = []
    for _ in range(VERIFY_ROUNDS):
        baseline = measure_throughput(dataset, each, consumer, max_elements)
        baselines.append(baseline)
        for index, candidate in built.items():
            throughput = measure_throughput(candidate, each, consumer, max_elements)
            ratios[index].append(throughput / baseline if baseline else 0.0)
    kept, taken_back = [], []
    for index, item in enumerate(report.advice):
        if index not in ratios:
            kept.append(item)
            continue
        measured = replace(item, verified_speedup=median(ratios[index]),
                           verified_range=(min(ratios[index]), max(ratios[index])))
        if measured.verified_speedup < 1.0:
            taken_back.append(f"{item.kind} ({item.rewrite}) measured "
                              f"{_measured(measured)}")
        else:
            kept.append(measured)
    notes = []
    unverifiable = [item.kind for item in kept if item.verified_speedup is None
                    and item.kind != "consumer"]
    if unverifiable:
        notes.append(f"not verified (needs a change only you can make, or several epochs): "
                     f"{', '.join(unverifiable)}")
    if taken_back:
        notes.append("not advised, slower when measured: " + "; ".join(taken_back))
    notes.append(f"verified against the pipeline as written ({median(baselines):,.1f} "
                 f"elements/s without statistics) in {VERIFY_ROUNDS} alternating rounds of "
                 f"{each:.2f} s each; a speed-up is the rounds' median (lowest-highest)")
    return replace(report, advice=tuple(kept)), notes


def _measured(item: Advice) -> str:
    """``"1.42x (1.30-1.55)"``: the verified median and the rounds' range."""
    if item.verified_range is None:
        return f"{item.verified_speedup:.2f}x"
    low, high = item.verified_range
    return f"{item.verified_speedup:.2f}x ({low:.2f}-{high:.2f})"


def _rewrite(dataset: Dataset, item: Advice, nodes: list[Any]) -> Dataset | None:
    """``dataset`` with ``item`` applied, or ``None`` when it cannot be built automatically."""
    if item.kind == "prefetch":
        return dataset.prefetch(AUTOTUNE)
    if item.kind not in ("parallelize", "processes") or item.stage is None:
        return None
    target = nodes[item.stage] if item.stage < len(nodes) else None
    if target is None:
        return None

    def change(node: Any) -> Any:
        clone = node._with_inputs(node._inputs)
        clone.num_parallel_calls = AUTOTUNE
        if item.kind == "processes":
            clone.executor = "process"
        return clone

    return _replace_node(dataset, target, change)


def _replace_node(dataset: Dataset, target: Any, change: Callable[[Any], Any]) -> Dataset | None:
    """``dataset`` with the node matching ``target`` (the same node, or one of the same type
    and name: graph rewrites copy nodes) replaced by ``change(node)``."""
    found = False

    def rebuild(node: Any) -> Any:
        nonlocal found
        if not found and (node is target or (type(node) is type(target) and
                                              getattr(node, "name", None) ==
                                              getattr(target, "name", None))):
            found = True
            return change(node)
        inputs = [rebuild(child) for child in node._inputs]
        if all(new is old for new, old in zip(inputs, node._inputs)):
            return node
        return node._with_inputs(inputs)

    result = rebuild(dataset)
    return result if found else None


# ---------------------------------------------------------------------- text
def format_report(report: ProfileReport) -> str:
    """A plain-text summary of ``report`` (what ``feedline profile`` prints).

    Example:
        >>> import feedline as fl
        >>> text = format_report(fl.profile(fl.Dataset.range(100), seconds=1))
        >>> text.splitlines()[0].startswith("throughput:")
        True
    """
    statistics = report.statistics
    consumer = statistics.consumer
    lines = [
        (f"throughput: {report.throughput:,.1f} elements/s over {statistics.seconds:.2f} s "
         f"({statistics.elements:,} elements, {report.cores} cores)"),
        (f"input-bound: {'yes' if report.input_bound else 'no'} (the consumer waited "
         f"{consumer.wait_fraction:.0%} of its time)"),
    ]
    if report.bottleneck is not None:
        b = report.bottleneck
        lines.append(f"bottleneck: {b.name} ({b.share:.0%} of the critical path's work; "
                     f"without it the pipeline would be {b.speedup_without:.2f}x as fast)")
    lines.append("")
    lines.append(f"{'stage':<28} {'elements':>10} {'own s':>8} {'input s':>8} "
                 f"{'wait s':>8} {'par':>4} {'buffer':>8}")
    for stage in statistics.stages:
        depth = 0
        parent = stage.parent
        while parent is not None:
            depth += 1
            parent = statistics.stages[parent].parent
        buffer = ("" if stage.buffer_size is None else
                  f"{(stage.buffer_mean or 0):.0%}/{stage.buffer_size}")
        name = ("  " * depth + stage.name)[:28]
        lines.append(f"{name:<28} {stage.elements:>10,} {stage.self_seconds:>8.3f} "
                     f"{stage.input_seconds:>8.3f} {stage.wait_seconds:>8.3f} "
                     f"{stage.parallelism:>4} {buffer:>8}")
    if report.advice:
        lines.append("")
        lines.append("advice:")
        for item in report.advice:
            verified = ("" if item.verified_speedup is None
                        else f", measured {_measured(item)}")
            lines.append(f"- {item.message}\n    {item.rewrite}  "
                         f"(predicted {item.predicted_speedup:.2f}x{verified})")
    if statistics.tuning:
        lines.append("")
        lines.append("AUTOTUNE changed:")
        for decision in statistics.tuning:
            lines.append(f"- at {decision.seconds:.2f} s, {decision.stage}: {decision.setting} "
                         f"{decision.old} -> {decision.new} ({decision.reason})")
    for note in report.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)
