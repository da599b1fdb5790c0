"""The iterator protocol: every running stage of a pipeline is a :class:`DatasetIterator`.

Iterators form a tree mirroring the dataset graph. Each owns the threads, buffers and
files of its stage, closes its inputs when closed, and saves/restores its position as a
small JSON-safe dict that nests its inputs' states.
"""

from __future__ import annotations

import abc
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from feedline.core.errors import CheckpointError
from feedline.core.options import Options
from feedline.core.state_shape import shape_mismatch, state_shape

State = dict[str, Any]


class Autotuner(Protocol):
    """What stages and the runner ask of a pipeline's tuner
    (:class:`feedline.autotune.tuner.Tuner`)."""

    def register(self, stage: Any, key: object = None) -> Any:
        """Tune ``stage`` from now on; the counters it reports its calls to."""

    def record(self, stage: str, setting: str, old: int, new: int, reason: str,
               figures: dict[str, float] | None = None) -> None:
        """Log a change a stage made itself."""

    def wake(self) -> None:
        """Look at the stages now."""

    def stop(self) -> None:
        """End the tuner's thread."""

    def decisions(self) -> tuple[Any, ...]:
        """Every change made so far."""


class StatisticsCollector(Protocol):
    """What stages and the runner ask of a pipeline's statistics collector
    (:class:`feedline.profiling.collect.Collector`)."""

    def build(self, node: Any, ctx: IteratorContext,
              make: Callable[[Any, IteratorContext], DatasetIterator]) -> DatasetIterator:
        """``make(node, ctx)``, measured."""

    def build_inner(self, dataset: Any, ctx: IteratorContext, owner: str) -> DatasetIterator:
        """The iterator of a dataset ``owner`` made while running, measured."""

    def drive(self, root: Any) -> None:
        """Sample from ``root``'s reads (a worker process's pipeline)."""

    def statistics(self) -> Any:
        """What was measured so far (:class:`feedline.profiling.records.PipelineStatistics`)."""

    @property
    def started_ns(self) -> int:
        """When measuring began, on the probes' clock."""


class Kept(Protocol):
    """What a stage keeps for its next iterator (a pool of workers)."""

    def shutdown(self) -> None:
        """Release it: the pipeline closes, or another node's is kept."""


_make_tuner: Callable[[], Autotuner] | None = None


def serve_tuners(make: Callable[[], Autotuner] | None) -> Callable[[], Autotuner] | None:
    """Make ``make`` what builds each pipeline's tuner; return what did before.

    :mod:`feedline.pipeline`, at the top of the layers, serves it when imported, so that this
    layer never imports the tuner.

    Example:
        >>> class Quiet:
        ...     def stop(self): print("stopped")
        >>> before = serve_tuners(Quiet)
        >>> ctx = IteratorContext()
        >>> type(ctx.autotuner()).__name__
        'Quiet'
        >>> ctx.close_kept()
        stopped
        >>> _ = serve_tuners(before)
    """
    global _make_tuner
    before, _make_tuner = _make_tuner, make
    return before

_CLOSE_FLAG_LOCK = threading.Lock()
"""Guards only the flip of a stage's ``_closed`` flag (held for no other work)."""


@dataclass
class IteratorContext:
    """What every iterator of one pipeline shares.

    Attributes:
        options: The pipeline's merged options.
        iterations: How many iterators each dataset node has built in this pipeline run
            (``repeat`` builds one per epoch), so per-epoch behaviour such as reshuffling
            knows its epoch. Weakly keyed by the node itself, not ``id(node)``: a node made
            inside a ``flat_map`` function and freed could otherwise pass its count on to a
            new node that reuses its id. Use :meth:`start_iteration` / :meth:`set_iterations`.
        kept: What a stage keeps from one of its iterators to the next within this pipeline
            run (the worker processes of ``multiprocess`` stay alive across the epochs of a
            ``repeat``), by node. Each has a ``shutdown()``, called by :meth:`close_kept`
            when the pipeline closes.
        closing: Set while the pipeline closes: stages then release rather than keep.
        first_epoch: The epoch every node's first iterator counts as (a training loop that
            builds one pipeline iterator per epoch passes the epoch, so a reshuffling stage
            gives each epoch its own order).
        continue_epochs: Set for a run started by ``iter(dataset)``: a seeded stage that
            reshuffles each iteration continues after the epochs of the earlier iterators of
            its dataset object, as tf.data's seed generators do
            (:mod:`feedline.core.seed_epochs`).
        statistics: The pipeline's statistics collector
            (:class:`feedline.profiling.collect.Collector`) when statistics are on, else
            ``None``: every stage iterator is then built through it (see
            :meth:`feedline.core.dataset.Dataset.__init_subclass__`).
        tuner: The pipeline's :class:`feedline.autotune.tuner.Tuner`, made by the first
            stage that asks for it (:meth:`autotuner`).
        remembered: What stages learned in earlier iterators of this pipeline run, for the
            next (an ``AUTOTUNE`` map's choice of threads or processes), by key.
    """

    options: Options = field(default_factory=Options)
    iterations: weakref.WeakKeyDictionary[Any, int] = field(
        default_factory=weakref.WeakKeyDictionary, repr=False)
    _iterations_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Values are Kept; typed Any so that the stage taking its own back gets its own type.
    kept: dict[Any, Any] = field(default_factory=dict, repr=False)
    closing: bool = False
    first_epoch: int = 0
    continue_epochs: bool = False
    statistics: StatisticsCollector | None = field(default=None, repr=False)
    tuner: Autotuner | None = field(default=None, repr=False)
    remembered: dict[Any, Any] = field(default_factory=dict, repr=False)

    def keep(self, node: object, resource: Kept) -> None:
        """Keep ``resource`` for ``node``'s next iterator, shutting down what was kept for
        other nodes: only the latest is likely to be reused (the next epoch of a
        ``repeat``), while nodes made inside ``interleave``/``flat_map`` functions are new
        each time and would otherwise pile up."""
        for other in [key for key in self.kept if key is not node]:
            self.kept.pop(other).shutdown()
        previous = self.kept.pop(node, None)
        if previous is not None:
            previous.shutdown()
        self.kept[node] = resource

    def autotuner(self) -> Autotuner:
        """The pipeline's tuner (made on first use by what :func:`serve_tuners` was given;
        stopped by :meth:`close_kept`)."""
        with self._iterations_lock:
            if self.tuner is None:
                if _make_tuner is None:
                    raise RuntimeError("no tuner is served: import feedline (feedline.pipeline "
                                       "serves it) before running a pipeline")
                self.tuner = _make_tuner()
            return self.tuner

    def close_kept(self) -> None:
        """Shut down everything stages kept for their next iterator, and the tuner."""
        self.closing = True
        if self.tuner is not None:
            self.tuner.stop()
        while self.kept:
            _, resource = self.kept.popitem()
            resource.shutdown()

    def start_iteration(self, node: object) -> int:
        """Count one more iterator of ``node``; return its 0-based number (the epoch)."""
        with self._iterations_lock:
            epoch = self.iterations.get(node, self.first_epoch)
            self.iterations[node] = epoch + 1
            return epoch

    def set_iterations(self, node: object, count: int) -> None:
        """Make ``count`` the next epoch of ``node`` (after restoring epoch ``count - 1``)."""
        with self._iterations_lock:
            self.iterations[node] = count

    def make_inner_iterator(self, dataset: Any, owner: str) -> DatasetIterator:
        """Build the iterator of a dataset a stage made while running (``interleave`` and
        ``flat_map`` make one per input element), telling statistics which stage owns it."""
        if self.statistics is None:
            return dataset._make_iterator(self)
        return self.statistics.build_inner(dataset, self, owner)

    def deterministic(self, stage_setting: bool | None) -> bool:
        """Whether a parallel stage must keep input order (stage setting, then options, then True)."""
        if stage_setting is not None:
            return stage_setting
        if self.options.deterministic is not None:
            return self.options.deterministic
        return True


class DatasetIterator(abc.ABC):
    """One running stage. Subclasses implement ``__next__``, ``_get_state`` and ``_set_state``.

    ``state_dict()`` wraps ``_get_state()`` with the stage's :attr:`OPERATION` (or, for
    stages that do not name one, the class name) and ``STATE_VERSION``, so that a state
    restored into the wrong pipeline or an incompatible version fails clearly. Keying states
    by operation, not class, lets the iterators of one operation (inline and parallel map,
    the fused chain) share one state layout: a checkpoint restores whatever execution
    choices (``num_parallel_calls``, ``deterministic``, fusion) the restoring run makes.
    """

    STATE_VERSION: ClassVar[int] = 1
    OPERATION: ClassVar[str | None] = None
    """The operation this iterator runs (``"map"``); every iterator of it writes one layout."""

    def __init__(self, ctx: IteratorContext, inputs: Sequence[DatasetIterator] = ()) -> None:
        self._ctx = ctx
        self._inputs: list[DatasetIterator] = list(inputs)
        self._closed = False

    def __iter__(self) -> DatasetIterator:
        return self

    @abc.abstractmethod
    def __next__(self) -> Any:
        """The next element; ``StopIteration`` at the end."""

    def next_chunk(self, limit: int) -> list[Any]:
        """The next elements, at least one and at most ``limit``, as ``next()`` would give
        them one by one: the state afterwards is the state after the last one returned.

        ``StopIteration`` at the end; an element's error is raised when it is next (the
        elements before it come back first, in a shorter chunk). Stages on the order-defining
        path (file readers, interleave, shuffle, batch) override it to move whole chunks
        between them, at a fraction of the per-element cost; this default moves one. Callers
        ask :func:`chunk_reader` whether a stage reads in chunks.
        """
        return [self.__next__()]

    @abc.abstractmethod
    def _get_state(self) -> State:
        """This stage's position, with its inputs' states nested under ``input``/``inputs``."""

    @abc.abstractmethod
    def _set_state(self, state: State) -> None:
        """Move to the position ``state`` (from ``_get_state`` of the same kind of stage)."""

    @classmethod
    def state_type(cls) -> str:
        """The ``"type"`` of this stage's states: its operation, else its class name."""
        return cls.OPERATION or cls.__name__

    def read_aheads(self) -> list[Any]:
        """The read-ahead windows (:class:`~feedline.execution.read_ahead.ReadAhead`) this
        stage owns, for statistics: their fill, workers and threads. None by default.

        Declared, not found by looking through the iterator's attributes: reading an
        instance's ``__dict__`` turns its attribute storage into a plain dict, and every
        attribute read of that stage is slower from then on (a shuffle 20% slower).
        """
        return []

    def hold_order(self, hold: bool) -> None:
        """While ``hold`` is true, hand items out in input order even where this stage (or
        one below it) may take them as they complete (``deterministic=False``): a consumer
        replaying positions after a restore skips items by the order they were counted in
        (:class:`~feedline.execution.positions.PositionReader`). This stage passes it on to
        its inputs; stages that may reorder also obey it."""
        for inner in self._inputs:
            inner.hold_order(hold)

    @property
    def replay_exact(self) -> bool:
        """Whether reading again from a restored state gives the same items in the same order.

        True unless this stage or one of its inputs hands out in completion order
        (``deterministic=False``); stages that checkpoint by position
        (:mod:`feedline.execution.positions`) snapshot such an input after every item.
        """
        return all(child.replay_exact for child in self._inputs)

    def state_dict(self) -> State:
        """A JSON-serializable description of the position of this stage and all its inputs."""
        try:
            own = self._get_state()
        except CheckpointError as error:
            # Named by the innermost stage that refused, so that the user knows which one.
            if not getattr(error, "_feedline_stage_named", False):
                error.add_note(f"feedline: raised saving the state of the {self.state_type()} "
                               "stage")
                error._feedline_stage_named = True  # type: ignore[attr-defined]
            raise
        state = {"type": self.state_type(), "version": self.STATE_VERSION, **own}
        self._state_shape = state_shape(state)
        return state

    def rewound_state(self, count: int) -> State | None:
        """The state this stage had ``count`` elements ago, if it can say (``None``: it
        cannot). Stages whose position is an index (an index shard) can; a framework
        loader uses it to checkpoint without the batches it pulled ahead."""
        return None

    def load_state_dict(self, state: State) -> None:
        """Continue from ``state``, as returned by ``state_dict()`` of the same pipeline.

        A state whose keys or values are not what this stage wrote is a ``CheckpointError``
        naming the stage, never a ``KeyError`` or ``TypeError`` from deep inside it.
        """
        kind = self.state_type()
        if not isinstance(state, dict) or state.get("type") != kind:
            found = state.get("type") if isinstance(state, dict) else type(state).__name__
            raise CheckpointError(
                f"state of a {found!r} stage given to a {kind!r} stage: "
                "was it saved from a different pipeline?")
        if state.get("version") != self.STATE_VERSION:
            raise CheckpointError(
                f"{kind} state version {state.get('version')} is not supported "
                f"(this feedline writes version {self.STATE_VERSION})")
        # A state with other keys or kinds of value than this stage writes is refused before
        # the stage sees it. The shape comes from the stage's own state (cheap before it runs).
        expected = getattr(self, "_state_shape", None)
        if expected is None:
            expected = state_shape(
                {"type": kind, "version": self.STATE_VERSION, **self._get_state()})
        problem = shape_mismatch(expected, state)
        if problem:
            raise CheckpointError(f"damaged state for the {kind} stage: {problem}")
        try:
            self._set_state(state)
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError,
                OverflowError) as error:
            raise CheckpointError(f"damaged state for the {kind} stage: {error!r}") from error

    def close(self) -> None:
        """Stop this stage's threads, release its resources, then close its inputs. Idempotent."""
        # Test and set in one step: two threads closing at once (a user's close() and a
        # finalizer on a worker) must not both release the stage.
        with _CLOSE_FLAG_LOCK:
            if self._closed:
                return
            self._closed = True
        try:
            self._release()
        finally:
            for child in self._inputs:
                child.close()

    def _release(self) -> None:
        """Free what this stage owns (threads, files); inputs are closed by :meth:`close`."""


def chunk_reader(iterator: Any) -> Callable[[int], list[Any]] | None:
    """``iterator.next_chunk`` when its stage reads in chunks (overrides
    :meth:`DatasetIterator.next_chunk`), else ``None``: per element is as fast then.

    A statistics probe in front of such a stage reads in chunks too, counting each chunk's
    elements (:class:`feedline.profiling.collect.ChunkProbe`); other probes do not.

    Example:
        >>> import feedline as fl
        >>> it = fl.Dataset.range(3)._make_iterator(IteratorContext())
        >>> chunk_reader(it) is None
        True
    """
    method = getattr(type(iterator), "next_chunk", None)
    if method is None or method is DatasetIterator.next_chunk:
        return None
    return iterator.next_chunk
