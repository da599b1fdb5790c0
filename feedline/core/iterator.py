"""The iterator protocol: every running stage of a pipeline is a :class:`DatasetIterator`.

Iterators form a tree mirroring the dataset graph. Each owns the threads, buffers and
files of its stage, closes its inputs when closed, and saves/restores its position as a
small JSON-safe dict that nests its inputs' states.
"""

from __future__ import annotations

import abc
import atexit
import dataclasses
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Self

from feedline.core import pipeline_state
from feedline.core.errors import CheckpointError
from feedline.core.fingerprint import DeclaredTypes, PipelineFingerprint, declared_types
from feedline.core.options import Options
from feedline.core.state_codec import declared_types_in_use

if TYPE_CHECKING:
    from feedline.core.dataset import Dataset

State = dict[str, Any]


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
    kept: dict[Any, Any] = field(default_factory=dict, repr=False)
    closing: bool = False
    first_epoch: int = 0
    continue_epochs: bool = False
    statistics: Any = field(default=None, repr=False)
    tuner: Any = field(default=None, repr=False)
    remembered: dict[Any, Any] = field(default_factory=dict, repr=False)

    def keep(self, node: object, resource: Any) -> None:
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

    def autotuner(self) -> Any:
        """The pipeline's tuner (made on first use; stopped by :meth:`close_kept`)."""
        with self._iterations_lock:
            if self.tuner is None:
                from feedline.autotune.tuner import Tuner

                self.tuner = Tuner()
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
        state = {"type": self.state_type(), "version": self.STATE_VERSION, **self._get_state()}
        self._state_shape = pipeline_state.state_shape(state)
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
            expected = pipeline_state.state_shape(
                {"type": kind, "version": self.STATE_VERSION, **self._get_state()})
        problem = pipeline_state.shape_mismatch(expected, state)
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


_LIVE: weakref.WeakSet[PipelineIterator] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def _close_live_iterators() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for iterator in live:
        iterator.close()


atexit.register(_close_live_iterators)


class PipelineIterator:
    """What ``iter(dataset)`` returns: runs the pipeline and owns its whole iterator tree.

    It closes the tree when closed explicitly, when used as a context manager, when
    garbage-collected and at interpreter exit. An error raised by a user function or a reader
    does not close it: as in tf.data, ``next()`` raises for that element and the following
    call continues with the next one.

    One iterator may be shared by several threads: ``next()``, ``state_dict()`` and
    ``load_state_dict()`` take a lock, so each element goes to exactly one caller and a state
    is never taken in the middle of a step.

    Example:
        >>> import feedline as fl
        >>> it = iter(fl.Dataset.range(5))
        >>> next(it), next(it)
        (np.int64(0), np.int64(1))
        >>> state = it.state_dict()
        >>> it2 = iter(fl.Dataset.range(5)); it2.load_state_dict(state)
        >>> [int(x) for x in it2]
        [2, 3, 4]
    """

    def __init__(self, dataset: Dataset, epoch: int = 0, *,
                 continue_epochs: bool = False) -> None:
        """Build the pipeline's iterators.

        Args:
            dataset: The pipeline.
            epoch: The epoch this iteration counts as (``iter(dataset)``: 0). Stages that
                reshuffle each iteration (``shuffle``, ``global_shuffle``) draw this epoch's
                order: a loop that builds one iterator per epoch passes its epoch number.
            continue_epochs: Whether those stages continue after the epochs that earlier
                iterators of the same dataset object used (what ``iter(dataset)`` does, as
                tf.data: each new iterator reshuffles) rather than start at ``epoch``.
        """
        from feedline.optimize import optimize

        options = dataset.options()
        self._user_dataset = dataset
        self._saved_fingerprint: PipelineFingerprint | None = None
        self._declared_types: DeclaredTypes | None = None
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"PipelineIterator(epoch) must be an int >= 0, got {epoch!r}")
        self._ctx = IteratorContext(options=options, first_epoch=epoch,
                                    continue_epochs=continue_epochs)
        self._collector: Any = None
        if options.profiling.statistics or options.profiling.trace:
            from feedline.profiling.collect import collector_for

            self._collector = self._ctx.statistics = collector_for(options)
        self._dataset = optimize(dataset, options)
        self._root = self._dataset._make_iterator(self._ctx)
        if self._collector is not None:
            self._collector.drive(self._root)
        self._status: Any = None
        if options.autotune.status_seconds is not None:
            from feedline.autotune.status import LiveStatus

            self._status = LiveStatus(options.autotune.status_seconds, self._ctx, self._root)
        # Stages are single-consumer; this makes the whole pipeline safe to share. close()
        # does not take it: it must be able to end a next() that is blocked waiting.
        self._lock = threading.Lock()
        with _LIVE_LOCK:
            _LIVE.add(self)

    def __iter__(self) -> PipelineIterator:
        return self

    def __next__(self) -> Any:
        # ``self`` stays referenced for the whole call: in ``iter(ds).__next__()`` this frame
        # holds the only reference, and dropping it would close the pipeline mid-call.
        root, status = self._root, self._status
        with self._lock:
            if root._closed:
                raise StopIteration
            try:
                if status is None:
                    return next(root)
                started = time.perf_counter()
                element = next(root)
                status.took(time.perf_counter() - started)
                return element
            except StopIteration:
                raise
            except BaseException:
                # An error's traceback keeps this frame alive: without ``self`` in it, an
                # iterator the user abandons while keeping the error is still collected,
                # and so closed.
                del self
                if root._closed:
                    # close() from another thread ended this call: whatever that left it
                    # with (an internal BufferClosed, a cancelled call), the consumer stops.
                    raise StopIteration from None
                raise

    @property
    def process_decision(self) -> Any:
        """What AUTOTUNE chose between threads and worker processes for this pipeline (a
        :class:`~feedline.autotune.processes.ProcessDecision`: mode, workers, cores kept
        busy, reason), or ``None`` if it had no choice to make or has not made it yet.

        Example:
            >>> import feedline as fl
            >>> it = iter(fl.Dataset.range(3).prefetch(fl.AUTOTUNE))
            >>> _ = list(it)
            >>> it.process_decision is None or it.process_decision.mode == "threads"
            True
        """
        return getattr(self._root, "decision", None)

    def statistics(self) -> Any:
        """What the pipeline measured so far: a
        :class:`~feedline.profiling.records.PipelineStatistics` with every stage's elements,
        bytes, own time, time waiting on inputs, buffer fill and parallelism, and the
        consumer's time waiting in ``next()`` versus between calls.

        Raises:
            RuntimeError: statistics are off (``Options(profiling=ProfilingOptions(
                statistics=True))`` turns them on; :func:`feedline.profile` does it for you).

        Example:
            >>> import feedline as fl
            >>> options = fl.Options(profiling=fl.ProfilingOptions(statistics=True))
            >>> with iter(fl.Dataset.range(5).with_options(options)) as it:
            ...     _ = list(it)
            ...     it.statistics().elements
            5
        """
        if self._collector is None:
            raise RuntimeError(
                "this pipeline collects no statistics: iterate "
                "ds.with_options(fl.Options(profiling=fl.ProfilingOptions(statistics=True))) "
                "or call fl.profile(ds)")
        statistics = self._collector.statistics()
        tuner = self._ctx.tuner
        if tuner is not None:
            statistics = dataclasses.replace(statistics, tuning=tuner.decisions())
        return statistics

    def _fingerprint(self) -> PipelineFingerprint:
        # Computed once, on the graph as the user wrote it (before rewrites such as fusion).
        if self._saved_fingerprint is None:
            self._saved_fingerprint = PipelineFingerprint.of(self._user_dataset)
        return self._saved_fingerprint

    def state_dict(self) -> State:
        """The pipeline's position as a JSON-serializable dict.

        It carries a fingerprint of the pipeline and a checksum (see
        :mod:`feedline.core.pipeline_state`): only this pipeline can load it, and damage is
        detected.
        """
        with self._lock:
            root_state = self._root.state_dict()
        return pipeline_state.seal(root_state, self._fingerprint())

    def rewound_state_dict(self, count: int) -> State | None:
        """The state this pipeline had ``count`` elements ago (a sealed ``state_dict``), or
        ``None`` if its last stage cannot rewind (see ``DatasetIterator.rewound_state``)."""
        with self._lock:
            root_state = self._root.rewound_state(count)
        return None if root_state is None else pipeline_state.seal(root_state,
                                                                    self._fingerprint())

    def load_state_dict(self, state: State) -> None:
        """Continue exactly where the iterator that produced ``state`` was.

        Raises:
            CheckpointError: ``state`` is damaged, of another format, or was saved by a
                different pipeline (the message names the first stage that differs).
                Execution settings may differ: ``num_parallel_calls``, ``deterministic``,
                prefetch buffer sizes, ``Options().optimization.map_fusion`` and the CPU
                count (``interleave`` stores the ``cycle_length`` it resolved); states are
                keyed by operation, not by the iterator running it. Decoding builds only the
                namedtuple classes this pipeline names; it never imports or calls anything
                the state names.
        """
        root = pipeline_state.open_sealed(state, self._fingerprint())
        if self._declared_types is None:
            self._declared_types = declared_types(self._user_dataset)
        with self._lock, declared_types_in_use(self._declared_types):
            self._root.load_state_dict(root)

    def close(self) -> None:
        """Stop every thread and release every resource of the pipeline. Idempotent.

        It may be called from another thread while a consumer waits in ``next()``: that
        call ends with ``StopIteration``, as does every later one. Each stage waits at most
        ``Options().threading.close_timeout`` seconds for the user functions running at
        that moment; threads still running one then are abandoned (daemon threads, ended
        with the process) with a ``RuntimeWarning`` naming the stage, so ``close()``, a
        garbage-collected iterator and interpreter exit never hang on a stuck function.
        """
        root = getattr(self, "_root", None)
        if root is not None:
            self._ctx.closing = True
            if self._collector is not None:
                self._collector.stop()  # its last sample reads the stages still open
            try:
                root.close()
            finally:
                self._ctx.close_kept()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def chunk_reader(iterator: Any) -> Callable[[int], list[Any]] | None:
    """``iterator.next_chunk`` when its stage reads in chunks (overrides
    :meth:`DatasetIterator.next_chunk`), else ``None``: per element is as fast then.

    A statistics probe in front of a stage is not such a stage (``type()`` sees through
    its ``__class__``): its counts stay per element.

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
