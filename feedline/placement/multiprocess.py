"""``multiprocess``: run the pipeline in worker processes, each on a shard of the input.

Python code holds the GIL: however many threads a pipeline uses, its per-element Python
(record framing, shuffling, batch assembly, user functions) runs on one core at a time, and
competes with the training loop's own Python. ``multiprocess(n)`` runs everything upstream
of it in ``n`` processes instead. Each runs the same pipeline on its shard of the input
(:mod:`feedline.distribute.autoshard`: by file when the pipeline reads files, by element
otherwise) and sends finished elements (usually batches) through shared memory: the
consumer's ``next()`` takes an element a worker has already built, and its arrays are views
of the memory the worker wrote.

**Order.** The result is the workers' outputs taken in turn, one element each (element
``k`` comes from worker ``k % n``), skipping workers that have finished: the same as
``Dataset.range(n).interleave(lambda i: <shard i>, cycle_length=n)``. That equals the
single-process output exactly when the sharding policy allows it (``sharding.exact_order``):
one-to-one stages (``map``) from the source to a ``batch`` (the "batch" policy gives each
worker whole global batches), or to the end. With files, or ``filter``/``shuffle`` between
the source and the batch, the elements are the same but their order and batches differ,
and change with ``n``. To get output identical for any worker count, shuffle *indices* and
look records up by index::

    fl.Dataset.range(n).shuffle(n, seed=1).map(read_record).batch(512).multiprocess(w)

is exact for every ``w`` (the shuffle runs in every worker, in the same seeded order, before
the shard). ``deterministic=False`` takes elements from whichever worker has one ready.

**Checkpoints** hold every worker's position in its shard (its iterator's state at some
point plus the number of elements taken since: see :mod:`feedline.execution.positions`) and
the merge position. Restoring is exact. A state saved with another number of workers is a
``CheckpointError`` (``num_workers=AUTOTUNE`` adopts the saved number instead, up to what
the options allow: the workers ``AUTOTUNE`` would start here,
``Options().autotune_parallelism()``, or ``ThreadingOptions.max_parallelism`` if larger. A
state is data, and never decides alone how many processes start).

**Faults.** An error of the pipeline (a user function, a corrupt record) is raised in its
place, as itself (its own class where it can be rebuilt in this process, else a
:class:`~feedline.RestoredError` of the closest built-in type), with the worker's traceback
as a note; the iterator continues after it.

A worker that dies (killed, crashed, out of memory, ``os._exit``) raises
:class:`~feedline.WorkerProcessError` from the ``next()`` waiting for it, and is restarted
from its last position: the following ``next()`` goes on, losing and repeating nothing. The
new worker *watches* the element of its shard its predecessor was computing
(:mod:`feedline.placement.worker_loop`): it re-reads up to that element with every ``map``
function run in a process of its own, one call at a time, so that

* a death that had nothing to do with the element (the OOM killer chose it, someone killed
  it) costs nothing: the element is computed again, and the worker goes on as before;
* a ``map`` call that kills its process *every* time is that element's error, raised in
  its place as a ``WorkerProcessError`` (``ignore_errors()`` drops it), and the worker
  goes on after it: ``range(1000).map(f).multiprocess(2).ignore_errors()`` yields 999
  elements when ``f`` kills its process at one of them;
* if the worker ends itself again (an exit or a crash) while computing that element with
  its maps isolated, what kills it is not a map function (a reader, a filter, a
  generator): the worker cannot get past it, and the iteration ends with a
  ``WorkerProcessError`` marked fatal (:func:`~feedline.core.error_records.mark_fatal`),
  which ``ignore_errors()`` raises rather than ending the stream as if it were complete.
  A death by a signal sent from outside (``SIGKILL``, ``SIGTERM``, ...) says nothing about
  the element: the worker is restarted again.

A worker that dies :data:`MAX_RESTARTS` + 1 times in a row without producing an element ends
the iteration the same way, as does a worker that cannot run its shard at all (its pipeline
fails to build or to restore). Every ``next()`` after such an end raises the error again,
never ``StopIteration``. ``close()``, garbage collection, Ctrl-C and interpreter exit
end every worker, and so does the death of this process (``SIGKILL`` included); shared
memory is anonymous and freed by the kernel with its last user.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, NoReturn

from feedline.core.constants import AUTOTUNE
from feedline.core.dataset import Dataset
from feedline.core.error_records import mark_fatal
from feedline.core.errors import CheckpointError, InvalidArgumentError, WorkerProcessError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.options import Options
from feedline.core.registry import operation
from feedline.core.seed_epochs import EpochCounter, restored_epoch, start_epoch
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset
from feedline.core.validation import validate_int
from feedline.distribute.autoshard import ShardPlan, plan_sharding
from feedline.execution.positions import PositionTracker
from feedline.placement.ipc.spawn import ended_by_itself
from feedline.placement.worker_loop import WorkerPool, in_worker_process, per_epoch_nodes

MAX_RESTARTS = 3
"""Times in a row one worker is restarted after dying without producing an element in
between, before its next death ends the iteration."""
WORKER_START_SECONDS = 30.0
"""Added to ``Options().threading.element_timeout`` while a worker starts (a fresh
interpreter imports NumPy and feedline, unpickles the pipeline, restores its position)."""


def shard_options(options: Options) -> Options:
    """The options a shard runs with, in a worker process or in this one: the pipeline's,
    keeping its order. ``deterministic=False`` lets the merge take the shards in any order;
    inside a shard, order costs nothing worth having, keeps its checkpoints cheap (an unordered
    input is snapshotted after every element, see positions.py), and a position counts items
    in that order (a shard that reordered while re-reading would skip other items).

    Example:
        >>> import feedline as fl
        >>> print(shard_options(fl.Options(deterministic=False)).deterministic)
        None
    """
    if options.deterministic is not False:
        return options
    return dataclasses.replace(options, deterministic=None)


def autotune_workers_allowed(options: Options) -> int:
    """The most worker processes a ``multiprocess(AUTOTUNE)`` stage may start to restore a
    state: those AUTOTUNE would start here, or ``ThreadingOptions.max_parallelism`` if larger.

    Example:
        >>> import feedline as fl
        >>> autotune_workers_allowed(fl.Options(autotune=fl.AutotuneOptions(cpu_budget=1),
        ...     threading=fl.ThreadingOptions(max_parallelism=3)))
        3
    """
    return max(options.autotune_parallelism(), options.threading.max_parallelism or 0)


@operation("multiprocess")
class MultiprocessDataset(UnaryDataset):
    """The node of ``Dataset.multiprocess``."""

    TRAITS = POSITIONAL

    # How far workers read ahead changes no element: checkpoints ignore it (the number of
    # workers does change the order, and stays in the fingerprint). The epoch counter is
    # where this object's iterators are (core/seed_epochs.py), not what the pipeline is.
    _NOT_FINGERPRINTED = frozenset({"buffer_size", "_epochs"})

    def __init__(self, input_dataset: Dataset, num_workers: int = AUTOTUNE,
                 deterministic: bool | None = None, buffer_size: int = 2,
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.num_workers = validate_int(num_workers, "multiprocess(num_workers)", minimum=1,
                                        special=(AUTOTUNE,), hint="AUTOTUNE or >= 1")
        self.buffer_size = validate_int(buffer_size, "multiprocess(buffer_size)", minimum=1)
        self.deterministic = deterministic
        self.name = name or "multiprocess"
        # Each iter() of this dataset is the workers' next epoch, as it is for the seeded
        # stages they run when they run in this process.
        self._epochs = EpochCounter()

    def sharding(self, num_workers: int | None = None) -> ShardPlan:
        """How the input splits among ``num_workers`` (default: this stage's) processes.

        Example:
            >>> import feedline as fl
            >>> ds = fl.Dataset.range(100).map(lambda x: x + 1).batch(10).multiprocess(2)
            >>> plan = ds.sharding()
            >>> plan.policy, plan.exact_order
            ('batch', True)
        """
        count = num_workers or (2 if self.num_workers == AUTOTUNE else self.num_workers)
        return plan_sharding(self._inputs[0], count)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        if in_worker_process():
            raise RuntimeError(
                f"{self.name}: multiprocess() inside a pipeline that already runs in worker "
                "processes; keep one multiprocess() stage, at the end of the pipeline")
        return MultiprocessIterator(ctx, self, start_epoch(self, self._epochs, ctx))


class MultiprocessIterator(DatasetIterator):
    """Merges the elements of worker processes (see the module doc).

    The state::

        {"epoch": e, "num_workers": n, "next_worker": k, "ended": [bool] * n,
         "workers": [position of worker i, ...]}   # [] before the first next()
    """

    OPERATION = "multiprocess"

    def __init__(self, ctx: IteratorContext, node: MultiprocessDataset, epoch: int) -> None:
        super().__init__(ctx, [])
        self._node = node
        self._epoch = epoch
        options = ctx.options
        self._ordered = self._deterministic = ctx.deterministic(node.deterministic)
        self._timeout = options.threading.element_timeout
        self._num_workers = (options.autotune_parallelism() if node.num_workers == AUTOTUNE
                             else node.num_workers)
        self._pool: WorkerPool | None = None
        # With statistics on: the latest (statistics, collector start) each worker sent.
        self._worker_statistics: dict[int, tuple[Any, int]] = {}
        self._positions: list[State] = []  # restored, not yet sent to the workers
        # The epoch counters of the nodes the workers report epochs of, in their order.
        self._epoch_counters = [n._epochs for n in per_epoch_nodes(node._inputs[0])]
        self._running = False
        # discard() and a start on another thread (feedline.placement.auto) exclude each
        # other: a start after the discard must not make a new pool (nobody would end it).
        self._pool_lock = threading.Lock()
        self._discarded = False
        self._reset_merge(self._num_workers)

    def _reset_merge(self, num_workers: int) -> None:
        self._num_workers = num_workers
        self._next_worker = 0
        self._ended = [False] * num_workers
        self._trackers: list[PositionTracker] = [PositionTracker() for _ in range(num_workers)]
        self._tokens = [0] * num_workers
        self._starting = [False] * num_workers  # no message of the current run yet
        self._deaths = [0] * num_workers  # in a row, without an element in between
        # The item of its shard each worker's current run watches (see worker_pool), and
        # the one it announced it is computing with that watch.
        self._watching: list[int | None] = [None] * num_workers
        self._reached: list[tuple[int, bool] | None] = [None] * num_workers
        # The error that ended the stage (a worker's death, or the error that kept a worker
        # from running its shard), with the worker it came from.
        self._broken: BaseException | None = None
        self._broken_worker: int | None = None

    @property
    def replay_exact(self) -> bool:
        return self._ordered

    def worker_statistics(self) -> list[tuple[Any, int]]:
        """What each worker's pipeline measured, as last sent (with statistics on): a
        :class:`~feedline.profiling.records.PipelineStatistics` and the worker's clock at
        its start (``time.monotonic_ns``), by worker."""
        return [self._worker_statistics[i] for i in sorted(self._worker_statistics)]

    @property
    def workers(self) -> int:
        """Worker processes of this stage."""
        return self._num_workers

    @property
    def worker_pids(self) -> list[int | None]:
        """Process ids of the workers (``None`` before they start)."""
        return [] if self._pool is None else self._pool.pids()

    # ------------------------------------------------------------------ running
    def prepare(self) -> None:
        """Make the worker pool without starting its processes: pickles the pipeline, so
        that one that does not pickle is told at once (``TypeError``), before a start that
        may run on another thread (:mod:`feedline.placement.auto`)."""
        with self._pool_lock:
            if self._discarded:
                raise RuntimeError(f"the worker processes of {self._node.name} were discarded")
            if self._pool is None:
                self._pool = self._ctx.kept.pop(self._node, None)
            if self._pool is None or self._pool.num_workers != self._num_workers:
                if self._pool is not None:
                    self._pool.shutdown()
                self._check_one_permutation()
                plan = plan_sharding(self._node._inputs[0], self._num_workers)
                if plan.policy == "output" and self._num_workers > 1:
                    from feedline.distribute.autoshard import shard_pipeline

                    shard_pipeline(self._node._inputs[0], self._num_workers, 0, plan)  # warns
                self._pool = WorkerPool(self._node._inputs[0], self._worker_options(),
                                        self._num_workers, self._node.name,
                                        self._ctx.options.threading.close_timeout)

    def _check_one_permutation(self) -> None:
        """Refuse, before any process starts, a stage that would draw its own random
        permutation in each worker (an unseeded ``global_shuffle``): the workers' shards of
        different permutations would lose some elements and repeat others."""
        if self._num_workers < 2:
            return
        from feedline.core.graph import graph_nodes

        drawing = [node.name for node in graph_nodes(self._node._inputs[0])
                   if callable(getattr(node, "draws_seed", None)) and node.draws_seed(self._ctx)]
        if drawing:
            raise InvalidArgumentError(
                f"{self._node.name}: {drawing[0]} has no seed, so each of the "
                f"{self._num_workers} worker processes would draw its own permutation and "
                "their shards would lose some elements and repeat others; give it one "
                f"({drawing[0]}(seed=...) or Options(seed=...)), or run it in one process")

    def _start(self) -> None:
        if self._running:
            return
        self.prepare()
        assert self._pool is not None
        positions, self._positions = self._positions, []
        self._pool.start([i for i in range(self._num_workers) if not self._ended[i]])
        for index in range(self._num_workers):
            if not self._ended[index]:
                self._start_worker(index, positions[index] if positions else None)
        self._running = True

    def _worker_options(self) -> Options:
        """The pipeline's options, with each worker's ``AUTOTUNE`` stages sharing the CPU
        budget less one core, left to the consumer (the training loop): ``n`` workers each
        using every core would oversubscribe the machine."""
        options = self._ctx.options
        share = max(1, (options.autotune_parallelism() - 1) // self._num_workers)
        share = options.autotune_parallelism() if self._num_workers == 1 else share
        return dataclasses.replace(shard_options(options),
                                   autotune=dataclasses.replace(options.autotune,
                                                                cpu_budget=share))

    def _start_worker(self, index: int, position: State | None,
                      watch: int | None = None) -> None:
        pool = self._pool
        assert pool is not None
        self._tokens[index] = pool.new_token()
        self._starting[index] = True
        self._watching[index], self._reached[index] = watch, None
        pool.inbox[index].clear()
        if position is not None:
            self._trackers[index] = PositionTracker(position)
        else:
            self._trackers[index] = PositionTracker()
        pool.send(index, ("start", self._tokens[index], position, self._node.buffer_size,
                          self._epoch, watch))

    def __next__(self) -> Any:
        if self._broken is not None:
            self._raise_broken()
        self._start()
        while True:
            live = [i for i in range(self._num_workers) if not self._ended[i]]
            if not live:
                raise StopIteration
            if self._ordered:
                index = self._next_worker
                if self._ended[index]:
                    self._advance()
                    continue
                self._take(index)
            else:
                index = self._take_any(live)
            assert self._pool is not None
            message = self._pool.inbox[index].popleft()
            self._advance()
            if message[0] == "end":
                self._ended[index] = True
                continue
            return self._deliver(index, message)

    def ready(self) -> bool:
        """Whether ``next()`` would return without waiting (the next element, its error or
        the end is here). Starts the workers if needed; a worker's death or fatal error is
        raised as ``next()`` would raise it."""
        self._start()
        assert self._pool is not None
        live = [i for i in range(self._num_workers) if not self._ended[i]]
        indices = ([self._next_worker] if self._ordered else live) if live else []
        for index in indices:
            inbox = self._pool.inbox[index]
            while True:
                while inbox and not self._accept(index, inbox[0]):
                    inbox.popleft()
                if inbox:
                    return True
                try:
                    self._pool.receive([index], 0.0)
                except TimeoutError:
                    break
                except WorkerProcessError as error:
                    self._after_death(error)
                    raise
        return not live

    def discard(self) -> None:
        """Close, ending the worker processes now rather than keeping them for a next epoch
        (AUTOTUNE tried them and went on without them)."""
        with self._pool_lock:
            self._discarded = True
            pool, self._pool = self._pool, None
        self.close()
        if pool is not None:
            pool.shutdown()

    def hold_order(self, hold: bool) -> None:
        self._ordered = self._deterministic or hold  # the workers run in their own order

    def _advance(self) -> None:
        self._next_worker = (self._next_worker + 1) % self._num_workers

    def _take(self, index: int) -> tuple[Any, ...]:
        """The next current message of worker ``index`` that is an item or its end, left
        at the head of its inbox until delivered."""
        assert self._pool is not None
        inbox = self._pool.inbox[index]
        while True:
            if not inbox:
                self._receive([index])
            if self._accept(index, inbox[0]):
                return inbox[0]
            inbox.popleft()

    def _take_any(self, live: list[int]) -> int:
        """A worker among ``live`` whose inbox starts with an item or its end."""
        assert self._pool is not None
        inboxes = self._pool.inbox
        while True:
            for index in live:
                inbox = inboxes[index]
                while inbox and not self._accept(index, inbox[0]):
                    inbox.popleft()
                if inbox:
                    return index
            self._receive(live)

    def _receive(self, indices: list[int]) -> int:
        assert self._pool is not None
        timeout = self._timeout
        if timeout is not None and any(self._starting[i] for i in indices):
            timeout += WORKER_START_SECONDS  # the element timeout is for elements
        try:
            return self._pool.receive(indices, timeout)
        except WorkerProcessError as error:
            self._after_death(error)
            raise

    def _after_death(self, error: WorkerProcessError) -> None:
        """Restart the dead worker from its last position, watching the item it was
        computing (on the next ``next()``); or end the iteration with the error marked
        fatal when that item kills it even watched, or it died :data:`MAX_RESTARTS` + 1
        times in a row without producing an element."""
        index = error.worker
        assert index is not None and self._pool is not None
        tracker = self._trackers[index]
        token = self._tokens[index]
        # What it sent before dying is in its inbox (received before its death was seen);
        # items come in order, so it was computing the item after them.
        sent = sum(1 for m in self._pool.inbox[index] if m[0] == "item" and m[1] == token)
        item = tracker.next + sent
        self._deaths[index] += 1
        reached = self._reached[index]
        if self._watching[index] == item and reached is not None and reached[0] == item \
                and ended_by_itself(error.exitcode):
            where = ("even with every map function of its pipeline run in a process of its "
                     "own: what kills it is not a map function (a reader, a filter, a "
                     "generator, ...)" if reached[1] else
                     "and its pipeline has no map function that could be isolated")
            self._end_broken(error, f"feedline: worker {index} died again computing element "
                             f"{item} of its shard, {where}; the worker cannot get past that "
                             "element and the iteration ends here (catch the failure inside "
                             "the pipeline, or restore a checkpoint to retry)")
            return
        if self._deaths[index] > MAX_RESTARTS:
            self._end_broken(error, f"feedline: worker {index} died {MAX_RESTARTS + 1} times "
                             "in a row without producing an element; the iteration ends here "
                             "(restore a checkpoint to continue)")
            return
        error.add_note(f"feedline: worker {index} was restarted from its last position; "
                       "the next next() goes on, losing and repeating no element (element "
                       f"{item} of its shard, which it was computing, is computed again "
                       "with its map functions isolated: if one kills its process again, "
                       "that is the element's error)")
        # A worker that died before reporting its first state restarts from the beginning.
        position = tracker.state(self._pending_errors(index)) if tracker.has_snapshot \
            else None
        self._pool.restart(index)
        self._start_worker(index, position, watch=item)

    def _end_broken(self, error: WorkerProcessError, note: str) -> None:
        error.add_note(note)
        self._broken, self._broken_worker = mark_fatal(error), error.worker

    def _raise_broken(self) -> NoReturn:
        """Raise the error that ended this stage again: a later ``next()`` must not read as
        the end of a complete stream (code that goes on after an error, as after a
        worker's restart, would silently lose the rest of the epoch)."""
        broken = self._broken
        assert broken is not None
        message = str(broken) if isinstance(broken, WorkerProcessError) \
            else f"{type(broken).__name__}: {broken}"
        again = WorkerProcessError(message, worker=self._broken_worker,
                                   exitcode=getattr(broken, "exitcode", None))
        for note in getattr(broken, "__notes__", []):
            again.add_note(note)
        again.add_note("feedline: raised again: this stage ended with the error above, and "
                       "every later next() raises it (restore a checkpoint to go on)")
        raise mark_fatal(again) from broken

    def _accept(self, index: int, message: tuple[Any, ...]) -> bool:
        """Whether ``message`` is an item or end of the current run (bookkeeping others)."""
        kind, token = message[0], message[1]
        if token is not None and token != self._tokens[index]:
            return False  # from a run this stage has moved past
        self._starting[index] = False
        if kind == "statistics":
            self._worker_statistics[index] = (message[2], message[3])
            return False
        if kind == "started":
            self._trackers[index].add_snapshot((0, message[2]))
            return False
        if kind == "reached":
            self._reached[index] = (message[2], message[3])
            return False
        if kind == "epochs":
            # The worker's repeat started these epochs: the next iter(ds) here goes on
            # after them, as the run would have in this process.
            counters = self._epoch_counters
            if len(counters) == len(message[2]):  # else a graph this stage did not send
                for counter, next_epoch in zip(counters, message[2], strict=True):
                    if next_epoch > 0:
                        counter.advance_past(next_epoch - 1)
            return False
        if kind == "fatal":
            # The worker cannot run its shard at all (it cannot build or restore its
            # pipeline): going on would silently drop that shard, so the iteration ends.
            error = message[2].unpack(f"feedline: in worker process {index} of "
                                      f"{self._node.name}:")
            error.add_note(f"feedline: worker {index} cannot run its shard; the iteration "
                           "ends here")
            self._broken, self._broken_worker = mark_fatal(error), index
            raise error
        return True

    def _deliver(self, index: int, message: tuple[Any, ...]) -> Any:
        _, _, item, is_error, value, snapshot = message
        tracker = self._trackers[index]
        tracker.add_snapshot(snapshot)
        tracker.handed_out(item)
        self._deaths[index] = 0  # it makes progress
        assert self._pool is not None
        self._pool.credit(index)
        if is_error:
            raise value.unpack(f"feedline: raised in worker process {index} of "
                               f"{self._node.name}:")
        return value

    # ------------------------------------------------------------------ checkpoints
    def _pending_errors(self, index: int) -> list[list[Any]]:
        assert self._pool is not None
        return [[m[2], m[4].record] for m in self._pool.inbox[index]
                if m[0] == "item" and m[1] == self._tokens[index] and m[3]]

    def _get_state(self) -> State:
        if not self._running:
            workers = list(self._positions)
        else:
            workers = []
            for index in range(self._num_workers):
                tracker = self._trackers[index]
                inbox = self._pool.inbox[index] if self._pool is not None else None
                while inbox is not None and not tracker.has_snapshot \
                        and not self._ended[index]:
                    # The worker's initial state is on its way: wait for it.
                    if not inbox:
                        self._receive([index])
                    if self._accept(index, inbox[0]):
                        break  # an item before the start: cannot happen, never loop
                    inbox.popleft()
                workers.append(tracker.state(self._pending_errors(index))
                               if tracker.has_snapshot else None)
        return {"epoch": self._epoch, "num_workers": self._num_workers,
                "next_worker": self._next_worker, "ended": list(self._ended),
                "workers": workers}

    def _set_state(self, state: State) -> None:
        saved = int(state["num_workers"])
        if self._node.num_workers not in (AUTOTUNE, saved):
            raise CheckpointError(
                f"{self._node.name}: the state was saved with {saved} worker processes and "
                f"this pipeline runs {self._node.num_workers}; each worker's position is in "
                f"its own shard, so restore with multiprocess({saved}) (or AUTOTUNE, which "
                "adopts the saved number)")
        # A state is data: it may not start more processes than the options allow.
        allowed = self._node.num_workers
        if allowed == AUTOTUNE:
            allowed = autotune_workers_allowed(self._ctx.options)
        if not 1 <= saved <= allowed:
            raise CheckpointError(
                f"{self._node.name}: the state's num_workers is {saved}, and this pipeline "
                f"allows 1 to {allowed} worker processes (multiprocess(AUTOTUNE) starts at "
                "most Options().autotune_parallelism() here); to restore a state saved with "
                f"{saved} workers, allow them: Options(threading=ThreadingOptions("
                f"max_parallelism={max(saved, 1)}))")
        workers, ended = list(state["workers"]), [bool(e) for e in state["ended"]]
        if len(ended) != saved or (workers and len(workers) != saved):
            raise CheckpointError(f"damaged state for the {self._node.name} stage: "
                                  f"{len(workers)} worker positions for {saved} workers")
        if self._running:
            assert self._pool is not None
            self._stop_workers(self._pool)
        self._reset_merge(saved)
        self._epoch = restored_epoch(self._node, self._node._epochs, self._ctx,
                                     int(state["epoch"]))
        self._ended = ended
        self._next_worker = int(state["next_worker"]) % saved
        self._positions = workers
        for index, position in enumerate(workers):
            if position is not None:
                self._trackers[index] = PositionTracker(position)
        if workers and any(p is None for p in workers):
            self._positions = []  # taken before every worker started: start afresh
            self._reset_merge(saved)

    def _stop_workers(self, pool: WorkerPool) -> None:
        for index in range(self._num_workers):
            self._tokens[index] = pool.new_token()
            if not self._ended[index]:
                pool.send(index, ("stop",))
        self._running = False

    def _release(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        ctx = self._ctx
        if not ctx.closing and self._broken is None:
            # The next iterator of this stage (the next epoch of a repeat) reuses the
            # processes: their start-up is paid once per pipeline, not per epoch.
            if self._running:
                self._stop_workers(pool)
            ctx.keep(self._node, pool)
        else:
            pool.shutdown()

