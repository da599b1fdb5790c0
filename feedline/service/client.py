"""``distribute``: run the pipeline so far on a service's workers and stream its output here.

The consumer side of the service. ``ds.apply(fl.service.distribute(mode, service))`` is a
stage whose iterator registers a job with the dispatcher, has workers run the pipeline
upstream of it, and takes their output (tf.data service's ``distribute``, with Python
functions allowed: the pipeline travels with cloudpickle).

``"parallel_epochs"``
    Every worker runs the whole pipeline: the output is each worker's pass, interleaved in
    arrival order (``num_workers`` times the elements). Workers added while the job runs
    start a pass of their own.
``"distributed_epoch"``
    The dispatcher hands out *splits* (files, or blocks of source elements:
    :mod:`feedline.service.splits`), each to one consumer, which has it run on a worker:
    every element once per pass. **Exactly once, with failures**: a worker that dies (or a
    task a restarted worker no longer knows) is run again on a live worker, skipping the
    items this consumer already received; a consumer that stops early gives its unfinished
    splits back, with how many items of each it handed out, for the next one.
Coordinated reads (``num_consumers``, ``consumer_index``, ``parallel_epochs`` only, as in
tf.data)
    Round ``r`` is served by worker ``r % W``: its ``num_consumers`` next elements, one to
    each consumer, so trainers in lock-step get elements that a worker made together (e.g.
    of one bucket). A round a worker cannot fill (its pass ended) ends the iteration for
    every consumer at the same round.

Order is arrival order (not deterministic), as in tf.data service. Several consumers that
name the same ``job_name`` share the job: in ``distributed_epoch`` each element reaches one
of them. Each pass over the dataset (each ``iter()`` of it in this process, counted as
tf.data counts repetitions) is a job of its own; consumers sharing a name share the pass of
the same number.

**Random stages** given no seed get one per job (kept in checkpoints), so that a split run
again after a worker died draws the same order and skipping what was delivered skips
exactly that. Exactly once needs each split to produce the same items when run again: a
pipeline with ``deterministic=False`` stages may repeat some and lose others after a worker
death. In a shared ``parallel_epochs`` job each consumer knows only its share of a worker's
pass: a worker death repeats what other consumers took of it (tf.data's at-least-once);
a task all consumers left unread (``abandoned_task_timeout``) resumes where it was.

**Checkpoints** (``state_dict()``) hold the job's position as this consumer sees it: which
splits it consumed entirely and how many items of each partly consumed one it handed out
(``distributed_epoch``), how many items of each worker's pass (``parallel_epochs``), or the
next round. Restoring starts a job from that position: restoring a model checkpoint of step
5,000 after a crash at step 9,500 replays exactly the data of steps 5,000 on (tf.data
service loses it, tensorflow#63079). A restored ``distributed_epoch`` job is this consumer's
own, even when it had a ``job_name``; consumers in coordinated reads restoring the same
round join one job again.

**Errors**: an error of the pipeline on a worker (a user function, a corrupt record) is
raised here in its place, with the worker's traceback as a note, and the next ``next()``
goes on (a missing file too, as locally). A pipeline that cannot run on workers at all (it
does not unpickle there, a function raises ``SystemExit``), an element Ray cannot send back,
a service that was shut down, or a dispatcher that cannot run (its restart found a damaged
journal: the message names the file, the line and what was expected) raise
:class:`~feedline.ServiceError`, which ends the iteration.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import os
import random
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any

from feedline.core.constants import UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.error_records import restore_error
from feedline.core.errors import CheckpointError, ServiceError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset
from feedline.service.cluster import LocalCluster, connect, dispatcher_error
from feedline.service.ray_support import NAMESPACE, actor_errors, import_ray
from feedline.service.splits import Part, count_splits
from feedline.service.worker import decompress, pickle_pipeline

MODES = ("parallel_epochs", "distributed_epoch")
FETCH_WAIT = 1.0
"""Seconds a worker holds a fetch open waiting for an item (then the consumer asks again)."""
WORKER_BUFFER = 64
"""Items a task may have ready on its worker ahead of its consumers (and so the most one
fetch brings: a Ray call costs about half a millisecond, so small items travel in bulk)."""
WORKER_BUFFER_BYTES = 64 * 2**20
"""Bytes a task may have ready on its worker (at least one item, whatever its size)."""
WORKER_ROUNDS = 8
"""Rounds a coordinated-reads task may have ready on its worker."""
REPORT_SECONDS = 0.5
"""How often a consumer tells the dispatcher how long it waited (for autoscaling)."""
WORKER_TIMEOUT = 60.0
"""Seconds a consumer waits for some worker to take a task (workers restarting) before
:class:`~feedline.ServiceError`."""


def distribute(processing_mode: str, service: LocalCluster | str, job_name: str | None = None,
               consumer_index: int | None = None, num_consumers: int | None = None,
               max_outstanding_requests: int | None = None, compression: str | None = "AUTO",
               num_splits: int | None = None) -> Callable[[Dataset], Dataset]:
    """A transformation (for ``Dataset.apply``) running the pipeline so far on ``service``.

    Args:
        processing_mode: ``"parallel_epochs"`` or ``"distributed_epoch"`` (module doc).
        service: A :class:`~feedline.service.LocalCluster`, or a Ray address (``"auto"``,
            ``"ray://host:10001"``).
        job_name: Consumers naming the same job share it.
        consumer_index: This consumer's index in coordinated reads.
        num_consumers: Consumers in coordinated reads (with ``consumer_index``).
        max_outstanding_requests: Tasks (``distributed_epoch``: splits) this consumer reads
            at once; default two per worker. (Coordinated reads ask for one round at a
            time; workers produce rounds ahead.)
        compression: ``"AUTO"`` compresses (zstd) what workers on other machines send, not
            what workers on this machine send; ``"zstd"`` always; ``None`` never.
        num_splits: Splits of a ``distributed_epoch`` pass (default: one per file, or four
            per worker at the most workers).

    Example:
        >>> import feedline as fl
        >>> with fl.service.LocalCluster(num_workers=2) as cluster:  # doctest: +SKIP
        ...     ds = fl.Dataset.range(10).map(lambda x: x * x).apply(
        ...         fl.service.distribute("distributed_epoch", cluster))
        ...     sorted(int(x) for x in ds)
        [0, 1, 4, 9, 16, 25, 36, 49, 64, 81]
    """
    if processing_mode not in MODES:
        raise ValueError(f"processing_mode must be one of {MODES}, got {processing_mode!r}")
    if (consumer_index is None) != (num_consumers is None):
        raise ValueError("coordinated reads need both consumer_index and num_consumers")
    if num_consumers is not None:
        if isinstance(num_consumers, bool) or not isinstance(num_consumers, int) \
                or num_consumers < 1:
            raise ValueError(f"num_consumers must be a positive int, got {num_consumers!r}")
        if not isinstance(consumer_index, int) or not 0 <= consumer_index < num_consumers:
            raise ValueError(f"consumer_index must be in [0, {num_consumers}), "
                             f"got {consumer_index!r}")
        if processing_mode != "parallel_epochs":
            raise ValueError("coordinated reads (num_consumers) need processing_mode="
                             "'parallel_epochs', as in tf.data")
        if job_name is None:
            raise ValueError("coordinated reads need a job_name the consumers share")
    if max_outstanding_requests is not None and (
            not isinstance(max_outstanding_requests, int) or max_outstanding_requests < 1):
        raise ValueError("max_outstanding_requests must be a positive int, got "
                         f"{max_outstanding_requests!r}")
    if compression not in ("AUTO", "zstd", None):
        raise ValueError(f"compression must be 'AUTO', 'zstd' or None, got {compression!r}")
    if not isinstance(service, LocalCluster | str):
        raise TypeError("service must be a feedline.service.LocalCluster or a Ray address "
                        f"('auto', 'ray://host:port'), got {type(service).__name__}")
    settings = _Settings(processing_mode, job_name, consumer_index, num_consumers,
                         max_outstanding_requests, compression, num_splits)

    def apply(dataset: Dataset) -> Dataset:
        return DistributedDataset(dataset, service, settings)

    return apply


@dataclasses.dataclass(frozen=True)
class _Settings:
    mode: str
    job_name: str | None
    consumer_index: int | None
    num_consumers: int | None
    max_outstanding_requests: int | None
    compression: str | None
    num_splits: int | None


class DistributedDataset(UnaryDataset):
    """The node of ``distribute``: its input runs on the service's workers."""

    TRAITS = POSITIONAL

    # Where it runs is not what it computes: a checkpoint restores on another cluster.
    _NOT_FINGERPRINTED = frozenset({"service"})

    def __init__(self, input_dataset: Dataset, service: LocalCluster | str,
                 settings: _Settings) -> None:
        super().__init__(input_dataset)
        self.service = service
        self.settings = settings
        self.name = "distribute"

    def cardinality(self) -> int:
        settings = self.settings
        if settings.mode == "distributed_epoch" and settings.job_name is None:
            return self.input_dataset.cardinality()
        return UNKNOWN

    @property
    def element_spec(self) -> Any:
        # From the input, computed here if need be: never a job just to look at an element
        # (it would also count as a pass, see _next_pass).
        return self.input_dataset.element_spec

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return DistributedIterator(ctx, self)


_PAYLOADS: weakref.WeakKeyDictionary[DistributedDataset, tuple[str, list[Any]]] = \
    weakref.WeakKeyDictionary()


def _payload(node: DistributedDataset, ray: Any) -> list[Any]:
    """The pipeline upstream of ``node``, pickled into Ray's object store once per Ray
    session (not once per pass: in-memory sources can weigh megabytes), in a list so that
    Ray hands workers the reference and they fetch it only the first time."""
    session = ray.get_runtime_context().get_job_id()
    with _LOCK:
        known = _PAYLOADS.get(node)
        if known is None or known[0] != session:
            payload = pickle_pipeline(node.input_dataset, "distribute()")
            known = _PAYLOADS[node] = (session, [ray.put(payload)])
        return known[1]


_PASSES: weakref.WeakKeyDictionary[DistributedDataset, itertools.count[int]] = \
    weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _next_pass(node: DistributedDataset) -> int:
    """The number of this pass over ``node`` in this process (0, 1, ...; tf.data's
    repetition count): trainers that each build the pipeline and iterate it name the same
    job for the same pass, and a second pass never joins the finished first one."""
    with _LOCK:
        counter = _PASSES.setdefault(node, itertools.count())
        return next(counter)


@dataclasses.dataclass
class _Task:
    """One part of the job this consumer reads, running on a worker."""

    source: int | str  # the split, or the stream (the worker whose pass it is)
    key: str
    part: Part
    worker: str = ""
    handle: Any = None
    compress: bool = False
    received: int = 0
    request: Any = None  # the fetch in flight


class DistributedIterator(DatasetIterator):
    """Takes a job's output from the service's workers (module doc)."""

    OPERATION = "distribute"

    def __init__(self, ctx: IteratorContext, node: DistributedDataset) -> None:
        super().__init__(ctx)
        self._node = node
        self._settings = node.settings
        self._iteration = _next_pass(node)
        self._consumer = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._started = False
        self._restored: State | None = None
        self._reset_position()

    def _reset_position(self) -> None:
        self._consumed: dict[int | str, int] = collections.Counter()
        self._finished: set[int | str] = set()
        self._round = 0
        self._num_splits = 0
        self._seed: int | None = None
        self._tasks: dict[int | str, _Task] = {}
        self._buffer: collections.deque[tuple[int | str, tuple[Any, ...]]] = \
            collections.deque()
        self._received_all: set[int | str] = set()
        self._no_more_splits = False
        self._requests = 0
        self._ended = False
        self._failure: ServiceError | None = None

    # ------------------------------------------------------------------ starting
    def _start(self) -> None:
        ray = import_ray()
        settings = self._settings
        self._ray = ray
        self._dispatcher = connect(self._node.service)
        graph = self._node.input_dataset
        num_splits = self._num_splits  # a restored state's: its split numbers mean those
        if settings.mode == "distributed_epoch" and not num_splits:
            max_workers = self._ask(self._dispatcher.max_workers)
            num_splits = count_splits(graph, settings.num_splits, max_workers)
        options = self._ctx.options
        if self._seed is None:
            # Random stages given no seed get one per job: a split run again after a
            # worker died, or a pass restored from a checkpoint, draws the same order, so
            # skipping what was delivered skips exactly those elements.
            self._seed = options.seed if options.seed is not None else \
                random.SystemRandom().randrange(2**63)
        self._options = dataclasses.replace(options, seed=self._seed)
        self._payload = _payload(self._node, ray)
        key = self._job_key()
        reply = self._ask(self._dispatcher.register, key, settings.mode, num_splits,
                          settings.num_consumers, self._job_position(), self._consumer)
        self._job_id = reply["job_id"]
        self._num_splits = reply["num_splits"]
        self._workers: list[str] = reply["workers"]
        self._handles: dict[str, Any] = {}
        self._node_id = ray.get_runtime_context().get_node_id()
        self._worker_nodes: dict[str, str] = {}
        self._outstanding = settings.max_outstanding_requests or 2 * max(len(self._workers), 1)
        self._last_report = time.monotonic()
        self._waited = 0.0
        self._taken = 0
        self._report_request: Any = None
        self._started = True
        if settings.mode == "parallel_epochs" and not settings.num_consumers:
            for worker in self._workers:
                if worker not in self._finished:
                    self._start_stream(worker)

    def _job_key(self) -> str:
        settings = self._settings
        base = f"{settings.job_name}/{self._iteration}" if settings.job_name else \
            f"{self._consumer}/{self._iteration}"
        if self._restored is None:
            return base
        if settings.num_consumers:  # every consumer restoring this round joins one job
            return f"{base}/restored-round-{self._round}"
        return f"{base}/restored-{uuid.uuid4().hex}"  # this consumer's own

    def _job_position(self) -> dict[str, Any] | None:
        if self._settings.mode != "distributed_epoch" or self._restored is None:
            return None
        return {"done": sorted(int(s) for s in self._finished),
                "partial": {str(s): n for s, n in self._consumed.items()
                            if s not in self._finished and n}}

    def _ask(self, method: Any, *args: Any) -> Any:
        """Call the dispatcher; a dispatcher gone for good is a :class:`ServiceError`
        (Ray retries calls across its restarts)."""
        try:
            return self._ray.get(method.remote(*args))
        except actor_errors() as error:
            raise dispatcher_error(error) from error

    # ------------------------------------------------------------------ workers and tasks
    def _handle(self, worker: str) -> Any:
        handle = self._handles.get(worker)
        if handle is None:
            handle = self._ray.get_actor(worker, namespace=NAMESPACE)
            self._handles[worker] = handle
        return handle

    def _compress_for(self, worker: str, handle: Any) -> bool:
        compression = self._settings.compression
        if compression != "AUTO":
            return compression == "zstd"
        node = self._worker_nodes.get(worker)
        if node is None:
            node = self._worker_nodes[worker] = self._ray.get(handle.node.remote())
        return node != self._node_id

    def _run_task(self, task: _Task, avoid: str | None = None) -> None:
        """Start ``task`` (from the items it received) on a live worker, preferring those
        running the fewest of this consumer's tasks and not ``avoid``; then fetch."""
        deadline = time.monotonic() + WORKER_TIMEOUT
        errors = actor_errors()
        while True:
            load = collections.Counter(t.worker for t in self._tasks.values() if t.request)
            candidates = sorted(self._workers, key=lambda w: (w == avoid, load[w]))
            if task.worker and task.worker in self._workers and task.source == task.worker:
                candidates.insert(0, task.worker)  # a pass prefers its own worker
            for worker in candidates:
                part = dataclasses.replace(task.part, offset=task.part.offset + task.received)
                try:
                    handle = self._handle(worker)
                    capacity = (WORKER_ROUNDS, 0) if self._settings.num_consumers else \
                        (WORKER_BUFFER, WORKER_BUFFER_BYTES)
                    self._ray.get(handle.start.remote(
                        task.key, self._payload, self._options, part, capacity,
                        self._settings.num_consumers, self._consumer, self._iteration))
                    compress = self._compress_for(worker, handle)
                except (*errors, ValueError):  # dead, restarting, or gone (retired)
                    self._handles.pop(worker, None)
                    continue
                except self._ray.exceptions.RayTaskError as error:
                    # The task could not even start there (the pipeline does not unpickle).
                    cause = getattr(error, "cause", None) or error
                    self._stop(f"service worker {worker} cannot run {task.key} of the "
                               f"pipeline: {type(cause).__name__}: {cause}", cause)
                task.worker, task.handle, task.compress = worker, handle, compress
                self._fetch(task)
                return
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"no service worker took {task.key} for {WORKER_TIMEOUT:.0f} s "
                    f"(workers: {', '.join(self._workers) or 'none'})")
            self._workers = self._ask(self._dispatcher.workers) or self._workers
            # Workers restarting (Ray brings them back within seconds): wait for one.
            pings = []
            for worker in self._workers:
                try:
                    pings.append(self._handle(worker).ping.remote())
                except ValueError:
                    self._handles.pop(worker, None)
            if pings:
                self._ray.wait(pings, num_returns=1, timeout=1.0)
            else:
                self._ask(self._dispatcher.ping)

    def _fetch(self, task: _Task) -> None:
        if self._settings.num_consumers:
            return  # coordinated reads fetch per round
        task.request = task.handle.fetch.remote(task.key, WORKER_BUFFER, FETCH_WAIT,
                                                task.compress)

    def _start_stream(self, worker: str) -> None:
        task = _Task(worker, f"{self._job_id}/stream/{worker}", Part(0, 0, 0), worker=worker)
        task.received = self._consumed.get(worker, 0)
        self._tasks[worker] = task
        self._run_task(task)

    def _start_split(self) -> bool:
        """Ask for the next split and run it; ``False`` when none is left."""
        self._requests += 1
        reply = self._ask(self._dispatcher.next_split, self._job_id, self._consumer,
                          self._requests)
        self._workers = reply["workers"] or self._workers
        if reply["split"] is None:
            self._no_more_splits = True
            return False
        split, offset = reply["split"]
        task = _Task(split, f"{self._job_id}/split/{split}/{self._consumer}",
                     Part(self._num_splits, split, offset))
        self._consumed[split] = max(self._consumed.get(split, 0), offset)
        self._tasks[split] = task
        self._run_task(task)
        return True

    # ------------------------------------------------------------------ reading
    def __next__(self) -> Any:
        if self._ended:
            raise StopIteration
        if self._failure is not None:
            raise self._failure
        if not self._started:
            self._start()
        began = time.perf_counter()
        try:
            if self._settings.num_consumers:
                item, source = self._next_round(), None
            else:
                source, item = self._next_item()
        except StopIteration:
            self._end()
            raise
        finally:
            self._waited += time.perf_counter() - began
        self._taken += 1
        self._maybe_report()
        if source is not None:
            self._consumed[source] += 1
            if source in self._received_all and self._consumed[source] >= \
                    self._tasks_received(source):
                self._finish(source)
        if item[0] == "error":
            raise restore_error(item[1], note=item[2])
        return item[1]

    def _finish(self, source: int | str) -> None:
        """Every item of ``source`` was handed out: only now is a split done (one whose
        items still wait here goes back to the job if this consumer stops)."""
        self._finished.add(source)
        self._tasks.pop(source, None)
        if self._settings.mode == "distributed_epoch":
            self._ask(self._dispatcher.split_done, self._job_id, source)

    def _tasks_received(self, source: int | str) -> int:
        task = self._tasks.get(source)
        return task.part.offset + task.received if task is not None else 0

    def _next_item(self) -> tuple[int | str, tuple[Any, ...]]:
        while not self._buffer:
            if self._settings.mode == "distributed_epoch":
                while not self._no_more_splits and \
                        sum(1 for t in self._tasks.values() if t.request) < self._outstanding:
                    if not self._start_split():
                        break
            waiting = {t.request: t for t in self._tasks.values() if t.request is not None}
            if not waiting:
                raise StopIteration
            timeout = self._ctx.options.threading.element_timeout
            ready, _ = self._ray.wait(list(waiting), num_returns=1, timeout=timeout)
            if not ready:  # the requests stay in flight: the element keeps its place
                raise TimeoutError(
                    f"distribute: no element from the service's workers "
                    f"({', '.join(sorted({t.worker for t in waiting.values()}))}) within "
                    f"element_timeout={timeout} s")
            self._receive(waiting[ready[0]])
        return self._buffer.popleft()

    def _receive(self, task: _Task) -> None:
        request, task.request = task.request, None
        try:
            status, items, ended = self._ray.get(request)
        except actor_errors():
            self._run_task(task, avoid=task.worker)  # the worker died: again, elsewhere
            return
        except self._ray.exceptions.RayTaskError as error:
            # The reply could not be made (an element Ray cannot serialize): this consumer
            # cannot go on without losing elements, so it stops here, loudly.
            self._stop(f"service worker {task.worker} could not send items of {task.key}: "
                       f"{error}", error)
        if status == "unknown":  # the worker restarted and lost the task
            self._run_task(task, avoid=task.worker)
            return
        if status == "fatal":
            record, trace = items
            self._fail(task, record, trace)
        if isinstance(items, bytes):
            items = decompress(items)
        self._buffer.extend((task.source, item) for item in items)
        task.received += len(items)
        if not ended:
            self._fetch(task)
            return
        self._received_all.add(task.source)
        if self._consumed.get(task.source, 0) >= task.part.offset + task.received:
            self._finish(task.source)  # nothing of it left to hand out

    def _fail(self, task: _Task, record: Any, trace: str) -> None:
        """The worker reported the task fatal (its pipeline cannot run)."""
        cause = restore_error(record, note=trace)
        self._stop(f"service worker {task.worker} cannot run {task.key} of the pipeline: "
                   f"{cause.original_type}: {cause}", cause)

    def _stop(self, message: str, cause: BaseException) -> None:
        """End the iteration with a :class:`ServiceError`: raised now and by every later
        ``next()``; the job is left and the tasks stopped."""
        self._failure = ServiceError(message)
        self._failure.__cause__ = cause
        self._release()
        raise self._failure

    def _next_round(self) -> tuple[Any, ...]:
        settings = self._settings
        assert settings.num_consumers is not None and settings.consumer_index is not None
        workers = self._workers
        count = len(workers)
        timeout = self._ctx.options.threading.element_timeout
        began = time.monotonic()
        while True:
            round_index = self._round
            worker = workers[round_index % count]
            task = self._tasks.get(worker)
            if task is None:
                task = _Task(worker, f"{self._job_id}/rounds/{worker}",
                             Part(0, 0, (round_index // count) * settings.num_consumers),
                             worker=worker)
                self._tasks[worker] = task
                self._run_task(task)
            try:
                status, value = self._ray.get(task.handle.fetch_round.remote(
                    task.key, round_index // count, settings.consumer_index, FETCH_WAIT))
            except actor_errors():
                status, value = "unknown", None
            if status == "item":
                self._round += 1
                return value
            if status == "end":
                raise StopIteration
            if status == "gone":
                raise ServiceError(
                    f"round {round_index} of job {settings.job_name!r} was already dropped by "
                    f"worker {worker} (it holds rounds from {value * count} on): consumers "
                    "in coordinated reads must read in lock-step")
            if status == "fatal":
                self._fail(task, *value)
            if status == "unknown":
                task.part = Part(0, 0, (round_index // count) * settings.num_consumers)
                task.received = 0
                self._run_task(task)
            if timeout is not None and time.monotonic() - began > timeout:
                raise TimeoutError(
                    f"distribute: round {round_index} not ready on worker {worker} within "
                    f"element_timeout={timeout} s (in coordinated reads every consumer "
                    "must keep reading)")

    # ------------------------------------------------------------------ autoscaling input
    def _maybe_report(self) -> None:
        now = time.monotonic()
        if now - self._last_report < REPORT_SECONDS:
            return
        if self._report_request is not None:
            ready, _ = self._ray.wait([self._report_request], timeout=0)
            if ready:
                try:
                    self._learn_workers(self._ray.get(ready[0]))
                except actor_errors():
                    pass  # the dispatcher is restarting; the next report goes through
        self._report_request = self._dispatcher.report.remote(
            self._consumer, now - self._last_report, self._waited, self._taken)
        self._last_report, self._waited, self._taken = now, 0.0, 0

    def _learn_workers(self, workers: list[str]) -> None:
        if not workers or self._settings.num_consumers:
            return  # coordinated reads keep the job's workers
        self._workers = workers
        if self._settings.mode == "parallel_epochs":
            for worker in workers:  # a new worker runs a pass of its own
                if worker not in self._tasks and worker not in self._finished:
                    self._start_stream(worker)

    # ------------------------------------------------------------------ state
    def _get_state(self) -> State:
        return {"iteration": self._iteration,
                "consumed": sorted([str(s), n] for s, n in self._consumed.items() if n),
                "finished": sorted(str(s) for s in self._finished),
                "round": self._round, "num_splits": self._num_splits, "seed": self._seed}

    def _set_state(self, state: State) -> None:
        self._release()
        self._reset_position()
        self._iteration = state["iteration"]
        split_ids = self._settings.mode == "distributed_epoch"

        def source(name: str) -> int | str:
            return int(name) if split_ids else name

        for name, count in state["consumed"]:
            if not isinstance(count, int) or count < 0:
                raise CheckpointError(f"distribute: bad item count {count!r} for {name!r}")
            self._consumed[source(name)] = count
        self._finished = {source(name) for name in state["finished"]}
        self._round = int(state["round"])
        self._num_splits = int(state["num_splits"])
        self._seed = state["seed"]
        if self._seed is not None and not isinstance(self._seed, int):
            raise CheckpointError(f"distribute: bad seed {self._seed!r}")
        self._restored = state
        self._started = False

    # ------------------------------------------------------------------ ending
    def _end(self) -> None:
        self._ended = True
        self._release()

    def _release(self) -> None:
        """Leave the job (giving back unfinished splits) and stop this consumer's tasks on
        the workers."""
        if not self._started:
            return
        self._started = False
        tasks = list(self._tasks.values())
        partial = {}
        if self._settings.mode == "distributed_epoch":
            partial = {t.source: self._consumed.get(t.source, 0) for t in tasks
                       if t.source not in self._finished}
        try:
            self._ray.get(self._dispatcher.release.remote(
                self._job_id, self._consumer, partial), timeout=30)
        except Exception:  # noqa: BLE001, S110 - the service is gone: nothing to give back
            pass
        for task in tasks:
            if task.handle is not None and self._ray.is_initialized():
                try:  # a task several consumers read ends with the last of them
                    task.handle.cancel.remote(task.key, self._consumer)
                except Exception:  # noqa: BLE001, S110 - its worker is gone already
                    pass
        self._tasks.clear()
        self._buffer.clear()
