"""Pipeline options: how a pipeline runs, never what it computes (except ``deterministic``).

Options set anywhere in a graph with ``with_options`` apply to the whole pipeline, as in
tf.data; when several are set, later (downstream) settings win field by field.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import numbers
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from feedline.core.validation import schedulable_cpus


@dataclass(frozen=True)
class ThreadingOptions:
    """Thread budget and time limits of one pipeline.

    Attributes:
        max_parallelism: Upper bound on threads any one parallel stage uses; ``None`` means
            the number of CPUs this process may run on (an ``AUTOTUNE`` map whose calls
            wait may then have more, :data:`feedline.execution.stage_knobs.MAX_THREADS` at most).
        element_timeout: Seconds a read-ahead stage (prefetch, parallel map/batch/interleave)
            waits for one element before raising ``TimeoutError`` naming the stage and the
            element (PyTorch DataLoader's ``timeout``); ``None`` waits as long as it takes.
            The element keeps its place: a later ``next()`` waits for it again.
        close_timeout: Seconds closing a stage waits for its running user functions; threads
            still running one then are abandoned as daemon threads with a ``RuntimeWarning``
            naming the stage, so ``close()``, ``break`` and interpreter exit never hang.

    Example:
        >>> ThreadingOptions(element_timeout=30.0).close_timeout
        2.0
    """

    max_parallelism: int | None = None
    element_timeout: float | None = None
    close_timeout: float = 2.0

    def __post_init__(self) -> None:
        _check_types(self)
        _check_positive(self, "max_parallelism")
        if self.element_timeout is not None and not self.element_timeout > 0:
            raise ValueError(f"element_timeout must be None or > 0, got {self.element_timeout!r}")
        if not self.close_timeout >= 0:
            raise ValueError(f"close_timeout must be >= 0, got {self.close_timeout!r}")


AUTOTUNE_FIXED_BUFFER = 2
"""Buffer of ``prefetch(AUTOTUNE)`` when autotuning is switched off."""


@dataclass(frozen=True)
class AutotuneOptions:
    """What ``AUTOTUNE`` may use.

    Attributes:
        enabled: Whether ``AUTOTUNE`` sizes adapt while running: ``prefetch(AUTOTUNE)`` grows its
            buffer each time its consumer drains it while its input keeps up with the
            consumer on average. When off, that buffer stays at
            :data:`AUTOTUNE_FIXED_BUFFER` elements.
        cpu_budget: Workers an ``AUTOTUNE`` stage may use; ``None`` means one per CPU (within
            ``ThreadingOptions.max_parallelism``), and lets the tuner give a threaded
            ``map`` up to two threads per CPU where it measures faster with them (its
            function holds the GIL part of the time, leaving cores idle). It caps CPU
            time, not threads: a tuned threaded ``map`` whose calls wait (files, the
            network) may have more threads, as many as their measured CPU time adds up to
            the budget (:mod:`feedline.autotune.tuner`).
        ram_budget: Bytes one ``prefetch(AUTOTUNE)`` buffer may grow to, estimated from the
            size of its elements, and the bytes a tuned ``map``'s workers may hold (their
            elements in flight and threads); ``None`` means a quarter of the machine's
            memory.
        choose_executor: Whether a ``map(f, num_parallel_calls=AUTOTUNE)`` given no
            ``executor`` measures ``f`` on threads over its first calls and moves the rest
            to worker processes when the GIL serializes them and processes pay
            (:mod:`feedline.placement.map_executor`); ``False`` (or ``enabled=False``)
            keeps such maps on threads (a tuned map still measures its first calls). An
            explicit ``executor`` is always obeyed. What it measured also sets where the
            tuner starts such a map: one worker (on its consumer's thread) for calls the
            GIL serializes, all its threads for calls that leave CPUs idle.
        processes: Whether a pipeline ending with ``prefetch(AUTOTUNE)`` may move to worker
            processes (:mod:`feedline.placement.auto`): ``None`` decides from a short
            trial on threads, ``True`` moves whenever it keeps the output, ``False`` never.
        tune: Whether the tuner (:mod:`feedline.autotune.tuner`) sets how many workers of
            each threaded ``map(num_parallel_calls=AUTOTUNE)`` run at once, from what the
            stage measures while running (``False``: all ``cpu_budget`` of them).
        status_seconds: Write a one-line live status to standard error every this many
            seconds of iteration: the rate, the consumer's wait, where the pipeline runs
            and each tuned setting (:mod:`feedline.autotune.status`); ``None``: never.
    """

    enabled: bool = True
    cpu_budget: int | None = None
    ram_budget: int | None = None
    choose_executor: bool = True
    processes: bool | None = None
    tune: bool = True
    status_seconds: float | None = None

    def __post_init__(self) -> None:
        _check_types(self)
        _check_positive(self, "cpu_budget")
        _check_positive(self, "ram_budget")
        _check_positive(self, "status_seconds")


@dataclass(frozen=True)
class OptimizationOptions:
    """Static graph rewrites applied before iteration; each can be switched off.

    Attributes:
        map_fusion: Run consecutive inline ``map`` and ``filter`` stages as one stage.
        inject_prefetch: Add a ``prefetch(AUTOTUNE)`` at the end of a pipeline that has none.
        map_vectorization: Run ``range`` followed by maps and filters whose functions
            are provably elementwise (one arithmetic or comparison expression of the element,
            such as ``lambda x: x % 2 == 0``), with any ``num_parallel_calls`` (not
            ``executor="process"``), and the ``batch`` after them, on chunks of elements with
            NumPy (:mod:`feedline.optimize.map_vectorization`); elements, errors and
            checkpoints are those of the element-by-element run.
        map_and_batch_fusion: Run ``map(f).batch(n)`` as one stage that calls ``f``'s batch
            form once per batch, when ``f`` offers one (feedline's record decoders, such as
            ``fl.datasets.load``'s; :mod:`feedline.transforms.map_and_batch`); elements and
            errors are those of ``map`` then ``batch``, checkpoints the fused stage's own.
    """

    map_fusion: bool = True
    inject_prefetch: bool = False
    map_vectorization: bool = True
    map_and_batch_fusion: bool = True

    def __post_init__(self) -> None:
        _check_types(self)


class AutoShardPolicy(enum.IntEnum):
    """How ``Dataset.distribute`` gives each input pipeline its share (tf.data's values).

    Attributes:
        OFF: No sharding: every pipeline reads all of the input.
        AUTO: Random-access pipelines are sharded by index (see ``DATA``); otherwise
            ``FILE`` if the pipeline reads a list of files (at least one per pipeline), else
            ``DATA``.
        FILE: Pipeline ``i`` of ``n`` reads files ``i``, ``i + n``, ...; an error if the
            pipeline reads no list of files or has fewer files than pipelines.
        DATA: Pipeline ``i`` of ``n`` keeps elements ``i``, ``i + n``, ... of the source; a
            random-access pipeline reads only those, by index, on top of its random-access
            part (after a ``global_shuffle``), so checkpoints are elastic
            (:mod:`feedline.distribute.index_shard`).

    Example:
        >>> AutoShardPolicy.AUTO.name, int(AutoShardPolicy.OFF)
        ('AUTO', -1)
    """

    OFF = -1
    AUTO = 0
    FILE = 1
    DATA = 2


@dataclass(frozen=True)
class DistributeOptions:
    """How ``Dataset.distribute`` shards the pipeline (tf.data's ``experimental_distribute``).

    Attributes:
        auto_shard_policy: The :class:`AutoShardPolicy` used when ``distribute`` is given none.

    Example:
        >>> DistributeOptions(auto_shard_policy=AutoShardPolicy.FILE).auto_shard_policy.name
        'FILE'
    """

    auto_shard_policy: AutoShardPolicy = AutoShardPolicy.AUTO

    def __post_init__(self) -> None:
        _check_types(self)


@dataclass(frozen=True)
class ProfilingOptions:
    """What a pipeline measures about itself while it runs (see :func:`feedline.profile`).

    Attributes:
        statistics: Count and time every stage (``PipelineIterator.statistics()``): elements,
            bytes, time working versus waiting on inputs, buffer occupancy, the consumer's
            wait. Off, it costs nothing; on, a counter per element and a clock read per
            sampled call (benchmarks/profiling.py measures it).
        trace: Also keep timed calls as spans for a Chrome trace (implies ``statistics``).
        interval: Seconds between samples of buffers and output (the timeline).

    Example:
        >>> ProfilingOptions(statistics=True).interval
        0.1
    """

    statistics: bool = False
    trace: bool = False
    interval: float = 0.1

    def __post_init__(self) -> None:
        _check_types(self)
        if not self.interval > 0:
            raise ValueError(f"ProfilingOptions.interval must be > 0, got {self.interval!r}")


@dataclass(frozen=True)
class Options:
    """Settings for a whole pipeline (``tf.data.Options``).

    Attributes:
        deterministic: ``None`` keeps each stage's own setting; ``False`` lets every parallel
            stage hand out elements in completion order; ``True`` forces input order.
        seed: Default seed for random stages that were given none.
        threading: Thread budget.
        autotune: Autotuning budget.
        optimization: Which graph rewrites run.
        distribute: How ``Dataset.distribute`` shards the pipeline.
        profiling: What the pipeline measures about itself.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(3).with_options(fl.Options(deterministic=False))
        >>> ds.options().deterministic
        False
    """

    deterministic: bool | None = None
    seed: int | None = None
    threading: ThreadingOptions = field(default_factory=ThreadingOptions)
    autotune: AutotuneOptions = field(default_factory=AutotuneOptions)
    optimization: OptimizationOptions = field(default_factory=OptimizationOptions)
    distribute: DistributeOptions = field(default_factory=DistributeOptions)
    profiling: ProfilingOptions = field(default_factory=ProfilingOptions)

    def __post_init__(self) -> None:
        _check_types(self)

    def merge(self, newer: Options) -> Options:
        """Combine with ``newer``; fields ``newer`` sets to a non-default value win."""
        return _merge(self, newer)  # type: ignore[return-value]

    def max_parallelism(self) -> int:
        """Threads a parallel stage may use under these options."""
        cpus = schedulable_cpus()
        limit = self.threading.max_parallelism
        return max(1, min(cpus, limit) if limit else cpus)

    def autotune_parallelism(self) -> int:
        """Workers of an ``AUTOTUNE`` stage: the thread limit, within the CPU budget.

        Example:
            >>> Options(autotune=AutotuneOptions(cpu_budget=1)).autotune_parallelism()
            1
        """
        budget = self.autotune.cpu_budget
        return max(1, min(self.max_parallelism(), budget) if budget else self.max_parallelism())

    def autotune_ram_budget(self) -> int:
        """Bytes one autotuned buffer may hold (``ram_budget`` or a quarter of the memory)."""
        if self.autotune.ram_budget is not None:
            return self.autotune.ram_budget
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
        except (ValueError, OSError, AttributeError):  # not every platform reports it
            return 1 << 30


def _check_types(options: Any) -> None:
    """Raise ``TypeError`` naming the field and the expected type for a wrongly typed field.

    Checked at construction: a wrong type found later surfaces as an internal
    ``AttributeError`` far from the mistake (``Options(autotune=True)``). ``bool`` is not
    accepted where a number is meant, nor a number where a ``bool`` is (``"yes"`` and ``1``
    are not ``True`` here, as in ``tf.data.Options``).
    """
    hints = _type_hints(type(options))
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        expected = hints[f.name]
        allowed = typing.get_args(expected) if isinstance(expected, types.UnionType) else (expected,)
        if any(_is_instance(value, kind) for kind in allowed):
            continue
        if AutoShardPolicy in allowed and isinstance(value, int) and not isinstance(value, bool):
            try:  # tf.data accepts the policy's integer value too
                object.__setattr__(options, f.name, AutoShardPolicy(value))
                continue
            except ValueError:
                pass
        names = " or ".join("None" if kind is type(None) else kind.__name__ for kind in allowed)
        raise TypeError(
            f"{type(options).__name__}.{f.name} must be {names}, got {value!r} "
            f"({type(value).__name__})"
        )


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_instance(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if kind is int:  # NumPy integers too (a seed from np.random)
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    return isinstance(value, kind)


def _check_positive(options: Any, name: str) -> None:
    value = getattr(options, name)
    if value is not None and value <= 0:
        raise ValueError(f"{type(options).__name__}.{name} must be None or > 0, got {value!r}")


def _merge(old: Any, new: Any) -> Any:
    changes = {}
    defaults = type(new)()
    for f in dataclasses.fields(new):
        new_value, old_value = getattr(new, f.name), getattr(old, f.name)
        if dataclasses.is_dataclass(new_value):
            changes[f.name] = _merge(old_value, new_value)
        elif new_value != getattr(defaults, f.name):
            changes[f.name] = new_value
    return dataclasses.replace(old, **changes)


def _refuse_assignment(self: Any, name: str, value: Any) -> None:
    """Options are values (shared by every pipeline they were given to, part of their
    fingerprints): tf.data's ``options.deterministic = False`` habit says how instead."""
    kind = type(self).__name__
    raise dataclasses.FrozenInstanceError(
        f"cannot assign to field {name!r}: feedline's {kind} are immutable values; make a "
        f"new one instead, e.g. fl.{kind}({name}=...) or dataclasses.replace(options, "
        f"{name}=...), then ds.with_options(options)")


for _options_class in (ThreadingOptions, AutotuneOptions, OptimizationOptions, DistributeOptions,
                       ProfilingOptions, Options):
    _options_class.__setattr__ = _refuse_assignment  # type: ignore[method-assign,assignment]
del _options_class
