"""``map``: apply a function to every element, inline or on parallel workers."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from feedline.core.dataset import Dataset
from feedline.core.element_dtypes import DtypeGuard
from feedline.core.functions import annotate_error, bind_free_variables, function_name
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.random_access import DerivedReader, RandomAccessReader
from feedline.core.registry import operation
from feedline.core.structure import normalize_output
from feedline.core.traits import ONE_TO_ONE
from feedline.core.validation import validate_parallelism
from feedline.execution.calls import Unsplit, caller_of
from feedline.execution.map_runner import MAX_FILL_SECONDS, MapCallRunner, map_runner
from feedline.execution.positions import PositionReader, initial_position, replay_from
from feedline.execution.read_ahead import ReadAhead
from feedline.execution.window import PositionedWindow
from feedline.transforms.map_inline import InlineCalls

if TYPE_CHECKING:
    from feedline.execution.map_knobs import MapKnobs, MeasuredDecision

# Its name before it moved to ``execution`` (a rewrite imports it from here).
_Unsplit = Unsplit


@operation("map")
class MapDataset(Dataset):
    """The node of ``Dataset.map``."""

    TRAITS = ONE_TO_ONE

    _RANDOM_ACCESS_FROM_INPUT = True

    def __init__(self, input_dataset: Dataset, map_func: Callable[..., Any],
                 num_parallel_calls: int | None = None, deterministic: bool | None = None,
                 name: str | None = None, executor: str | None = None,
                 unpack_tuples: bool = True) -> None:
        super().__init__([input_dataset])
        if not callable(map_func):
            raise TypeError(f"map() needs a callable, got {type(map_func).__name__}")
        num_parallel_calls = validate_parallelism(num_parallel_calls, "map(num_parallel_calls)")
        if executor not in (None, "thread", "process"):
            raise ValueError(f"map(executor) must be 'thread' or 'process', got {executor!r}")
        self.map_func = bind_free_variables(map_func)
        self.num_parallel_calls = num_parallel_calls
        self.deterministic = deterministic
        # None: threads, or, with AUTOTUNE, chosen from measurement (placement.map_executor).
        self.executor = executor
        # Rewrites pass whole elements to functions they compose themselves.
        self.unpack_tuples = unpack_tuples
        self.name = name or f"map({function_name(map_func)})"

    def cardinality(self) -> int:
        return self._inputs[0].cardinality()

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        upstream = self._inputs[0]._make_iterator(ctx)
        fn = self.map_func
        if not self.unpack_tuples:
            fn = _Unsplit(self.map_func)
        if self.num_parallel_calls is None:
            return MapIterator(ctx, upstream, fn, self.name)
        runner = map_runner(ctx, fn, self.name, self.num_parallel_calls, self.executor,
                            stage_key=self)
        return ParallelMapIterator(ctx, upstream, fn, self.name, runner,
                                   ctx.deterministic(self.deterministic))

    def _offers_random_access(self) -> bool:
        return self._inputs[0]._offers_random_access()

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        fn = self.map_func if self.unpack_tuples else _Unsplit(self.map_func)
        return MapReader(self._inputs[0]._random_reader(ctx), fn, self.name)


class MapReader(DerivedReader):
    """Element ``i`` is the function of input element ``i`` (called as the iterators call it).

    Example:
        >>> import feedline as fl
        >>> from feedline.core.random_access import open_reader
        >>> with MapReader(open_reader(fl.Dataset.range(5)), lambda x: x * 10, "map") as r:
        ...     [int(x) for x in r.get_many([4, 1])]
        [40, 10]
    """

    def __init__(self, input_reader: RandomAccessReader, fn: Callable[..., Any],
                 name: str) -> None:
        super().__init__(input_reader)
        self._fn = fn
        self._call = caller_of(fn)
        self._name = name
        self._dtypes = DtypeGuard(name)

    def get(self, index: int) -> Any:
        return self._apply(self.input.get(index), index)

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        apply = self._apply
        return [apply(element, int(index))
                for element, index in zip(self.input.get_many(indices), indices)]

    def _apply(self, element: Any, index: int) -> Any:
        try:
            return self._dtypes.check(normalize_output(self._call(self._fn, element)), index)
        except Exception as error:  # noqa: BLE001 - re-raised with the stage named
            raise annotate_error(error, self._name, index)


class MapIterator(DatasetIterator):
    """Calls the function inline: no thread hand-off, the cheapest way for light functions.

    Its state has the layout every map iterator writes (:mod:`feedline.execution.positions`),
    so a checkpoint of a parallel or fused map restores here and the other way round.
    """

    OPERATION = "map"
    STATE_VERSION = 2

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 map_func: Callable[..., Any], name: str) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        self._fn = map_func
        self._call = caller_of(map_func)
        self._name = name
        self._index = 0  # input elements received: the index errors report
        self._dtypes = DtypeGuard(name)  # its elements keep the first one's dtypes
        # Set while re-reading after a restore from a read-ahead map's position.
        self._replay: PositionReader | None = None

    def __next__(self) -> Any:
        if self._replay is not None:
            element = self._next_replayed()
        else:
            index = self._index
            # The input's error counts as its element, as a parallel map numbers it.
            self._index = index + 1
            try:
                element = next(self._upstream)
            except StopIteration:
                self._index = index
                raise
        try:
            # Inside the try: a result that is no element is this stage's error.
            return self._dtypes.check(normalize_output(self._call(self._fn, element)),
                                      self._index - 1)
        except Exception as error:  # noqa: BLE001 - re-raised with the stage named
            raise annotate_error(error, self._name, self._index - 1)

    def _next_replayed(self) -> Any:
        replay = self._replay
        assert replay is not None
        item, is_error, value, _ = replay.pull()
        replay.handed_out(item)
        self._index = item + 1
        if not replay.replaying:
            self._replay = None
        if is_error:
            raise value  # the input's error (or its record), in its place
        return value

    def _get_state(self) -> State:
        if self._replay is not None:
            return self._replay.inline_position()
        return initial_position(self._upstream.state_dict(), self._index)

    def _set_state(self, state: State) -> None:
        self._upstream.load_state_dict(state["input"])
        self._index = int(state["at"])
        self._replay = replay_from(self._upstream, state)


class ParallelMapIterator(InlineCalls, DatasetIterator):
    """Runs the function over chunks of elements on workers, or inline; pulls its input on
    the consumer's thread (the upstream stays single-threaded: no locks there).

    Where calls run, and how many elements a task takes, is its :class:`~feedline.placement.
    runner.MapRunner`'s: threads, worker processes (chunks of elements one message each way,
    results of one dtype and shape one array: :class:`~feedline.placement.chunks.
    StackedResults`) or the consumer's thread, switched while it runs. Its tasks run on a
    :class:`~feedline.execution.window.PositionedWindow` of ``2 * parallelism`` tasks. None
    of it changes a result, an error or a position: each element's outcome keeps its place.

    An error of the upstream takes its place in the window: the elements pulled before it
    come out first, in order, then the error, then the elements after it (as in tf.data;
    nothing is dropped).

    The state is a position (:mod:`feedline.execution.positions`), the layout every map
    iterator writes: the input's state at or before the first element not handed out, plus
    which later ones went out already (``deterministic=False``). Elements in flight are
    computed again after a restore; an input error pulled but not raised yet is stored as a
    record.
    """

    OPERATION = "map"
    STATE_VERSION = 2

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 map_func: Callable[..., Any], name: str, runner: MapCallRunner,
                 deterministic: bool) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        self._name = self.name = name
        self._fn, self._call = map_func, caller_of(map_func)
        self._deterministic = deterministic
        self._runner = runner
        threading_options = ctx.options.threading
        self._window = PositionedWindow(
            name, upstream, runner.make_executor, limit=2 * runner.knobs.cores,
            deterministic=deterministic, element_timeout=threading_options.element_timeout,
            describe=_describe_chunk)
        runner.knobs.window = self._window  # its limit follows the tuner's setting
        # The task being handed out: its input items and outcomes, the next to hand out,
        # and how many went out before the window was told (:meth:`_report`).
        self._items: list[int] = []
        self._outcomes: list[tuple[bool, Any]] = []
        self._next_out = self._reported = 0
        # The input's position reader while on the plain path (see :meth:`__next__`).
        self._plain: PositionReader | None = None
        runner.knobs.on_setting = weakref.WeakMethod(self._setting_changed)
        # Checked where elements are handed out, whichever worker computed them.
        self._dtypes = DtypeGuard(name)

    @property
    def replay_exact(self) -> bool:
        return self._deterministic and super().replay_exact

    def hold_order(self, hold: bool) -> None:
        self._window.set_ordered(self._deterministic or hold)
        super().hold_order(hold)

    def read_aheads(self) -> list[ReadAhead]:
        return [self._window]

    @property
    def knobs(self) -> MapKnobs:
        """What the tuner sets and reads of this stage (:mod:`feedline.execution.map_knobs`)."""
        return self._runner.knobs

    @property
    def runs_inline(self) -> bool:
        """Whether its function is called on the consumer's thread (see the runner)."""
        return self._runner.inline

    @property
    def executor_kind(self) -> str:
        """Where new tasks run: ``"thread"`` or ``"process"``."""
        return self._runner.kind

    @property
    def executor_decision(self) -> MeasuredDecision | None:
        """The automatic choice and its measurement (``None`` while measuring, or when the
        stage's executor was not chosen automatically)."""
        return self._runner.decision

    @property
    def busy_seconds(self) -> float:
        """Seconds its tasks took, summed (statistics: the workers' occupied time, which
        counts waiting for files, sleeps and the GIL, unlike their CPU time)."""
        return self._runner.busy_seconds

    @property
    def _chunk_size(self) -> int:
        return self._runner.sizer.chunk_size

    def _adapt_chunk_size(self, elements: int, seconds: float) -> None:
        self._runner.sizer.measured(elements, seconds, self._runner.kind)

    # ------------------------------------------------------------------ elements
    def __next__(self) -> Any:
        positions = self._plain
        if positions is None:
            at = self._next_out
            if at < len(self._outcomes):
                # A task's outcomes in hand: counted, and told to the window, per task.
                self._next_out = at + 1
                return self._hand_out(at)
            return self._next_general()
        # Inline for good at one worker, nothing re-read or pending (:meth:`_go_plain`):
        # what a plain inline map costs, its count kept in the input's position only.
        item = positions.pulled
        positions.pulled = item + 1  # the input's error counts as its element
        try:
            element = next(self._upstream)
        except StopIteration:
            positions.pulled = item
            raise
        try:
            # Inside the try: a result that is no element is this stage's error.
            return self._dtypes.check(normalize_output(self._call(self._fn, element)), item)
        except Exception as error:  # noqa: BLE001 - re-raised with the stage named
            raise annotate_error(error, self._name, item)

    def _next_general(self) -> Any:
        """The next element with no task's outcomes in hand: inline, or from the window."""
        runner, window = self._runner, self._window
        if self._reported < self._next_out:
            self._report()
        if runner.knobs.counting_from is not None:
            self._leave_plain()  # the tuner set another setting meanwhile
        runner.counters.calls += 1
        if window.direct and runner.inline and runner.gate.limit == 1:
            return self._next_direct()  # the common case of an inline stage, first
        if runner.inline_now(window, False):
            return self._next_inline()
        self._fill()
        self._take_task()
        self._next_out = 1
        return self._hand_out(0)

    def _hand_out(self, at: int) -> Any:
        """Outcome ``at`` of the task in hand: its result, or its error raised."""
        outcomes = self._outcomes
        ok, value = outcomes[at]
        outcomes[at] = _HANDED_OUT  # the consumer's from now: not kept alive here
        if ok:
            try:
                return self._dtypes.check(value, self._items[at])
            except Exception as error:  # noqa: BLE001 - re-raised with the stage named
                raise annotate_error(error, self._name, self._items[at])
        raise annotate_error(value, self._name, self._items[at])

    def _report(self) -> None:
        """Tell the window which items of the task in hand went out (before its position
        is read, or the next task is taken)."""
        reported, handed = self._reported, self._next_out
        self._reported = handed
        self._window.handed_out_many(self._items[reported:handed])

    def _fill(self) -> None:
        window, runner = self._window, self._runner
        window.mark_start()
        if runner.warming and runner.kind == "process":
            return  # its workers are starting: the consumer maps the elements meanwhile
        while not window.exhausted and not runner.inline and window.has_room():
            if not runner.may_submit(len(window)):
                break  # measuring: one task at a time alone, then whole tasks only
            items, values, failure = self._pull_chunk()
            if items:
                runner.submit(window, items, values)
            if failure is not None:
                # After the chunk pulled before it; the upstream goes on past a failure.
                window.add_failed(*failure)

    def _pull_chunk(self) -> tuple[list[int], list[Any], tuple[int, BaseException] | None]:
        """The next task's input items and elements, and an input error that ended it. On
        processes a chunk takes only what the input gives within ``MAX_FILL_SECONDS``."""
        window, runner = self._window, self._runner
        bounded = runner.kind == "process"
        started = time.perf_counter()
        items, values, failure = window.pull_chunk(runner.sizer.next_size(bounded),
                                                   MAX_FILL_SECONDS if bounded else None)
        pulled = time.perf_counter() - started
        runner.counters.input += pulled
        if bounded and items and failure is None and not window.exhausted:
            runner.sizer.pulled(len(items), pulled)
        return items, values, failure

    def _take_task(self) -> None:
        """Wait for the next task of the window; it is the task in hand."""
        window, runner = self._window, self._runner
        if not len(window):
            raise StopIteration
        if not window.head_ready():
            runner.counters.waits += 1
        tag, future = window.take()
        if isinstance(tag, int):  # the upstream's error, already annotated by its stage
            window.handed_out(tag)
            error = future.exception()
            assert error is not None
            raise error
        # The chunk runner never raises; a dead worker does.
        outcomes = runner.finished(tag, future.result())
        # Counted when taken: elements handed out and calls, a task's at once.
        counters = runner.counters
        counters.elements += len(tag)
        counters.calls += len(tag) - 1
        self._items, self._outcomes = tag, outcomes
        self._next_out = self._reported = 0

    def _drop_task(self) -> None:
        self._items, self._outcomes = [], []
        self._next_out = self._reported = 0

    # ------------------------------------------------------------------ checkpoints
    def _get_state(self) -> State:
        runner = self._runner
        # Inline with everything pulled handed out: the position is exact.
        if self._reported < self._next_out:
            self._report()
        holding = self._next_out < len(self._outcomes)
        exact = (runner.inline or runner.warming) and not holding and self._window.idle()
        return self._window.position(exact)

    def _set_state(self, state: State) -> None:
        if self._plain is not None:
            self._leave_plain()
        self._runner.restored()  # its measured tasks in flight will never be recorded
        self._drop_task()
        self._window.restore(state)

    def _release(self) -> None:
        if self._plain is not None:
            self._leave_plain()
        self._drop_task()
        self._runner.release(self._window)


_HANDED_OUT = (False, None)
"""What stays in a task's outcomes in place of one handed out."""


def _describe_chunk(tag: Any) -> str:
    first = tag if isinstance(tag, int) else tag[0]
    return f"input element {first}"


__all__ = ["MapDataset", "MapIterator", "MapReader", "ParallelMapIterator"]
