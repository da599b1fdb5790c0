"""AUTOTUNE chooses threads or worker processes for a whole pipeline, from measurement.

A pipeline written the tf.data way ends with ``prefetch(AUTOTUNE)``. When it does,
:func:`wrap_for_processes` puts an :class:`AutoProcessesDataset` on top, whose iterator runs
the pipeline in this process for a short *trial* (:data:`TRIAL_SECONDS`, at least
:data:`TRIAL_MIN_ELEMENTS` elements) and measures how many cores it kept busy: the process's
CPU time over the wall time, ``u``. Threads run NumPy, codecs and I/O in parallel, but Python
holds the GIL: a pipeline whose Python dominates stays near one core whatever its thread
count, and one that waits on I/O keeps fewer busy (more processes then also read more at
once). The placement policy (:mod:`feedline.placement.policy`) reads it: if the CPU budget
``c`` is at least ``PIPELINE_MIN_GAIN`` times ``u``, the pipeline moves to ``round(c / max(u,
1))`` worker processes (:mod:`feedline.placement.multiprocess`), each of which may use ``c //
workers`` threads; a pipeline that cannot be split may move whole to one feeder process;
otherwise it continues on threads. The decision, with its figures, is logged (logger
``feedline.autotune``) and kept as :attr:`AutoProcessesIterator.decision`.

Where the budget holds too few cores beside the pipeline for the trial alone to choose a
feeder (2 cores), the threads decision is *provisional*: what a feeder gives there depends on
the training loop, which the trial did not run. After :data:`FEEDER_TRY_AFTER_SECONDS`, a
window measures the loop on threads
(:class:`_LoopWindow`); a loop that waits on the pipeline keeps the threads; otherwise a
feeder starts at the position of the last element delivered while the threads go on feeding
the loop (:class:`_FeederJoining`: its start-up costs the loop no wait), drops the elements the
threads delivered meanwhile (the same ones) and takes over once it has caught up (given up if
it falls further behind); a second window measures the loop fed by it, and the feeder stays if
the loop kept its rate, or hands back to threads at its position (the policy's
``try_feeder_beside`` and ``keep_feeder``).

It only moves when that cannot change the result a user sees: the sharding must keep the
single-process order (``ShardPlan.exact_order``), unless ``Options(deterministic=False)``
allows reordering; the pipeline must pickle; and never from inside a worker. Elements the
trial made are delivered in either case: when it moves, while the workers start (on a thread
of their own), and the workers' copies of them are then dropped (they begin at the start of
the run: every element arrives once). User functions with side effects
in the parent (appending to a list) see them in worker processes instead: switch the
choice off with ``Options(autotune=AutotuneOptions(processes=False))``, or force it on
without a trial with ``processes=True``.

Checkpoints are those of the mode chosen (a ``prefetch`` state on threads, a
``multiprocess`` state in processes); restoring follows the mode the state was saved in where
the options allow it, and continues in this process otherwise (a feeder's position is the
pipeline's own; ``n`` workers' shards run here, merged as the workers' would be:
:mod:`feedline.placement.shards_in_process`), exactly in every case.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import os
import threading
import time
from typing import Any

from feedline.core.constants import AUTOTUNE
from feedline.core.dataset import Dataset
from feedline.core.error_records import is_fatal
from feedline.core.errors import InvalidArgumentError, WorkerProcessError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.options import Options
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset
from feedline.placement.policy import (
    LoopRate,
    ProcessDecision,
    TrialCosts,
    keep_feeder,
    maps_in_processes,
    maps_that_wait,
    place_feeder,
    place_pipeline,
    place_shards,
    try_feeder_beside,
)

TRIAL_SECONDS = 0.3
"""Least wall time of the trial on threads before deciding."""
TRIAL_MIN_ELEMENTS = 4
"""Least elements of the trial (a pipeline that ends sooner stays on threads)."""
TRIAL_MAX_ELEMENTS = 64
"""Most elements the trial holds back (its outputs are kept until delivered)."""
TRIAL_MAX_BYTES = 256 << 20
"""Most bytes of elements the trial holds back."""
FEEDER_TRY_AFTER_SECONDS = 10.0
"""Run time on threads before a provisional decision measures the training loop: trying a
feeder costs the loop about a second of its pace (the feeder's start-up and catch-up beside
the threads, or the hand-back), paid only by runs long enough to gain from it."""
WINDOW_SECONDS = 2.0
"""Least wall time of each window in which the training loop's rate is measured (on threads,
then from a feeder process) where a feeder is tried beside it."""
WINDOW_ELEMENTS = 8
"""Least elements of each such window."""
FEEDER_SETTLE_ELEMENTS = 8
"""Elements a tried feeder delivers before its window starts."""
FEEDER_CATCH_UP_SECONDS = 5.0
"""Most time a feeder process tried beside the training loop may take to start and catch up
with the threads that go on feeding the loop meanwhile; one still behind is given up."""
FEEDER_CATCH_UP_CHECK_SECONDS = 1.0
"""Time after its first element in which a feeder being tried must have gained on the threads
(both run meanwhile: one that loses ground costs the loop the longer it runs)."""
_log = logging.getLogger("feedline.autotune")


def _stages_in_processes(dataset: Dataset) -> list[str]:
    """Names of the stages of ``dataset``'s pipeline told to call their function in worker
    processes (``map(executor="process")`` with ``num_parallel_calls``: without, it runs
    inline here)."""
    from feedline.core.graph import graph_nodes

    return [node.name for node in graph_nodes(dataset)
            if getattr(node, "executor", None) == "process"
            and getattr(node, "num_parallel_calls", None) is not None]


def _stages_writing_files(dataset: Dataset) -> list[str]:
    """The stages of ``dataset``'s pipeline that write files (``cache(filename)``), named as
    the sharding plan names them when it refuses them."""
    from feedline.core.graph import graph_nodes

    return [f"cache({getattr(node, 'filename', '')!r})" for node in graph_nodes(dataset)
            if node.traits().writes_files]


def _memory_figures() -> tuple[int, int] | None:
    """This process's resident bytes and the system's available bytes (Linux's ``/proc``),
    or ``None`` where the system does not say."""
    try:
        with open("/proc/self/statm") as statm:
            resident = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return resident, int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _multiprocess() -> Any:
    from feedline.placement import multiprocess

    return multiprocess


def _executor_decisions(ctx: IteratorContext) -> list[Any]:
    """The executor choices AUTOTUNE maps of this pipeline run have made so far."""
    from feedline.placement.map_executor import ExecutorChoice

    return [choice.decision for choice in list(ctx.remembered.values())
            if isinstance(choice, ExecutorChoice) and choice.decision is not None]


def wrap_for_processes(dataset: Dataset, options: Options) -> Dataset:
    """``dataset`` under an :class:`AutoProcessesDataset` if AUTOTUNE may move it to
    processes: it ends with ``prefetch(AUTOTUNE)`` and autotuning is on.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(4).prefetch(fl.AUTOTUNE)
        >>> type(wrap_for_processes(ds, fl.Options())).__name__
        'AutoProcessesDataset'
        >>> type(wrap_for_processes(fl.Dataset.range(4), fl.Options())).__name__
        'RangeDataset'
    """
    from feedline.placement.worker_loop import in_worker_process
    from feedline.transforms.prefetch import PrefetchDataset
    from feedline.transforms.with_options import OptionsDataset

    last = dataset
    while isinstance(last, OptionsDataset):  # with_options() at the end changes no data
        last = last.input_dataset
    # Wrapped even where it will stay on threads (one CPU, processes=False): a state saved
    # where it ran in processes must restore here too, to the exact continuation.
    if (options.autotune.enabled and not in_worker_process()
            and isinstance(last, PrefetchDataset) and last.buffer_size == AUTOTUNE):
        return AutoProcessesDataset(dataset)
    return dataset


def _run_epoch(dataset: Dataset, ctx: IteratorContext) -> int:
    """The epoch a run of ``dataset`` in ``ctx`` begins its reshuffling stages at
    (:mod:`feedline.core.seed_epochs`): where worker processes must begin it too."""
    from feedline.core.graph import graph_nodes
    from feedline.core.seed_epochs import EpochCounter

    if not ctx.continue_epochs:
        return ctx.first_epoch
    counters = (getattr(node, "_epochs", None) for node in graph_nodes(dataset))
    return max([ctx.first_epoch, *(counter.next for counter in counters
                                   if isinstance(counter, EpochCounter))])


class AutoProcessesDataset(UnaryDataset):
    """Runs its input on threads or in worker processes, as measured (see the module doc)."""

    TRAITS = POSITIONAL

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return AutoProcessesIterator(ctx, self)


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _drop_delivered(moved: Any) -> None:
    """Take from worker processes catching up with the threads (``moved``) an element the
    threads delivered already, and drop it: an element's error goes with it; their end, a
    dead worker or an error that ends the stage raise (they cannot take over)."""
    try:
        next(moved)
    except StopIteration:
        raise RuntimeError("they ended before the threads did") from None
    except WorkerProcessError:
        raise
    except Exception as error:  # an element's error, which the threads delivered already
        if is_fatal(error):
            raise  # not an element's: the stage cannot go on
        _log.debug("feedline AUTOTUNE: worker processes catching up dropped an error the "
                   "threads delivered already: %r", error)


def _described(error: BaseException) -> str:
    """``error`` in words (its class where it has no message: an interrupt)."""
    return str(error) or type(error).__name__


class _LoopWindow:
    """The training loop's pace over one window: elements it took after the first ``skip``,
    the wall time from then, and the time it spent waiting in ``next()``."""

    __slots__ = ("_opens", "_skip", "elements", "ended", "started", "waited")

    def __init__(self, skip: int = 0, opens: float = 0.0) -> None:
        self._skip = skip
        self._opens = opens  # no element returned before this time counts
        self.elements = 0
        self.started = self.ended = 0.0
        self.waited = 0.0

    def took(self, called: float, returned: float) -> bool:
        """An element was asked for at ``called`` and returned at ``returned``: whether the
        window is complete (:data:`WINDOW_SECONDS`, :data:`WINDOW_ELEMENTS`)."""
        if self._skip > 0:
            self._skip -= 1
            self.started = returned
            return False
        if returned < self._opens:
            self.started = 0.0
            return False
        if self.started == 0.0:  # nothing to skip: the window opens at the first return
            self.started = returned
            return False
        self.elements += 1
        self.waited += returned - called
        self.ended = returned
        return self.elements >= WINDOW_ELEMENTS and returned - self.started >= WINDOW_SECONDS

    def rate(self) -> LoopRate:
        wall = max(self.ended - self.started, 1e-9)
        return LoopRate(self.elements / wall, self.waited / wall)


class _StartingBeside:
    """Worker processes (a ``MultiprocessIterator``) starting on a thread of their own while
    this process goes on delivering elements: the start (an interpreter and imports per
    worker, the pipeline sent to each) costs the training loop no wait."""

    def __init__(self, moved: Any, close_timeout: float) -> None:
        self.moved = moved
        self._close_timeout = close_timeout
        self._started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._lock = threading.Lock()
        self._ending = False
        threading.Thread(target=self._start, name="feedline-processes-start", daemon=True).start()

    def _start(self) -> None:
        try:
            self.moved._start()
        except BaseException as error:  # noqa: BLE001 - reported by ready()
            self._started.set_exception(error)
        else:
            self._started.set_result(None)
        with self._lock:
            if self._ending:  # ended while it started: what the start made ends too
                self.moved.discard()

    def ready(self) -> bool:
        """Whether the processes' next element is here; raises what made the start fail."""
        if not self._started.done():
            return False
        self._started.result()
        return bool(self.moved.ready())

    def wait_started(self) -> None:
        """Wait for the start to end; raises what made it fail."""
        self._started.result()

    def end(self) -> None:
        """End the processes now (which also ends a start still under way: what that start
        makes afterwards is ended when it returns)."""
        with self._lock:
            self._ending = True
        concurrent.futures.wait([self._started], timeout=self._close_timeout)
        with self._lock:
            self.moved.discard()


class _FeederJoining(_StartingBeside):
    """A feeder process starting beside the threads: ``behind`` counts the elements the
    threads delivered since its position (the start also pickles the pipeline and the
    position)."""

    def __init__(self, moved: Any, close_timeout: float) -> None:
        self.behind = 0
        self.deadline = time.perf_counter() + FEEDER_CATCH_UP_SECONDS
        self.made_one = False
        # When it first made an element, and how far behind it was then.
        self.first_ready: tuple[float, int] | None = None
        super().__init__(moved, close_timeout)


class _Moving(_StartingBeside):
    """The pipeline moving to worker processes that begin at the start of the run, while the
    trial's elements (``skip`` of them) are delivered: the processes make those again, and
    they are dropped before the processes feed the loop."""

    def __init__(self, moved: Any, close_timeout: float, skip: int,
                 decision: ProcessDecision) -> None:
        self.skip = skip
        self.decision = decision
        super().__init__(moved, close_timeout)


class AutoProcessesIterator(DatasetIterator):
    """The trial, the decision, then the chosen iterator (see the module doc)."""

    def __init__(self, ctx: IteratorContext, node: AutoProcessesDataset) -> None:
        super().__init__(ctx, [])
        self._node = node
        self._run_epoch = _run_epoch(node.input_dataset, ctx)
        self._inner = node.input_dataset._make_iterator(ctx)
        self._inputs = [self._inner]
        self.decision: ProcessDecision | None = None
        # Trial outputs not yet delivered, each with the inner state right after it.
        self._held: collections.deque[tuple[Any, State]] = collections.deque()
        self._held_state: State | None = None
        self._ended = False  # restored at the end of a feeder's run
        # The trial's elements, CPU seconds and bytes of elements.
        self._trial_figures: tuple[int, float, int] = (0, 0.0, 0)
        # Where the decision is provisional: the window measuring the training loop now,
        # its rate on threads once measured, and the feeder tried while it starts.
        self._window: _LoopWindow | None = None
        self._on_threads: LoopRate | None = None
        self._joining: _FeederJoining | None = None
        self._moving: _Moving | None = None  # processes starting while the trial's deliver
        self._provisional: ProcessDecision | None = None  # the trial's, while it is tried

    @property
    def replay_exact(self) -> bool:
        return self._inner.replay_exact

    def __next__(self) -> Any:
        if self.decision is None:
            self._decide()
        window, joining = self._window, self._joining
        if window is None and joining is None:
            return self._next_element()
        called = time.perf_counter()
        try:
            element = self._next_element()
        except StopIteration:
            if joining is not None:
                self._give_up_feeder(joining, "the data ended before it caught up")
            raise
        except Exception:
            if joining is not None:  # an error is an item: the feeder makes it too
                joining.behind += 1
                self._catch_up(joining)
            raise
        if joining is not None:
            joining.behind += 1
            self._catch_up(joining)
        elif window is not None and window.took(called, time.perf_counter()):
            self._window_done(window)
        return element

    def _next_element(self) -> Any:
        if self._held:
            outcome, self._held_state = self._held.popleft()
            if isinstance(outcome, _Failed):
                raise outcome.error
            return outcome
        if self._moving is not None:
            self._finish_move(self._moving)
        self._held_state = None
        if self._ended:
            raise StopIteration
        return next(self._inner)

    # ------------------------------------------------------------------ deciding
    def _decide(self) -> None:
        from feedline.core.random_access import describe_stage
        from feedline.distribute.autoshard import plan_sharding

        options = self._ctx.options
        budget = options.autotune_parallelism()
        processes = options.autotune.processes
        # The sharding plan refuses a graph that writes files (ValueError): such a graph
        # stays here (the policy says so), and is never planned.
        writers = _stages_writing_files(self._node.input_dataset)
        # Without a plan (the pipeline stays whatever it shows) the policy reads none of these.
        policy, cheap, exact, source = "output", False, False, None
        if processes is not False and budget >= 2 and not writers:
            plan = plan_sharding(self._node.input_dataset, budget)
            policy, exact, source = plan.policy, plan.exact_order, plan.path[-1]
            cheap = source.traits().cheap_to_reread
        placed = place_pipeline(
            budget, processes, _stages_in_processes(self._node.input_dataset), policy, cheap,
            exact, self._ctx.deterministic(None), lambda: describe_stage(source), writers)
        if placed.move is None:
            self._stay(budget, None, placed.reason)
            return
        busy = None
        if processes is not True:
            busy = self._trial_unless_it_ends(budget)
            if busy is None:
                return
        elements, cpu, size = self._trial_figures
        if placed.move == "shards":
            tuner = self._ctx.tuner
            costs = None if busy is None else TrialCosts(cpu / max(elements, 1),
                                                         size / max(elements, 1))
            waiting = maps_that_wait(tuner.call_times()) if tuner is not None else {}
            decision = place_shards(budget, busy, costs, waiting)
        else:
            decision = place_feeder(budget, busy, placed.reason, cpu / max(elements, 1),
                                    size / max(elements, 1), self._inner.replay_exact)
        if decision.mode == "threads":
            self._record(decision)
            if decision.provisional:
                self._provisional = decision
                # Measured from the first element the trial did not make: those it holds
                # are delivered at once.
                self._window = _LoopWindow(
                    skip=len(self._held), opens=time.perf_counter() + FEEDER_TRY_AFTER_SECONDS)
        else:
            self._move_or_stay(decision)

    def _window_done(self, window: _LoopWindow) -> None:
        """A window measuring the training loop ended: try a feeder, or decide."""
        decision = self._provisional
        assert decision is not None
        self._window = None
        if self._on_threads is None:
            self._on_threads = window.rate()
            final = try_feeder_beside(decision, self._on_threads, _memory_figures())
            if final is not None:
                self._record(final)
            else:
                self._join_feeder()
            return
        final = keep_feeder(decision, self._on_threads, window.rate())
        if final.mode == "threads":
            # The feeder's position is this pipeline's own: threads continue it exactly.
            feeder = self._inner
            assert isinstance(feeder, _multiprocess().MultiprocessIterator)
            self._restore_feeder_on_threads(feeder.state_dict())  # it is discarded there
        self._record(final)

    def _join_feeder(self) -> None:
        """Start a feeder process at the position of the last element delivered; the
        threads go on delivering until it has caught up (:meth:`_catch_up`), so that its
        start-up (an interpreter, imports, the restore) costs the training loop no wait."""
        from feedline.execution.positions import initial_position

        assert not self._held and not self._ended
        position = initial_position(self._inner.state_dict())
        moved = self._in_processes(1)
        moved._set_state({"epoch": self._run_epoch, "num_workers": 1, "next_worker": 0,
                          "ended": [False], "workers": [position]})
        _log.info("feedline AUTOTUNE: starting a feeder process beside the training loop "
                  "(on threads: %s)", self._on_threads)
        self._joining = _FeederJoining(moved, self._ctx.options.threading.close_timeout)

    def _catch_up(self, joining: _FeederJoining) -> None:
        """Drop what the started feeder made of the elements the threads delivered since
        it started (the same ones: its position is theirs); once it has caught up, it
        feeds the loop, and the threads end. A feeder that fails or stays behind
        (:data:`FEEDER_CATCH_UP_SECONDS`) ends, and the threads go on."""
        try:
            while joining.behind > 0 and joining.ready():
                _drop_delivered(joining.moved)
                joining.behind -= 1
                joining.made_one = True
        except Exception as error:  # noqa: BLE001 - the threads go on: say why
            self._give_up_feeder(joining, f"it failed: {_described(error)}")
            return
        if joining.behind == 0:
            self._joining = None
            self._replace(joining.moved)
            self._window = _LoopWindow(skip=FEEDER_SETTLE_ELEMENTS)
            provisional = self._provisional
            assert provisional is not None
            self._record(ProcessDecision(
                "feeder", 1, provisional.cores_busy, provisional.cpu_budget,
                f"{provisional.reason}; a feeder process feeds the training loop while its "
                f"rate is measured (on threads: {self._on_threads})", provisional=True))
            return
        now = time.perf_counter()
        if joining.first_ready is None:
            if now > joining.deadline:
                self._give_up_feeder(joining, f"it made no element in "
                                     f"{FEEDER_CATCH_UP_SECONDS:g} s")
            elif joining.made_one:
                joining.first_ready = (now, joining.behind)
            return
        since, behind_then = joining.first_ready
        if now - since >= FEEDER_CATCH_UP_CHECK_SECONDS and joining.behind >= behind_then:
            self._give_up_feeder(joining, f"it fell further behind the threads ({behind_then} "
                                 f"-> {joining.behind} elements in {now - since:.1f} s)")
        elif now > joining.deadline:
            self._give_up_feeder(joining, f"it was still {joining.behind} elements behind "
                                 f"the threads after {FEEDER_CATCH_UP_SECONDS:g} s")

    def _give_up_feeder(self, joining: _FeederJoining, why: str) -> None:
        self._joining = None
        joining.end()
        decision = self._provisional
        assert decision is not None
        self._record(ProcessDecision(
            "threads", 0, decision.cores_busy, decision.cpu_budget,
            f"{decision.reason}; a feeder process tried beside the training loop "
            f"(on threads: {self._on_threads}) was given up: {why}"))

    def _release(self) -> None:
        joining, self._joining = self._joining, None
        if joining is not None:
            joining.end()
        moving, self._moving = self._moving, None
        if moving is not None:
            moving.end()

    def _trial_unless_it_ends(self, budget: int) -> float | None:
        """The cores the trial kept busy, or ``None`` (recorded: staying) if the data ended
        during it or a map moved its calls to worker processes meanwhile."""
        busy, ended = self._trial()
        if ended:
            self._stay(budget, busy, "the data ended during the trial")
            return None
        moved = maps_in_processes(_executor_decisions(self._ctx))
        if moved:
            # This process's CPU no longer counts the map's work: it runs in the map's own
            # worker processes, which a whole-pipeline move would start again per worker.
            self._stay(budget, busy, f"{', '.join(moved)}: calls moved to worker processes "
                       "by AUTOTUNE during the trial")
            return None
        return busy

    def _move_or_stay(self, decision: ProcessDecision) -> None:
        """Move to ``decision.workers`` processes and record it; stay if the pipeline does
        not pickle.

        The processes continue from the start of the run (the trial's work is redone there,
        so that every element arrives once and in the single-process order). Where the trial
        holds elements, they are delivered while the processes start on a thread of their
        own (:class:`_Moving`); the processes' copies of them are dropped once they are all
        taken (:meth:`_finish_move`). The threads stay paused at the trial's end meanwhile:
        processes that fail to start or die leave the run to them, exactly where it was.
        That needs the processes' first elements to be the trial's: where either side may
        reorder (``deterministic=False``), the trial's elements are discarded instead and
        the processes start here.
        """
        moved = self._in_processes(decision.workers)
        try:
            moved.prepare()  # pickles the pipeline
        except (TypeError, InvalidArgumentError) as error:
            # It does not pickle, or its workers could not agree on a random permutation.
            self._stay(decision.cpu_budget, decision.cores_busy, str(error))
            return
        if self._held and moved.replay_exact and self._inner.replay_exact:
            self._record(decision)
            self._moving = _Moving(moved, self._ctx.options.threading.close_timeout,
                                   len(self._held), decision)
            return
        try:
            moved._start()
        except BaseException as error:
            moved.discard()
            if not self._held:
                raise  # forced processes: as the start failed (the next next() tries again)
            self._moving_failed(decision, error)
            return
        self._held.clear()  # the processes make them again, in their order
        self._record(decision)
        self._replace(moved)

    def _finish_move(self, moving: _Moving) -> None:
        """The trial's elements are all delivered: drop the processes' copies of them and
        let the processes feed the loop; if they failed, go on on threads."""
        self._moving = None
        try:
            moving.wait_started()
            for _ in range(moving.skip):
                _drop_delivered(moving.moved)
        except BaseException as error:  # noqa: BLE001 - an interrupt is raised again there
            moving.end()
            self._moving_failed(moving.decision, error)
            return
        self._replace(moving.moved)

    def _moving_failed(self, decision: ProcessDecision, error: BaseException) -> None:
        """Record that the move ``decision`` chose failed with ``error`` (the threads go on,
        from where the trial left them); an interrupt is raised again."""
        self._record(ProcessDecision(
            "threads", 0, decision.cores_busy, decision.cpu_budget,
            f"{decision.reason}; the worker processes failed, the threads go on: "
            f"{_described(error)}"))
        if not isinstance(error, Exception):
            raise error

    def _trial(self) -> tuple[float, bool]:
        """Pull on threads for the trial; hold what it makes. Returns (cores busy, ended)."""
        from feedline.core.structure import element_bytes

        inner, held = self._inner, self._held
        wall, cpu = time.perf_counter(), time.process_time()
        ended, held_bytes = False, 0
        # An element's costs are counted from the first element on: the first pays the
        # pipeline's start (its threads, its imports), which says nothing of the rest
        # (a vectorized map's batch: 112 µs of CPU counted from the start, 20 µs after).
        after_first: tuple[float, int] | None = None
        while len(held) < TRIAL_MAX_ELEMENTS and held_bytes < TRIAL_MAX_BYTES and (
                len(held) < TRIAL_MIN_ELEMENTS or time.perf_counter() - wall < TRIAL_SECONDS):
            try:
                outcome: Any = next(inner)
            except StopIteration:
                ended = True
                break
            except Exception as error:  # noqa: BLE001 - delivered in its place later
                outcome = _Failed(error)
            else:
                held_bytes += element_bytes(outcome)
            held.append((outcome, inner.state_dict()))
            if after_first is None:
                after_first = (time.process_time(), held_bytes)
        elapsed = max(time.perf_counter() - wall, 1e-9)
        now = time.process_time()
        if after_first is not None and len(held) > 1:
            self._trial_figures = (len(held) - 1, now - after_first[0],
                                   held_bytes - after_first[1])
        else:
            self._trial_figures = (len(held), now - cpu, held_bytes)
        return (now - cpu) / elapsed, ended

    def _stay(self, budget: int, busy: float | None, reason: str) -> None:
        self._record(ProcessDecision("threads", 0, busy, budget, reason))

    def _record(self, decision: ProcessDecision) -> None:
        self.decision = decision
        _log.info("feedline AUTOTUNE: %s%s (%s)", decision.mode,
                  f" x{decision.workers}" if decision.workers else "", decision.reason)

    def _in_processes(self, workers: int) -> Any:
        """A ``MultiprocessIterator`` of this pipeline in ``workers`` processes, not started."""
        multiprocess = _multiprocess()
        node = multiprocess.MultiprocessDataset(self._node.input_dataset, workers)
        # The workers run the epoch this run began (a second iter(ds) reshuffles there too).
        return multiprocess.MultiprocessIterator(self._ctx, node, self._run_epoch)

    def _replace(self, inner: DatasetIterator) -> None:
        old, self._inner, self._inputs = self._inner, inner, [inner]
        if isinstance(old, _multiprocess().MultiprocessIterator):
            old.discard()  # no later run uses its processes (a new stage is made each time)
        else:
            old.close()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> State:
        """The state of the chosen iterator (while trial outputs are being delivered: the
        threads iterator's state right after the last one delivered)."""
        if self._held_state is not None:
            return self._held_state
        return self._inner.state_dict()

    def load_state_dict(self, state: State) -> None:
        """Continue from ``state`` exactly: in the worker processes it was saved in where
        this run may start them (even where it would have stayed on threads), else in this
        process (``processes=False``, or fewer CPUs in the budget than workers saved)."""
        from feedline.placement.multiprocess import MultiprocessDataset, MultiprocessIterator
        from feedline.placement.shards_in_process import ShardsInProcessIterator

        self._held.clear()
        self._held_state = None
        self._ended = False
        self._window, self._on_threads = None, None  # the state's mode is kept, not compared
        self._release()
        budget = self._ctx.options.autotune_parallelism()
        if isinstance(state, dict) and state.get("type") == MultiprocessIterator.OPERATION \
                and int(state["num_workers"]) == 1 and (
                    budget < 2 or self._ctx.options.autotune.processes is False):
            self._restore_feeder_on_threads(state)
            self.decision = ProcessDecision("threads", 0, None, budget,
                                            "restored on threads from a state saved in a "
                                            "feeder process")
            return
        if isinstance(state, dict) and state.get("type") == MultiprocessIterator.OPERATION \
                and not self._may_start(state):
            self._replace(ShardsInProcessIterator(self._ctx, self._node.input_dataset, state))
            self.decision = ProcessDecision(
                "threads", 0, None, budget, f"restored in this process from a state saved in "
                f"{len(state['ended'])} worker processes (this run may not start them)")
            return
        if isinstance(state, dict) and state.get("type") == MultiprocessIterator.OPERATION:
            moved = MultiprocessDataset(self._node.input_dataset, AUTOTUNE)._make_iterator(
                self._ctx)
            moved.load_state_dict(state)
            self._replace(moved)
            self.decision = ProcessDecision("processes", len(state["ended"]), None, budget,
                                            "restored from a state saved in processes")
            return
        if isinstance(self._inner, MultiprocessIterator | ShardsInProcessIterator):
            # A state saved on threads goes on on threads, whatever the last restore chose.
            self._replace(self._node.input_dataset._make_iterator(self._ctx))
        self._inner.load_state_dict(state)
        self.decision = ProcessDecision("threads", 0, None, budget,
                                        "restored from a state saved on threads")

    def _may_start(self, state: State) -> bool:
        """Whether this run may start the worker processes ``state`` was saved in (a state
        is data: it never starts more than the options allow, as ``multiprocess`` rules)."""
        from feedline.placement.multiprocess import autotune_workers_allowed

        options = self._ctx.options
        if options.autotune.processes is False:
            return False
        workers = state.get("workers")
        if not workers or any(p is None for p in workers):
            # No positions to run here: the multiprocess stage starts its workers afresh, or
            # says clearly why it may not.
            return True
        return len(state.get("ended", ())) <= autotune_workers_allowed(options)

    def _restore_feeder_on_threads(self, state: State) -> None:
        """Continue on threads from ``state``, saved where the whole pipeline ran in one
        feeder process: its position is one of this pipeline's own (a snapshot of its
        state and the elements taken since), so the threads replay it exactly."""
        from feedline.execution.positions import PositionReader

        inner = self._node.input_dataset._make_iterator(self._ctx)
        self._replace(inner)
        # Until the first replayed element is delivered, the state is the one restored.
        self._held_state = state
        position = state["workers"][0] if state["workers"] else None
        if state["ended"][0]:
            self._ended = True
            return
        if position is None:  # saved before the feeder had started: from the start
            self._held_state = None
            return
        inner.load_state_dict(position["input"])  # declared types: PipelineIterator's
        reader = PositionReader(inner.__next__, inner.state_dict, inner.replay_exact)
        reader.restore(position)
        while True:  # up to the first element not taken, and past every restored error
            try:
                _, is_error, value, _ = reader.pull()
            except StopIteration:
                self._ended = True
                return
            self._held.append((_Failed(value) if is_error else value, inner.state_dict()))
            if not reader.replaying:
                return

    def _get_state(self) -> State:  # state_dict is overridden: never called
        return self.state_dict()

    def _set_state(self, state: State) -> None:  # load_state_dict is overridden
        self.load_state_dict(state)
