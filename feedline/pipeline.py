"""The pipeline runner: what ``iter(dataset)`` returns.

It sits at the top of the layers: it applies the graph rewrites (:mod:`feedline.optimize`)
and then placement (:func:`feedline.placement.auto.wrap_for_processes`),
builds the iterator tree (:mod:`feedline.core.iterator`'s protocol), drives statistics and
the live status, and seals checkpoints (:mod:`feedline.core.pipeline_state`). Lower layers
that run a whole pipeline themselves (``cache``, ``save``, spec inference) start it through
:func:`feedline.core.runner.run`, which this module serves when imported.
"""

from __future__ import annotations

import atexit
import dataclasses
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Self

from feedline.core import pipeline_state
from feedline.core.fingerprint import DeclaredTypes, PipelineFingerprint, declared_types
from feedline.core.iterator import IteratorContext, State, serve_tuners
from feedline.core.runner import serve_runner
from feedline.core.state_codec import declared_types_in_use
from feedline.execution.map_runner import serve_map_runners

if TYPE_CHECKING:
    from feedline.core.dataset import Dataset


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
        from feedline.execution import allocator
        from feedline.optimize import optimize
        from feedline.placement.auto import wrap_for_processes

        # Held for a whole close(): a second close() (another thread's, the finalizer's)
        # waits for the first, so that each returns only once every thread has stopped.
        self._close_lock = threading.RLock()
        allocator.configure()  # once per process: records freed and allocated per batch
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
        # Placement comes after the graph rewrites: it wraps the graph they leave.
        self._dataset = wrap_for_processes(optimize(dataset, options), options)
        self._root = self._dataset._make_iterator(self._ctx)
        # Counted open once it has a root: close() (which needs one) is what counts it out.
        allocator.pipeline_started()
        self._allocator_held = True
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
        :class:`~feedline.placement.policy.ProcessDecision`: mode, workers, cores kept
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
        if root is None:
            return
        with self._close_lock:
            self._ctx.closing = True
            if self._collector is not None:
                self._collector.stop()  # its last sample reads the stages still open
            try:
                root.close()
            finally:
                self._ctx.close_kept()
                if self.__dict__.pop("_allocator_held", False):
                    from feedline.execution import allocator

                    allocator.pipeline_ended()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


# Served last, once the class exists: lower layers start it through feedline.core.runner.run
# without importing this module (it imports them).
serve_runner(PipelineIterator)


def _make_tuner() -> Any:
    """A pipeline's tuner, imported on first use (a pipeline without AUTOTUNE never loads it)."""
    from feedline.autotune.tuner import Tuner

    return Tuner()


serve_tuners(_make_tuner)


def _make_map_runner(*args: Any, **kwargs: Any) -> Any:
    """Where a parallel map's calls run: placement's runner (above the map stage), imported
    on first use (a pipeline without a parallel map never loads placement's machinery)."""
    from feedline.placement.runner import map_runner

    return map_runner(*args, **kwargs)


serve_map_runners(_make_map_runner)
