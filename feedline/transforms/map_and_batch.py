"""``map`` then ``batch`` run as one stage when the function has a batch form.

tf.data's ``map_and_batch_fusion`` rewrite; here it is for functions that can do a whole
batch's work in one call (a record decoder parsing 128 records with one C call, for
instance): the stage collects the raw input elements of a batch and calls the function's
*batch form* on them, once, in place of one call per element and a stack. Built only by
:func:`feedline.optimize.map_and_batch_fusion.fuse_map_and_batch`.

**The batch form.** A map function offers one through an attribute
``feedline_batch_form``: a callable given the list of a batch's input elements (as the map
receives them, tuples not unpacked) that returns exactly what ``batch`` would stack from
the function's per-element results, or :data:`NOT_BATCHED` to ask for the element-by-element
path. An exception from it also means "element by element": that path then gives the
values or the precise error.

**Semantics are those of map then batch**, element for element: a batch whose form
declines, a map error (the batch being collected is dropped, the next one starts after the
failed element, so later batches shift) and an input error all run through the
element-by-element path from that point, with the raw inputs already read kept in order;
once those are used up the stage goes back to whole batches. Batches come out in order (a
valid order for ``deterministic=False`` too). With parallelism, whole batches are computed
on a :class:`~feedline.execution.window.PositionedWindow` (the batch form of a decoder
releases the GIL in its codecs). The state is a position in raw input elements
(:mod:`feedline.execution.positions`): batches in flight are read again after a restore.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from feedline.core.dataset import Dataset
from feedline.core.element_dtypes import DtypeGuard
from feedline.core.errors import StructureError
from feedline.core.functions import annotate_error, call_with_element
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.structure import Element, normalize_output
from feedline.core.traits import BATCHING
from feedline.execution.executor import make_executor
from feedline.execution.read_ahead import ReadAhead
from feedline.execution.window import PositionedWindow
from feedline.transforms.batch import BatchDataset, stack_elements
from feedline.transforms.map import MapDataset

NOT_BATCHED: Any = object()
"""What a batch form returns to have a batch computed element by element."""


def batch_form_of(fn: Any) -> Callable[[list[Any]], Any] | None:
    """The batch form ``fn`` offers (its ``feedline_batch_form``), or None.

    Example:
        >>> class Double:
        ...     def __call__(self, x): return x * 2
        ...     def feedline_batch_form(self, xs): return np.asarray(xs) * 2
        >>> import numpy as np
        >>> batch_form_of(Double()) is not None, batch_form_of(abs)
        (True, None)
    """
    form = getattr(fn, "feedline_batch_form", None)
    return form if callable(form) else None


class MapAndBatchDataset(Dataset):
    """``source.map(map_func).batch(batch_size, drop_remainder)`` as one stage.

    ``replaced`` is the batch node it stands for (its element spec and cardinality are the
    same), ``mapped`` the map node under it (``source`` is that map's input, rewritten);
    ``parallelism`` is the number of batches computed at once (``None``: inline).
    """

    TRAITS = BATCHING

    def __init__(self, source: Dataset, replaced: BatchDataset, mapped: MapDataset,
                 batch_form: Callable[[list[Any]], Any], parallelism: int | None) -> None:
        super().__init__([source])
        self.replaced = replaced
        self.map_func = mapped.map_func
        self.map_name = mapped.name
        self.batch_form = batch_form
        self.batch_size = replaced.batch_size
        self.drop_remainder = replaced.drop_remainder
        self.batch_name = replaced.name
        self.parallelism = parallelism
        self.name = f"map_and_batch({mapped.name})"

    def _element_spec(self) -> Element | None:
        # The replaced graph's, inferred there when it runs user code (a batch of a map
        # has an unknown batch dimension; a peek at the fused stage's first batch would not).
        return self.replaced.element_spec

    def cardinality(self) -> int:
        return self.replaced.cardinality()

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        from feedline.core.validation import resolve_parallelism

        upstream = self._inputs[0]._make_iterator(ctx)
        workers = None if self.parallelism is None else resolve_parallelism(
            self.parallelism, ctx)
        return MapAndBatchIterator(ctx, upstream, self, workers)


def _whole_batch(batch_form: Callable[[list[Any]], Any], values: list[Any]) -> Any:
    """The batch form's result, or NOT_BATCHED when it declines or fails (the element path
    then gives the values or the exact error)."""
    try:
        return batch_form(values)
    except Exception:  # noqa: BLE001 - the element-by-element path names the error
        return NOT_BATCHED


class MapAndBatchIterator(DatasetIterator):
    """Whole batches through the batch form; the element-by-element path where needed.

    Raw input items are numbered by its :class:`PositionedWindow`; an item is handed out when
    the batch (or error) it belongs to goes to the consumer. ``_pending`` holds raw items
    already read that the element-by-element path must use next, in order; the window only
    ever holds whole batches read after everything handed out and before ``_pending``.
    """

    OPERATION = "map_and_batch"
    STATE_VERSION = 1

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 dataset: MapAndBatchDataset, workers: int | None) -> None:
        super().__init__(ctx, [upstream])
        self._fn = dataset.map_func
        self._batch_form = dataset.batch_form
        self._size = dataset.batch_size
        self._drop_remainder = dataset.drop_remainder
        self._map_name, self._batch_name = dataset.map_name, dataset.batch_name
        threading_options = ctx.options.threading
        # Inline (no workers), the window only keeps the positions: no task enters it.
        self._parallel = workers is not None
        self._window = PositionedWindow(
            dataset.name, upstream, lambda: make_executor(
                workers or 1, dataset.name, close_timeout=threading_options.close_timeout),
            limit=workers or 1, deterministic=True,
            element_timeout=threading_options.element_timeout,
            describe=lambda tag: f"the batch starting at input element {tag[0]}")
        self._pending: collections.deque[tuple[int, bool, Any]] = collections.deque()
        self._mapped = 0  # input elements the map received: the index its errors report
        self._batches = 0  # batches handed out: the index batch errors report
        # The map's elements keep their first one's dtypes (as an unfused map's do), and so
        # do the batches, whichever path made them (a batch form must give what batch
        # stacks).
        self._element_dtypes = DtypeGuard(self._map_name)
        self._batch_dtypes = DtypeGuard(dataset.name)

    def read_aheads(self) -> list[ReadAhead]:
        return [self._window] if self._parallel else []

    # ------------------------------------------------------------------ reading
    def _read_group(self) -> list[tuple[int, bool, Any]] | None:
        """The next whole batch of raw items, or None after moving what was read (a short
        group, or one with an input error) to ``_pending``."""
        group: list[tuple[int, bool, Any]] = []
        try:
            while len(group) < self._size:
                entry = self._window.pull()
                group.append(entry)
                if entry[1]:
                    break
        except StopIteration:
            pass
        if len(group) == self._size and not group[-1][1]:
            return group
        self._pending.extend(group)
        return None

    def _fill(self) -> None:
        window = self._window
        while not window.exhausted and not self._pending and window.has_room():
            group = self._read_group()
            if group is None:
                return
            window.submit((group[0][0], group), _whole_batch, self._batch_form,
                          [value for _, _, value in group])

    def _handed_out(self, group: list[tuple[int, bool, Any]]) -> None:
        for item, _, _ in group:
            self._window.handed_out(item)

    # ------------------------------------------------------------------ batches
    def __next__(self) -> Any:
        window = self._window
        window.mark_start()
        if self._parallel:
            self._fill()
            if len(window):
                (_, group), future = window.take()
                result = future.result()
                if result is not NOT_BATCHED:
                    return self._whole(group, result)
                # From this batch on, element by element: later groups go back in order.
                later = [entry for _, entry_group in self._drain() for entry in entry_group]
                self._pending.extendleft(reversed(group + later))
        elif not self._pending and not window.exhausted:
            group = self._read_group()
            if group is not None:
                result = _whole_batch(self._batch_form, [value for _, _, value in group])
                if result is not NOT_BATCHED:
                    return self._whole(group, result)
                self._pending.extendleft(reversed(group))
        return self._next_by_element()

    def _drain(self) -> list[tuple[int, list[tuple[int, bool, Any]]]]:
        tags = self._window.tags()
        self._window.discard(wait=True)
        return tags

    def _whole(self, group: list[tuple[int, bool, Any]], result: Any) -> Any:
        self._handed_out(group)
        self._mapped += len(group)
        self._batches += 1
        return self._batch_dtypes.check(result, self._batches - 1)

    def _next_raw(self) -> tuple[int, bool, Any]:
        if self._pending:
            return self._pending.popleft()
        if self._window.exhausted:
            raise StopIteration
        return self._window.pull()

    def _next_by_element(self) -> Any:
        """One batch as ``batch`` over ``map`` makes it, from ``_pending`` then the input."""
        elements: list[Any] = []
        fn = self._fn
        while len(elements) < self._size:
            try:
                item, is_error, value = self._next_raw()
            except StopIteration:
                break
            self._window.handed_out(item)
            if is_error:
                raise value  # the input's error, in its place: the batch is dropped
            self._mapped += 1
            try:
                elements.append(self._element_dtypes.check(
                    normalize_output(call_with_element(fn, value)), self._mapped - 1))
            except Exception as error:  # noqa: BLE001 - re-raised with the stage named
                raise annotate_error(error, self._map_name, self._mapped - 1)
        if not elements or (self._drop_remainder and len(elements) < self._size):
            raise StopIteration
        index = self._batches
        self._batches += 1
        try:
            batch = stack_elements(elements)
        except StructureError as error:
            raise annotate_error(error, self._batch_name, index)
        return self._batch_dtypes.check(batch, index)

    # ------------------------------------------------------------------ checkpoints
    def _get_state(self) -> State:
        return {**self._window.position(), "mapped": self._mapped, "batches": self._batches}

    def _set_state(self, state: State) -> None:
        self._pending.clear()
        self._window.restore(state)
        self._mapped = int(state["mapped"])
        self._batches = int(state["batches"])

    def _release(self) -> None:
        self._window.shutdown()
