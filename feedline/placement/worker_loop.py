"""Worker processes that each run one shard of a pipeline and send its elements back.

The graph is pickled once (cloudpickle: lambdas and closures work; code by ``marshal``, see
:mod:`feedline.core.pickling`, so a worker's traceback names the user's file and line) and
shipped once to each worker at its start; a worker shards it
(:mod:`feedline.distribute.autoshard`), builds the iterator and produces elements ahead of
the consumer, at most ``credits`` beyond what the consumer has taken (flow control: the
consumer returns one credit per element it takes).
Elements cross through :class:`~feedline.placement.ipc.transport.Channel`: arrays arrive in the
consumer as views of shared memory the worker wrote, never pickled or copied.

Messages, worker to consumer (each carries the *token* of the run it belongs to, so that
messages of a run the consumer has moved past are dropped)::

    ("started", token, state)        the state of the fresh iterator (position 0)
    ("item", token, item, is_error, value, snapshot)   an error's value is a PackedError
    ("end", token)                   the shard is exhausted
    ("reached", token, item, isolated)  a run watching item ``item`` is about to compute it
    ("fatal", token, packed_error)   the worker cannot run its shard
    ("statistics", token, statistics, started_ns)  with statistics on: what the worker's
                                     pipeline measured (every STATISTICS_SECONDS and at the
                                     end), without its timeline
    ("epochs", None, [next epoch, ...])  the next epoch of each per-epoch node of the graph
                                     (reshuffling), in graph order, when one moved on: a
                                     ``repeat`` inside the pipeline starts epochs in the
                                     worker, and the next ``iter(ds)`` here continues after
                                     them, as one process running it all would

and consumer to worker: ``("start", token, position, credits, epoch, watch)``, ``("credit",
n, released_buffers)`` (the shared buffers whose arrays the consumer has freed),
``("stop",)``; closing the connection ends the worker. Positions and snapshots are those of
:mod:`feedline.execution.positions`: a worker's checkpoint is where it is in its shard.

**Watching an element.** A worker restarted after a death is told the item its predecessor
was computing (``watch``): it re-reads its shard up to that item with every ``map``
function of its pipeline run in a process of its own, one call at a time
(:func:`isolate_map_functions`, ``map(executor="process")``, whose checkpoints are the same
as an inline map's). A map call that kills its process is then that element's error
(:class:`~feedline.WorkerProcessError`), exactly where it belongs, instead of the death of
this worker; once past the watched item, the worker goes back to its own pipeline from
the state it reached. It announces the watched item before computing it (``"reached"``),
so the consumer knows when a second death is that item's, and the shard cannot go on.

Workers are fresh interpreters (:mod:`feedline.placement.ipc.spawn`): a script needs no ``if
__name__ == "__main__"`` guard; they get the parent's ``sys.path``. They ignore ``SIGINT``
(Ctrl-C is the parent's to handle: it closes the pipeline, which ends them), and exit as
soon as the parent's end of their socket closes, whoever closes it (``close()``, interpreter
exit, the parent dying); on Linux the kernel kills them when the parent dies, even inside a
C call that holds the GIL.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import multiprocessing.connection
import os
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

from feedline.core.errors import WorkerProcessError
from feedline.core.functions import renumber_error
from feedline.core.iterator import DatasetIterator, IteratorContext
from feedline.core.options import Options
from feedline.core.validation import schedulable_cpus
from feedline.execution import allocator
from feedline.execution.positions import PackedState, PositionReader, State
from feedline.placement.ipc.spawn import (
    describe_exit,
    end_process,
    exit_watch,
    serve_as_worker,
    start_worker,
)
from feedline.placement.ipc.transport import Channel, PackedError

_IN_WORKER = False
_POOL_SIZE: int | None = None

WORKER_NICENESS = 10
"""How much lower the workers' scheduling priority is than the consumer's. When the
training process and the workers both want a core, the trainer (which keeps the
accelerator busy) gets it; workers use what is left. On a machine with idle cores it
changes nothing. Measured on 2 cores, ``feed`` chess, one worker: the trainer waited 16-19%
of the time at equal priority, 8-10% with this."""


def in_worker_process() -> bool:
    """Whether this process is a worker of a ``multiprocess()`` stage.

    Example:
        >>> in_worker_process()
        False
    """
    return _IN_WORKER


def pipeline_workers() -> int | None:
    """In a worker of a ``multiprocess()`` stage, how many workers the stage has (1: a
    feeder, which runs the whole pipeline); elsewhere ``None``.

    Example:
        >>> pipeline_workers() is None
        True
    """
    return _POOL_SIZE


_ENTRY = ("import sys; from feedline.placement.worker_loop import worker_entry; "
          "worker_entry(int(sys.argv[1]), int(sys.argv[2]))")


def worker_entry(fd: int, parent_pid: int) -> None:
    """The program of a worker process: serve the socket ``fd`` until it closes."""
    global _IN_WORKER, _POOL_SIZE
    _IN_WORKER = True
    os.nice(WORKER_NICENESS)
    channel = serve_as_worker(fd, parent_pid)
    allocator.configure()
    try:
        index, num_workers, payload, path = channel.recv()
        _POOL_SIZE = num_workers
        sys.path[:] = path  # find the user's modules as the parent does
        _WorkerLoop(channel, index, num_workers, payload).run()
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the consumer closed the connection, or is gone: nothing to report to
    except BaseException as error:  # noqa: BLE001 - reported to the consumer, then exit
        try:
            channel.send(("fatal", None, PackedError(error, traceback.format_exc())))
        except OSError:
            pass
    finally:
        channel.close()


def isolate_map_functions(graph: Any) -> tuple[Any, dict[Any, Any], int]:
    """``graph`` with every ``map`` function run in a worker process of its own, one call at
    a time (``map(num_parallel_calls=1, executor="process")``; fused maps are unfused).

    A map's checkpoint is the same whatever runs it, so a state of one graph loads into the
    other. Functions that do not pickle stay where they are. Nodes under a stage that reads
    its input by index (its traits' ``keeps_input_as_written``) are kept.

    Returns:
        The graph, a map from each of its new nodes to the node it replaces (to carry
        per-epoch counts over), and how many map functions it isolated.

    Example:
        >>> import feedline as fl
        >>> isolated, _, count = isolate_map_functions(fl.Dataset.range(3).map(abs))
        >>> count, isolated.executor, isolated.num_parallel_calls
        (1, 'process', 1)
    """
    from feedline.core import pickling
    from feedline.optimize.map_fusion import FusedInlineDataset
    from feedline.transforms.filter import FilterDataset
    from feedline.transforms.map import MapDataset

    memo: dict[int, Any] = {}
    originals: dict[Any, Any] = {}
    isolated = [0]

    def pickles(fn: Any) -> bool:
        # The process executor's own pickling: what passes here is what it sends.
        try:
            pickling.dumps(fn)
        except Exception:  # noqa: BLE001 - whatever pickling raises: keep it inline
            return False
        return True

    def isolated_map(below: Any, fn: Any, name: str, unpack: bool) -> Any:
        isolated[0] += 1
        return MapDataset(below, fn, num_parallel_calls=1, deterministic=True, name=name,
                          executor="process", unpack_tuples=unpack)

    def rewrite(node: Any) -> Any:
        if id(node) in memo:
            return memo[id(node)]
        if node.traits().keeps_input_as_written:
            result = node
        elif isinstance(node, MapDataset) and pickles(node.map_func):
            result = isolated_map(rewrite(node._inputs[0]), node.map_func, node.name,
                                  node.unpack_tuples)
        elif isinstance(node, FusedInlineDataset) and pickles(node.stages):
            result = rewrite(node._inputs[0])
            for stage in node.stages:
                result = (FilterDataset(result, stage.fn, name=stage.name) if stage.is_filter
                          else isolated_map(result, stage.fn, stage.name, stage.unpack))
        else:
            inputs = [rewrite(child) for child in node._inputs]
            changed = any(new is not old for new, old in zip(inputs, node._inputs))
            result = node._with_inputs(inputs) if changed else node
        if result is not node:
            originals[result] = node
        memo[id(node)] = result
        return result

    return rewrite(graph), originals, isolated[0]


STATISTICS_SECONDS = 0.5
"""With statistics on, how often a worker sends what its pipeline measured."""


class _WorkerLoop:
    """The loop of one worker: obey commands, produce while it has credits."""

    def __init__(self, channel: Channel, index: int, num_workers: int, payload: bytes) -> None:
        import cloudpickle

        from feedline.core.fingerprint import declared_types
        from feedline.distribute.autoshard import plan_sharding, worker_shard

        self._channel = channel
        graph, options = cloudpickle.loads(payload)
        plan = plan_sharding(graph, num_workers) if num_workers > 1 else None
        # Errors name the pipeline's element, not this shard's count of it.
        self._graph, self._element_indices = worker_shard(graph, num_workers, index, plan)
        self._index = index
        self._types = declared_types(graph)
        # The per-epoch nodes, in the order the consumer lists its own: the epochs
        # they start here are counted in this worker's context.
        self._epoch_nodes = per_epoch_nodes(self._graph)
        self._epochs_sent: tuple[int, ...] = ()
        # One context for the worker's life: per-epoch behaviour (reshuffling) counts the
        # epochs this worker runs, as one process running the whole pipeline would.
        self._ctx = IteratorContext(options=options)
        if options.profiling.statistics or options.profiling.trace:
            from feedline.profiling.collect import collector_for

            # One collector for the worker's life: its stages add up over runs and epochs.
            self._ctx.statistics = collector_for(options)
        self._statistics_sent = time.monotonic()
        self._root: DatasetIterator | None = None
        self._reader: PositionReader | None = None
        self._token: Any = None
        self._credits = 0
        self._runs = 0
        self._epoch_counts: dict[int, dict[Any, int]] = {}
        # While watching an item (see the module doc): the item, whether it was announced,
        # and the graph with its map functions isolated (made on first need).
        self._watch: int | None = None
        self._announced = False
        self._isolated: tuple[Any, dict[Any, Any], int] | None = None

    def _begin_epoch(self, epoch: int) -> None:
        """Set the per-node epoch counts for a run of ``epoch`` from its start: the counts
        this worker had when it first began that epoch (a rewind to the start of an epoch
        reshuffles as that epoch did), else the counts now."""
        counts = self._epoch_counts.get(epoch)
        if counts is None:
            if self._runs == 0 and epoch > 0:
                self._catch_up(epoch)
            self._epoch_counts[epoch] = dict(self._ctx.iterations.items())
            return
        self._ctx.iterations.clear()
        for node, count in counts.items():
            self._ctx.set_iterations(node, count)

    def _catch_up(self, epoch: int) -> None:
        """A worker first started at ``epoch`` > 0 (its pool was made after a restore) counts
        the epochs before it as run, so per-epoch behaviour (reshuffling) matches."""
        from feedline.core.graph import graph_nodes

        for node in graph_nodes(self._graph):
            self._ctx.set_iterations(node, epoch)

    def run(self) -> None:
        channel = self._channel
        while True:
            if self._reader is None or self._credits <= 0:
                self._obey(channel.recv())  # blocks; EOFError when the consumer closes
                continue
            self._produce()
            while channel.poll():
                self._obey(channel.recv())

    def _obey(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "credit":
            self._credits += message[1]
            self._channel.reclaim(message[2])
        elif kind == "start":
            _, token, position, credits, epoch, watch = message
            if position is None:
                self._begin_epoch(epoch)
            self._runs += 1
            self._start(token, position, credits, watch)
        elif kind == "stop":
            self._stop()

    def _start(self, token: Any, position: State | None, credits: int,
               watch: int | None = None) -> None:
        from feedline.core.state_codec import declared_types_in_use

        self._stop()
        self._token = token
        self._watch, self._announced = watch, False
        try:
            graph = self._graph if watch is None else self._isolated_graph()
            root = self._root = graph._make_iterator(self._ctx)
            if self._ctx.statistics is not None:
                self._ctx.statistics.drive(root)  # samples from this worker's reads
            pull = root.__next__ if watch is None else self._pull_watched
            # Snapshots are pickled here, where PositionReader counts their cost.
            reader = PositionReader(pull, lambda: PackedState(root.state_dict()),
                                    root.replay_exact)
            if position is None:
                initial = root.state_dict()
            else:
                with declared_types_in_use(self._types):
                    root.load_state_dict(position["input"])
                reader.restore(position)
        except Exception as error:  # noqa: BLE001 - this run cannot start: say why
            self._channel.send(("fatal", token, PackedError(error, traceback.format_exc())))
            self._stop()
            return
        self._reader, self._credits = reader, credits
        if position is None:
            self._channel.send(("started", token, initial))

    def _isolated_graph(self) -> Any:
        """The graph with its map functions isolated, its new nodes counting the epochs
        their originals count (a reshuffling stage above a map keeps its order)."""
        if self._isolated is None:
            self._isolated = isolate_map_functions(self._graph)
        graph, originals, _ = self._isolated
        for new, original in originals.items():
            count = self._ctx.iterations.get(original)
            if count is not None:
                self._ctx.set_iterations(new, count)
        return graph

    def _pull_watched(self) -> Any:
        reader, root = self._reader, self._root
        assert root is not None and self._watch is not None
        if not self._announced and reader is not None and reader.pulled >= self._watch:
            # From here until this item is out, a death of this worker is this item's.
            self._announced = True
            isolated = self._isolated is not None and self._isolated[2] > 0
            self._channel.send(("reached", self._token, reader.pulled, isolated))
        return root.__next__()

    def _stop_watching(self) -> tuple[int, State]:
        """Past the watched item: go on with the pipeline's own graph from the state the
        isolated one reached; return that position as a snapshot (``(item, state)``)."""
        from feedline.core.state_codec import declared_types_in_use

        root, reader = self._root, self._reader
        assert root is not None and reader is not None
        at, state = reader.pulled, root.state_dict()
        self._watch = None
        self._root = None
        root.close()
        root = self._root = self._graph._make_iterator(self._ctx)
        if self._ctx.statistics is not None:
            self._ctx.statistics.drive(root)
        with declared_types_in_use(self._types):
            root.load_state_dict(state)
        self._reader = PositionReader(root.__next__, lambda: PackedState(root.state_dict()),
                                      root.replay_exact)
        self._reader.restore({"at": at, "next": at, "done": [], "errors": []})
        return at, state

    def _stop(self) -> None:
        root, self._root, self._reader = self._root, None, None
        if root is not None:
            root.close()

    def _produce(self) -> None:
        reader = self._reader
        assert reader is not None
        token = self._token
        try:
            item, is_error, value, snapshot = reader.pull()
            if self._watch is not None and item >= self._watch and not reader.replaying:
                snapshot = self._stop_watching()
        except StopIteration:
            self._send_statistics(force=True)
            self._send_epochs()
            self._channel.send(("end", token))
            self._stop()
            return
        except Exception as error:  # noqa: BLE001 - taking a snapshot failed: fatal
            self._channel.send(("fatal", token, PackedError(error, traceback.format_exc())))
            self._stop()
            return
        self._credits -= 1
        if is_error:
            reader.handed_out(item)  # the consumer keeps its record from here on
            if self._element_indices:
                renumber_error(value, self._element_indices, f"worker {self._index}'s shard")
            value = PackedError(value, "".join(traceback.format_exception(value)))
        try:
            self._channel.send(("item", token, item, is_error, value, snapshot))
        except OSError:
            raise  # the consumer is gone
        except Exception as error:  # noqa: BLE001 - the element won't pickle (pickle raises
            # TypeError, AttributeError, PicklingError or whatever a __reduce__ raises)
            wrapped = TypeError(f"element {item} of this worker's shard cannot be sent to the "
                                f"main process: {error}")
            self._channel.send(("item", token, item, True,
                                PackedError(wrapped, traceback.format_exc()), snapshot))
        self._send_statistics()
        self._send_epochs()

    def _send_epochs(self) -> None:
        iterations = self._ctx.iterations
        epochs = tuple(iterations.get(node, 0) for node in self._epoch_nodes)
        if epochs != self._epochs_sent:
            self._epochs_sent = epochs
            self._channel.send(("epochs", None, list(epochs)))

    def _send_statistics(self, force: bool = False) -> None:
        collector = self._ctx.statistics
        if collector is None:
            return
        now = time.monotonic()
        if force or now - self._statistics_sent >= STATISTICS_SECONDS:
            self._statistics_sent = now
            # Without the worker's timeline: the consumer has its own, and a timeline grows
            # with the run (sent whole every STATISTICS_SECONDS, it made the messages, and
            # the copy the consumer keeps, grow for as long as the run lasted).
            statistics = dataclasses.replace(collector.statistics(), timeline=())
            self._channel.send(("statistics", self._token, statistics, collector.started_ns))


def per_epoch_nodes(graph: Any) -> list[Any]:
    """``graph``'s nodes that count epochs (reshuffling), in graph order: the same order in
    the consumer's graph and in a worker's copy of it (unpickled, sharded).

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(4).shuffle(4).repeat(2).shuffle(2)
        >>> [type(node).__name__ for node in per_epoch_nodes(ds)]
        ['ShuffleDataset', 'ShuffleDataset']
    """
    from feedline.core.graph import graph_nodes
    from feedline.core.seed_epochs import EpochCounter

    return [node for node in graph_nodes(graph)
            if isinstance(getattr(node, "_epochs", None), EpochCounter)]


class WorkerPool:
    """``num_workers`` processes, each running shard ``i`` of ``graph``.

    Processes start on :meth:`start` (or the first :meth:`send` to a worker) and stay alive
    until :meth:`shutdown`, so one pool serves run after run (epochs, restores).

    Args:
        graph: The pipeline (before sharding), pickled once here.
        options: The pipeline's options, for the workers' iterators.
        num_workers: Processes.
        name: Stage name, in process names and errors.
        close_timeout: Seconds :meth:`shutdown` waits for workers to end before terminating
            them.

    Raises:
        TypeError: The graph cannot be pickled (the message names why).
    """

    def __init__(self, graph: Any, options: Options, num_workers: int, name: str,
                 close_timeout: float) -> None:
        from feedline.core import pickling

        try:
            self._payload = pickling.dumps((graph, options))
        except Exception as error:
            raise TypeError(f"{name}: the pipeline cannot be sent to worker processes, it "
                            f"does not pickle: {error}") from error
        self.num_workers = num_workers
        self.name = name
        self._close_timeout = close_timeout
        # Each worker's share of the CPUs, for its native libraries' threads: the budget
        # its AUTOTUNE stages were given (multiprocess() sets it), else an equal share.
        self._threads_per_worker = options.autotune.cpu_budget or max(
            1, schedulable_cpus() // num_workers)
        self._processes: list[subprocess.Popen[bytes] | None] = [None] * num_workers
        self._channels: list[Channel | None] = [None] * num_workers
        # Readable when the process ends (Linux): a death is seen even if a child of the
        # worker still holds its socket open.
        self._exits: list[int | None] = [None] * num_workers
        self._shut = False
        # Spawning and shutting down exclude each other: a consumer thread restarting a
        # dead worker while another thread closes the pipeline must not start a process
        # after the shutdown ended them all (it would be left running).
        self._spawn_lock = threading.Lock()
        self._token_source = itertools.count(1)
        self.inbox: list[collections.deque[Any]] = [collections.deque()
                                                    for _ in range(num_workers)]
        """Messages received from each worker and not yet taken by the consumer."""

    def new_token(self) -> int:
        """A tag for a new run of a worker, never used before in this pool (messages of
        runs the consumer has moved past are recognised and dropped)."""
        return next(self._token_source)

    def start(self, indices: Sequence[int]) -> None:
        """Start the workers ``indices`` not running yet: every process first, then each
        one's pipeline.

        A pipeline larger than the socket's buffer (a ``from_tensor_slices`` of a few
        thousand paths) makes its send wait until the worker has imported feedline and
        reads it; started and sent one by one, ``n`` workers cost ``n`` imports in a row
        (15 workers: 14 s to the first batch on a 16-core machine). Started together, the
        imports overlap.
        """
        with self._spawn_lock:
            if self._shut:
                raise RuntimeError(f"the worker processes of {self.name} are shut down")
            fresh = [index for index in dict.fromkeys(indices)
                     if self._channels[index] is None]
            unsent: list[int] = []
            try:
                for index in fresh:
                    process = start_worker(_ENTRY, threads=self._threads_per_worker)
                    self._processes[index] = process
                    self._channels[index] = process.channel  # type: ignore[attr-defined]
                    # Readable when the process ends: a death is seen even if a child of
                    # the worker still holds its socket open.
                    self._exits[index] = exit_watch(process.pid)
                    unsent.append(index)
                while unsent:
                    channel = self._channels[unsent[0]]
                    assert channel is not None
                    try:
                        channel.send((unsent[0], self.num_workers, self._payload,
                                      list(sys.path)))
                    except OSError:
                        pass  # it died: the next receive reports how (and restarts it)
                    del unsent[0]
            except BaseException:
                # A worker never sent its pipeline would take the first command for it:
                # end it, the next start starts it again.
                self._end(unsent, 0.0)
                raise

    def _spawn(self, index: int) -> None:
        self.start([index])

    def pids(self) -> list[int | None]:
        """Process ids of the workers started (``None`` for one not started)."""
        return [None if p is None else p.pid for p in self._processes]

    def send(self, index: int, message: tuple[Any, ...]) -> None:
        """Send a command to worker ``index``, starting it first if needed."""
        if self._shut:
            raise RuntimeError(f"the worker processes of {self.name} are shut down")
        if self._channels[index] is None:
            self._spawn(index)
        channel = self._channels[index]
        assert channel is not None
        try:
            channel.send(message)
        except OSError:
            pass  # it died: the next receive reports how

    def _take_message(self, index: int, channel: Channel) -> int:
        """Receive worker ``index``'s message waiting on ``channel`` into its inbox."""
        try:
            self.inbox[index].append(channel.recv())
        except (EOFError, OSError):
            raise self._death(index) from None
        return index

    def credit(self, index: int) -> None:
        """Let worker ``index`` produce one more element, and reuse the shared buffers of
        the elements the consumer has freed."""
        channel = self._channels[index]
        if channel is not None:
            self.send(index, ("credit", 1, channel.released()))

    def restart(self, index: int) -> None:
        """Replace worker ``index`` (after it died) by a fresh process."""
        self._end([index], 0.0)
        self._spawn(index)

    def receive(self, indices: Sequence[int], timeout: float | None) -> int:
        """Receive the next message of one of the workers ``indices`` (the first ready)
        into its :attr:`inbox`; return the worker's index.

        The message is in the inbox before this returns: an interruption (Ctrl-C) after
        it loses nothing.

        Raises:
            WorkerProcessError: One of them died.
            TimeoutError: Nothing came within ``timeout`` seconds.
        """
        channels = {}
        for index in indices:
            channel = self._channels[index]
            if channel is None:
                raise WorkerProcessError(f"{self.name}: worker {index} was not started",
                                         worker=index)
            channels[channel] = index
        for channel, index in channels.items():
            # A message waiting already (a feeder ahead of its consumer) is taken without
            # building a selector over every channel and exit watch (half the cost).
            if channel.poll():
                return self._take_message(index, channel)
        sentinels = {fd: i for i in indices if (fd := self._exits[i]) is not None}
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = multiprocessing.connection.wait([*channels, *sentinels], wait)
            if not ready:
                raise TimeoutError(
                    f"{self.name}: no element from worker process(es) {list(indices)} within "
                    f"{timeout} s (Options().threading.element_timeout)")
            for handle in ready:  # data first: a worker may have sent before it died
                if handle in channels:
                    return self._take_message(channels[handle], handle)
            for handle in ready:
                if handle in sentinels:
                    raise self._death(sentinels[handle])

    def _death(self, index: int) -> WorkerProcessError:
        process = self._processes[index]
        assert process is not None
        try:
            exitcode: int | None = process.wait(1.0)
        except subprocess.TimeoutExpired:
            exitcode = None
        return WorkerProcessError(
            f"{self.name}: worker process {index} of {self.num_workers} (pid {process.pid}) "
            f"{describe_exit(exitcode)}", worker=index, exitcode=exitcode)

    def shutdown(self) -> None:
        """End every worker: close its connection (it exits at once), wait up to
        ``close_timeout`` seconds, then terminate, then kill. Idempotent."""
        with self._spawn_lock:
            if self._shut:
                return
            self._shut = True
        self._end(range(self.num_workers), self._close_timeout)

    def _end(self, indices: Sequence[int], timeout: float) -> None:
        for index in indices:
            channel, self._channels[index] = self._channels[index], None
            if channel is not None:
                channel.close()  # the worker sees the end of its socket and exits
            exit_fd, self._exits[index] = self._exits[index], None
            if exit_fd is not None:
                os.close(exit_fd)
        deadline = time.monotonic() + timeout
        live = [p for i in indices if (p := self._processes[i]) is not None]
        try:
            for process in live:
                end_process(process, max(0.0, deadline - time.monotonic()))
        except BaseException:  # interrupted (Ctrl-C) while waiting: no second chance
            for process in live:
                if process.poll() is None:
                    process.kill()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(1.0)
            raise
        for index in indices:
            self._processes[index] = None
