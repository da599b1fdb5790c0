"""A service worker: a Ray actor that runs parts of jobs' pipelines and holds their output
until consumers fetch it.

Each *task* (one split, or a whole pipeline for ``parallel_epochs``) runs on its own thread
("feedline-service-task"), producing into a bounded buffer: a task is at most ``capacity``
(items and bytes) items ahead of its consumers (backpressure; memory on a worker is bounded by its tasks'
buffers). Consumers take items with :meth:`WorkerCore.fetch` (several per call: one Ray call
costs about half a millisecond) or, for coordinated reads, one per round with
:meth:`WorkerCore.fetch_round`. Items are ``("value", element)`` or, when the pipeline
raised for an element, ``("error", record, traceback)``: the consumer raises it in its
place and goes on, as a local pipeline does. A task whose pipeline cannot be built (it does
not unpickle here, a file is missing) is *fatal*: every fetch says so.

The actor is threaded (Ray's ``max_concurrency``): fetches block without holding up other
consumers. Ray restarts a killed worker (``max_restarts``) with no tasks; a consumer that
finds its task gone (``"unknown"``) or its call failed starts it again, on any worker, from
the items it already received.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import pickle
import threading
import time
import traceback
from typing import Any

from feedline.core.dataset import Dataset
from feedline.core.error_records import error_record
from feedline.core.options import Options
from feedline.pipeline import PipelineIterator
from feedline.service.splits import Part, describe, part_dataset
from feedline.core.structure import element_bytes

MAX_CONCURRENCY = 64
"""Calls one worker serves at once (blocking fetches of many consumers)."""

ABANDONED_TASK_SECONDS = 600.0
"""Default seconds a task may go unread before the worker ends it: its consumer crashed or
was killed without closing. A consumer that was only slow and reads again finds it gone and
starts it again from what it received, losing nothing."""

REMEMBERED_TASKS = 10_000
"""Ended tasks a worker remembers (late fetches of them then read as ended)."""

CACHED_PIPELINES = 16
"""Unpickled pipelines a worker keeps (the most recently used)."""


class _Output:
    """What a task's producer and its consumers share: the producer can finish, fail, or
    be stopped."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.finished = False
        self.fatal: tuple[dict[str, Any], str] | None = None
        self.stopped = False

    def end(self, fatal: tuple[dict[str, Any], str] | None = None) -> None:
        """No more items (``fatal``: because the pipeline cannot run)."""
        with self._cond:
            self.finished = True
            self.fatal = fatal
            self._cond.notify_all()

    def stop(self) -> None:
        """The task is cancelled: the producer stops at its next item."""
        with self._cond:
            self.stopped = True
            self._cond.notify_all()


class _Buffer(_Output):
    """A task's output: a queue bounded in items and in bytes (at least one item fits)."""

    def __init__(self, capacity: int, max_bytes: int) -> None:
        super().__init__()
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._bytes = 0
        self._items: collections.deque[tuple[Any, ...]] = collections.deque()
        self._sizes: collections.deque[int] = collections.deque()

    def put(self, item: tuple[Any, ...]) -> bool:
        """Add ``item``, waiting for room; ``False`` if the task was stopped."""
        size = element_bytes(item[1]) if item[0] == "value" else 0
        with self._cond:
            self._cond.wait_for(lambda: self.stopped or not self._items or (
                len(self._items) < self._capacity and self._bytes + size <= self._max_bytes))
            if self.stopped:
                return False
            self._items.append(item)
            self._sizes.append(size)
            self._bytes += size
            self._cond.notify_all()
            return True

    def take(self, max_items: int, wait: float) -> tuple[list[tuple[Any, ...]], bool]:
        """Up to ``max_items`` items, waiting at most ``wait`` seconds for the first; and
        whether the task has ended with nothing left."""
        with self._cond:
            self._cond.wait_for(lambda: self._items or self.finished or self.stopped, wait)
            taken = [self._items.popleft() for _ in range(min(max_items, len(self._items)))]
            for _ in taken:
                self._bytes -= self._sizes.popleft()
            if taken:
                self._cond.notify_all()
            return taken, self.finished and not self._items

    def __len__(self) -> int:
        return len(self._items)


class _Rounds(_Output):
    """Coordinated reads: items grouped into rounds of ``num_consumers``, one each; a round
    is dropped once every consumer took its item. At most ``capacity`` rounds are held; an
    incomplete last round is dropped (every consumer gets a round, or none does)."""

    def __init__(self, num_consumers: int, capacity: int, first_round: int) -> None:
        super().__init__()
        self._num_consumers = num_consumers
        self._capacity = capacity
        self._rounds: collections.deque[list[Any]] = collections.deque()
        self._taken: collections.deque[set[int]] = collections.deque()
        self._base = first_round
        self._filling: list[Any] = []

    def put(self, item: tuple[Any, ...]) -> bool:
        self._filling.append(item)
        if len(self._filling) < self._num_consumers:
            return True
        with self._cond:
            self._cond.wait_for(lambda: len(self._rounds) < self._capacity or self.stopped)
            if self.stopped:
                return False
            self._rounds.append(self._filling)
            self._taken.append(set())
            self._filling = []
            self._cond.notify_all()
            return True

    def take(self, round_index: int, consumer: int, wait: float) -> tuple[str, Any]:
        """``("item", item)``, ``("end", None)``, ``("wait", None)`` (not produced yet) or
        ``("gone", first round held)``."""
        with self._cond:
            ready = lambda: (round_index < self._base + len(self._rounds)
                             or self.finished or self.stopped)
            self._cond.wait_for(ready, wait)
            if round_index < self._base:
                return "gone", self._base
            position = round_index - self._base
            if position >= len(self._rounds):
                return ("end", None) if self.finished or self.stopped else ("wait", None)
            self._taken[position].add(consumer)
            item = self._rounds[position][consumer]
            while self._taken and len(self._taken[0]) == self._num_consumers:
                self._rounds.popleft()
                self._taken.popleft()
                self._base += 1
                self._cond.notify_all()
            return "item", item

    def __len__(self) -> int:
        return len(self._rounds) * self._num_consumers


class _Task:
    """One part of one job, running on its own thread."""

    def __init__(self, key: str, graph: Dataset, part: Part, output: _Buffer | _Rounds,
                 worker: str, epoch: int) -> None:
        self.key = key
        self.part = part
        self.consumers: set[str] = set()
        self.output = output
        self.produced = 0
        self.busy_seconds = 0.0
        self.last_read = time.monotonic()
        self._graph = graph
        self._worker = worker
        self._epoch = epoch
        self._thread = threading.Thread(target=self._run, name="feedline-service-task",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with PipelineIterator(part_dataset(self._graph, self.part), self._epoch) as iterator:
                self._produce(iterator)
        except BaseException as error:  # noqa: BLE001 - building failed, or SystemExit & co.
            # Never leave consumers waiting on a task that is gone: they get the error.
            self.output.end(fatal=(error_record(error), traceback.format_exc()))

    def _produce(self, iterator: PipelineIterator) -> None:
        skip = self.part.offset
        while True:
            started = time.perf_counter()
            try:
                item: tuple[Any, ...] = ("value", next(iterator))
            except StopIteration:
                self.output.end()
                return
            except Exception as error:  # noqa: BLE001 - raised in its place on the consumer
                item = ("error", error_record(error),
                        f"in service worker {self._worker}, {describe(self.part)}:\n"
                        + traceback.format_exc())
            self.busy_seconds += time.perf_counter() - started
            if skip:  # delivered before a restart: computed again to keep positions
                skip -= 1
                continue
            if not self.output.put(item):
                return
            self.produced += 1  # once in the buffer: delivered = produced - buffered

    @property
    def delivered(self) -> int:
        """Items of the part handed to consumers (those skipped at the start included)."""
        return self.part.offset + self.produced - len(self.output)

    def stop(self, timeout: float) -> bool:
        """Stop producing; whether the thread ended within ``timeout`` seconds (a pipeline
        stuck in a user function cannot be interrupted from outside)."""
        self.output.stop()
        self._thread.join(timeout)
        return not self._thread.is_alive()


class WorkerCore:
    """The worker actor's methods (the actor class is ``ray.remote(WorkerCore)``).

    Args:
        name: The worker's name (its Ray actor name), in messages.
        abandoned_after: Seconds a task may go unread before it is ended.
    """

    def __init__(self, name: str, abandoned_after: float = ABANDONED_TASK_SECONDS) -> None:
        self.name = name
        self._abandoned_after = abandoned_after
        self._tasks: dict[str, _Task] = {}
        # Tasks read to their end, and tasks abandoned with the items they had delivered
        # (where a consumer starting one again resumes): the newest only.
        self._ended: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._abandoned: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._graphs: collections.OrderedDict[str, Dataset] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._started = time.monotonic()

    def ping(self) -> str:
        """The worker's name, once it is up."""
        return self.name

    def node(self) -> str:
        """The Ray node this worker runs on (consumers elsewhere get compressed items)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def start(self, key: str, payload: list[Any], options: Options, part: Part,
              capacity: tuple[int, int], num_consumers: int | None = None,
              consumer: str = "", epoch: int = 0) -> None:
        """Start task ``key`` for ``consumer`` (or join it, if it runs already): ``part``
        of the pipeline pickled in the object ``payload[0]`` (a Ray object reference,
        fetched only the first time this worker sees it), under ``options``, as pass
        ``epoch`` (seeded shuffles reshuffle per pass), holding at most ``capacity``
        (items, bytes) ahead of its consumers (rounds, for coordinated reads)."""
        self._end_abandoned()
        with self._lock:
            task = self._tasks.get(key)
            if task is not None:
                task.consumers.add(consumer)
                return
            self._ended.pop(key, None)
            abandoned_at = self._abandoned.pop(key, None)
            if abandoned_at is not None and abandoned_at > part.offset:
                # Shared by several consumers, each of which knows only its own share.
                part = dataclasses.replace(part, offset=abandoned_at)
            graph = self._graph(payload).with_options(options)
            output: _Buffer | _Rounds
            if num_consumers:
                output = _Rounds(num_consumers, capacity[0], part.offset // num_consumers)
            else:
                output = _Buffer(*capacity)
            task = self._tasks[key] = _Task(key, graph, part, output, self.name, epoch)
            task.consumers.add(consumer)

    def _graph(self, payload: list[Any]) -> Dataset:
        key = payload[0].hex()
        graph = self._graphs.get(key)
        if graph is None:
            import ray
            from ray import cloudpickle  # Ray's copy: classes made in __main__ stay the same

            graph = cloudpickle.loads(ray.get(payload[0]))
            self._graphs[key] = graph
            while len(self._graphs) > CACHED_PIPELINES:
                self._graphs.popitem(last=False)
        self._graphs.move_to_end(key)
        return graph

    def fetch(self, key: str, max_items: int, wait: float,
              compress: bool = False) -> tuple[str, Any, bool]:
        """``("items", items, ended)``: up to ``max_items`` items of task ``key`` (waiting
        at most ``wait`` seconds for the first), ``ended`` once it has no more;
        ``("fatal", (record, traceback), True)``; or ``("unknown", None, False)``: this worker
        does not run that task (it restarted)."""
        with self._lock:
            task = self._tasks.get(key)
            if task is not None:
                task.last_read = time.monotonic()
            if task is None:
                ended = key in self._ended
                return ("items", [], True) if ended else ("unknown", None, False)
        output = task.output
        assert isinstance(output, _Buffer)
        items, ended = output.take(max_items, wait)
        if ended and output.fatal is not None:
            if items:  # what came before the failure first; the next fetch says it
                return "items", items, False
            return "fatal", output.fatal, True
        if ended:
            self._retire(key)
        if compress and items:
            return "items", _compress(items), ended
        return "items", items, ended

    def fetch_round(self, key: str, round_index: int, consumer: int,
                    wait: float) -> tuple[str, Any]:
        """Coordinated reads: consumer ``consumer``'s item of (this task's) round
        ``round_index``: ``("item", item)``, ``("end", None)``, ``("wait", None)``,
        ``("gone", first round held)``, ``("fatal", (record, traceback))`` or
        ``("unknown", None)``."""
        with self._lock:
            task = self._tasks.get(key)
        if task is None:
            return "unknown", None
        task.last_read = time.monotonic()
        output = task.output
        assert isinstance(output, _Rounds)
        status, value = output.take(round_index, consumer, wait)
        if status == "end" and output.fatal is not None:
            return "fatal", output.fatal
        return status, value

    def cancel(self, key: str, consumer: str = "") -> None:
        """``consumer`` no longer reads task ``key``: the task stops (dropping what it
        buffered) once no consumer reads it."""
        with self._lock:
            task = self._tasks.get(key)
            if task is None:
                return
            task.consumers.discard(consumer)
            if task.consumers:
                return
            del self._tasks[key]
        task.stop(timeout=0)

    def _end_abandoned(self) -> None:
        now = time.monotonic()
        with self._lock:
            abandoned = [key for key, task in self._tasks.items()
                         if now - task.last_read > self._abandoned_after]
            tasks = [self._tasks.pop(key) for key in abandoned]
            for task in tasks:
                if isinstance(task.output, _Buffer):  # rounds restart at the asked round
                    _remember(self._abandoned, task.key, task.delivered)
        for task in tasks:
            task.stop(timeout=0)


    def _retire(self, key: str) -> None:
        with self._lock:
            if self._tasks.pop(key, None) is not None:
                _remember(self._ended, key, None)

    def status(self) -> dict[str, Any]:
        """What this worker runs: tasks, items produced and buffered, seconds spent
        producing (the autoscaler's measure of a worker's capacity)."""
        self._end_abandoned()
        with self._lock:
            tasks = list(self._tasks.values())
        return {"name": self.name, "pid": os.getpid(), "tasks": len(tasks),
                "produced": sum(task.produced for task in tasks),
                "busy_seconds": sum(task.busy_seconds for task in tasks),
                "buffered": sum(len(task.output) for task in tasks),
                "threads": sum(1 for thread in threading.enumerate()
                               if thread.name == "feedline-service-task"),
                "uptime": time.monotonic() - self._started}

    def shutdown(self, timeout: float = 5.0) -> int:
        """Stop every task; the number of task threads still running after ``timeout``."""
        with self._lock:
            tasks = list(self._tasks.values())
            self._tasks.clear()
        deadline = time.monotonic() + timeout
        return sum(not task.stop(max(0.0, deadline - time.monotonic())) for task in tasks)


def _remember(memory: collections.OrderedDict[str, Any], key: str, value: Any) -> None:
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > REMEMBERED_TASKS:
        memory.popitem(last=False)


def _compress(items: list[tuple[Any, ...]]) -> bytes:
    from feedline.core import zstd

    return zstd.compress(pickle.dumps(items, protocol=5))


def decompress(payload: bytes) -> list[tuple[Any, ...]]:
    """The items a worker compressed (``compress=True``)."""
    from feedline.core import zstd

    return pickle.loads(zstd.decompress(payload))


def pickle_pipeline(dataset: Dataset, where: str) -> bytes:
    """``dataset`` pickled for workers (cloudpickle: lambdas and closures work).

    Ray's own copy of cloudpickle, the one that carries elements back: a class defined in
    ``__main__`` (a namedtuple) then comes back as the same class, not a copy.

    Raises:
        TypeError: It does not pickle (the message says why).
    """
    from ray import cloudpickle

    try:
        return cloudpickle.dumps(dataset)
    except Exception as error:
        raise TypeError(f"{where}: the pipeline cannot be sent to service workers, it does "
                        f"not pickle: {error}") from error
