"""``group_by_window``: group elements by a key and reduce each full window of a group.

The order is tf.data's kernel's (``GroupByWindowDatasetOp``), element for element: input
elements are read and appended to their key's group until a group holds its window size;
that window goes to ``reduce_func(key, window)`` and every element of the dataset it returns
is produced before the input is read further. When the input ends, the groups left over are
reduced in increasing order of their key (the kernel keeps them in a ``std::map``), whatever
order they appeared in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from feedline.core.constants import INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.element_dtypes import DtypeGuard
from feedline.core.functions import (
    annotate_error,
    bind_free_variables,
    call_with_element,
    function_name,
)
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.state_codec import decode, encode
from feedline.core.structure import Element
from feedline.core.traits import INDEPENDENT
from feedline.core.unary import UnaryDataset, UnaryIterator, require_callable
from feedline.core.validation import validate_int
from feedline.transforms.window import ElementListDataset

KeyFunc = Callable[..., Any]
ReduceFunc = Callable[[Any, Dataset], Dataset]
WindowSizeFunc = Callable[[Any], Any]


def as_key(value: Any, what: str, int64: bool = False) -> int:
    """A key or window size returned by a user function, as an ``int`` (an integer scalar,
    as tf.data's ``tf.int64`` scalar); anything else is a ``TypeError`` naming ``what``.

    With ``int64``, as ``group_by_window``'s functions in tf.data, a NumPy value must be an
    int64 scalar: another dtype (int32, uint64, bool, float) is tf.data's ``ValueError``
    "Tensor conversion requested dtype int64 ...", an array of another shape its "Invalid
    `key_func`" ``ValueError``. A Python ``int`` is converted, as tf.data converts it.

    Example:
        >>> as_key(np.int32(3), "key_func"), as_key(np.array(-2), "key_func", int64=True)
        (3, -2)
        >>> as_key(np.int32(3), "key_func", int64=True)
        Traceback (most recent call last):
        ...
        ValueError: key_func returned an int32 value: Tensor conversion requested dtype int64 for Tensor with dtype int32 (tf.data requires int64: return np.int64(...))
    """
    if int64 and isinstance(value, np.ndarray | np.generic):
        dtype = np.dtype(value.dtype)
        if value.ndim:
            raise ValueError(f"Invalid `{what}`. `{what}` must return a single int64 scalar "
                             f"tensor but its return type is TensorSpec(shape={value.shape}, "
                             f"dtype={dtype.name}).")
        if dtype != np.int64:
            raise ValueError(f"{what} returned an {dtype.name} value: Tensor conversion "
                             f"requested dtype int64 for Tensor with dtype {dtype.name} "
                             "(tf.data requires int64: return np.int64(...))")
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        shown = (f"an array of shape {value.shape}" if isinstance(value, np.ndarray)
                 else repr(value))
        raise TypeError(f"{what} must return an integer scalar (tf.data's int64 scalar), "
                        f"got {shown}")
    return int(value)


def group_cardinality(input_cardinality: int) -> int:
    """tf.data's: INFINITE over an endless input, else UNKNOWN (even for an empty input).

    Example:
        >>> group_cardinality(INFINITE), group_cardinality(0)
        (-1, -2)
    """
    return INFINITE if input_cardinality == INFINITE else UNKNOWN


@operation("group_by_window")
class GroupByWindowDataset(UnaryDataset):
    """The node of ``Dataset.group_by_window(key_func, reduce_func, window_size,
    window_size_func)``.

    ``key_func(element)`` (a tuple's components as arguments) gives each element's integer
    key; the window size of a key is ``window_size``, or ``window_size_func(key)`` (called
    once per key); ``reduce_func(key, window)`` maps each window, a dataset of the group's
    elements, to a dataset whose elements are the output. Exactly one of ``window_size`` and
    ``window_size_func`` must be given.

    A failing ``key_func`` or ``window_size_func`` drops that element; a failing
    ``reduce_func`` drops that window (the error names the window's key); an error inside the
    reduced dataset is raised in its place and the iteration goes on.

    Example:
        >>> import feedline as fl
        >>> ds = GroupByWindowDataset(fl.Dataset.range(8), lambda x: x % 2,
        ...                           lambda key, window: window.batch(3), window_size=3)
        >>> [b.tolist() for b in ds]
        [[0, 2, 4], [1, 3, 5], [6], [7]]
    """

    TRAITS = INDEPENDENT

    def __init__(self, input_dataset: Dataset, key_func: KeyFunc, reduce_func: ReduceFunc,
                 window_size: int | None = None, window_size_func: WindowSizeFunc | None = None,
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        if (window_size is None) == (window_size_func is None):
            raise ValueError("group_by_window(): give either window_size or window_size_func "
                             "(exactly one of them)")
        self.key_func = bind_free_variables(
            require_callable(key_func, "group_by_window()", "key_func"))
        self.reduce_func = bind_free_variables(
            require_callable(reduce_func, "group_by_window()", "reduce_func"))
        self.window_size = None if window_size is None else validate_int(
            window_size, "group_by_window(window_size)", minimum=1, hint="a positive int")
        self.window_size_func = None if window_size_func is None else bind_free_variables(
            require_callable(window_size_func, "group_by_window()", "window_size_func"))
        self.name = name or f"group_by_window({function_name(key_func)})"

    def _element_spec(self) -> Element | None:
        return None  # the elements of the datasets reduce_func makes: seen only by running it

    def cardinality(self) -> int:
        return group_cardinality(self._inputs[0].cardinality())

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return GroupByWindowIterator(ctx, self._make_input_iterator(ctx), self._key,
                                     self._window_size_of, self._reduce, self.name)

    def _key(self, element: Any) -> int:
        return as_key(call_with_element(self.key_func, element), "key_func", int64=True)

    def _window_size_of(self, key: int) -> int:
        if self.window_size is not None:
            return self.window_size
        size = as_key(self.window_size_func(np.int64(key)),  # type: ignore[misc]
                      "window_size_func", int64=True)
        if size <= 0:
            raise ValueError(f"window_size_func returned {size} for key {key}: a window size "
                             "must be greater than zero")
        return size

    def _reduce(self, key: int, window: Dataset) -> Dataset:
        return self.reduce_func(np.int64(key), window)


class GroupByWindowIterator(UnaryIterator):
    """Keeps the open groups (their elements, so its state grows with them) and iterates the
    dataset made of the window being reduced.

    The stage's functions are given as ``key_of(element) -> int``, ``window_size_of(key) ->
    int`` and ``reduce(key, window) -> Dataset``, so that ``bucket_by_sequence_length`` runs
    on this same iterator with its own.
    """

    OPERATION = "group_by_window"

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 key_of: Callable[[Any], int], window_size_of: Callable[[int], int],
                 reduce: Callable[[int, Dataset], Dataset], name: str) -> None:
        super().__init__(ctx, upstream)
        self._key_of = key_of
        self._window_size_of = window_size_of
        self._reduce = reduce
        self._name = name
        self._index = 0  # input elements read
        self._windows = 0  # windows reduced
        self._end_of_input = False
        self._groups: dict[int, list[Any]] = {}
        self._sizes: dict[int, int] = {}  # window size per key, computed once (as tf.data)
        self._key: int | None = None  # the key of the window being reduced
        self._inner: DatasetIterator | None = None
        # Every reduced dataset's elements have the first one's dtypes (tf.data traces
        # reduce_func once, so its datasets share one element_spec).
        self._dtypes = DtypeGuard(name, of="an element of the dataset made from window")

    def _set_inner(self, key: int | None, inner: DatasetIterator | None) -> None:
        if self._inner is not None:
            self._inner.close()
        self._key = key
        self._inner = inner
        self._inputs = [self._upstream] if inner is None else [self._upstream, inner]

    def _start_window(self, key: int) -> None:
        """Reduce the group of ``key``: its window stays in the groups until fully read, so
        that a state saved meanwhile can make the same dataset again."""
        index = self._windows
        self._windows += 1
        try:
            dataset = self._reduce(key, ElementListDataset(self._groups[key]))
            if not isinstance(dataset, Dataset):
                raise TypeError(f"reduce_func must return a feedline Dataset, got "
                                f"{type(dataset).__name__}")
        except Exception as error:  # noqa: BLE001 - re-raised with a note, the window dropped
            del self._groups[key]
            error.add_note(f"feedline: reducing the window of key {key} (window {index})")
            raise annotate_error(error, self._name)
        self._set_inner(key, self._ctx.make_inner_iterator(dataset, self._name))

    def _read_until_full(self) -> None:
        """Read input elements into their groups until one is full (then start reducing it)
        or the input ends."""
        while not self._end_of_input:
            try:
                element = next(self._upstream)
            except StopIteration:
                self._end_of_input = True
                return
            index = self._index
            self._index += 1
            try:
                key = self._key_of(element)
                size = self._sizes.get(key)
                if size is None:
                    size = self._sizes[key] = self._window_size_of(key)
            except Exception as error:  # noqa: BLE001 - re-raised with the stage named
                raise annotate_error(error, self._name, index)
            group = self._groups.setdefault(key, [])
            group.append(element)
            if len(group) == size:
                self._start_window(key)
                return

    def __next__(self) -> Any:
        while True:
            if self._inner is not None:
                try:
                    element = next(self._inner)
                except StopIteration:
                    del self._groups[self._key]  # type: ignore[arg-type]
                    self._set_inner(None, None)
                except Exception as error:  # noqa: BLE001 - raised in its place, goes on
                    note = (f"feedline: raised by the dataset {self._name} made from the window "
                            f"of key {self._key}")
                    if note not in getattr(error, "__notes__", ()):
                        error.add_note(note)
                    raise
                else:
                    # The window's index: _start_window counted it.
                    return self._dtypes.check(element, self._windows - 1)
            if not self._end_of_input:
                self._read_until_full()
                if self._inner is not None:
                    continue
            if self._end_of_input:
                if not self._groups:
                    raise StopIteration
                self._start_window(min(self._groups))

    def _get_state(self) -> State:
        groups = [[key, [encode(element) for element in group]]
                  for key, group in sorted(self._groups.items())]
        current = [] if self._inner is None else [self._key, self._inner.state_dict()]
        return self._with_input_state({
            "index": self._index, "windows": self._windows, "end_of_input": self._end_of_input,
            "groups": groups, "window_sizes": sorted(self._sizes.items()), "current": current})

    def _set_state(self, state: State) -> None:
        self._set_inner(None, None)
        self._load_input_state(state)
        self._index = int(state["index"])
        self._windows = int(state["windows"])
        self._end_of_input = bool(state["end_of_input"])
        self._groups = {int(key): [decode(element) for element in group]
                        for key, group in state["groups"]}
        self._sizes = {int(key): int(size) for key, size in state["window_sizes"]}
        if state["current"]:
            key, inner_state = state["current"]
            key = int(key)
            dataset = self._reduce(key, ElementListDataset(self._groups[key]))
            self._set_inner(key, self._ctx.make_inner_iterator(dataset, self._name))
            self._inner.load_state_dict(inner_state)  # type: ignore[union-attr]
