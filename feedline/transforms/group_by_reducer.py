"""``group_by_reducer``: fold the elements of each key into one state, one output per key."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.element_dtypes import DtypeGuard
from feedline.core.errors import StructureError
from feedline.core.functions import (
    annotate_error,
    bind_free_variables,
    call_with_element,
    function_name,
)
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.state_codec import decode, encode
from feedline.core.structure import Element, spec_of
from feedline.core.traits import INDEPENDENT
from feedline.core.unary import UnaryDataset, UnaryIterator, require_callable
from feedline.transforms.group_by_window import as_key, group_cardinality
from feedline.transforms.reduce import check_new_state


@dataclass(frozen=True)
class Reducer:
    """What ``group_by_reducer`` does with each key's elements (tf.data's
    ``tf.data.experimental.Reducer``).

    Attributes:
        init_func: ``init_func(key)`` gives the key's initial state (``key`` an int64 scalar).
        reduce_func: ``reduce_func(state, element)`` gives the next state (the element whole,
            a tuple too); it keeps the initial state's structure and dtypes.
        finalize_func: ``finalize_func(state)`` gives the key's output element (a tuple state
            is passed as its components).

    Example:
        >>> import numpy as np
        >>> r = Reducer(lambda k: np.int64(0), lambda s, x: s + x, lambda s: s)
        >>> int(r.finalize_func(r.reduce_func(r.init_func(0), 3)))
        3
    """

    init_func: Callable[[Any], Any]
    reduce_func: Callable[[Any, Any], Any]
    finalize_func: Callable[..., Any]

    def __post_init__(self) -> None:
        for argument in ("init_func", "reduce_func", "finalize_func"):
            require_callable(getattr(self, argument), "Reducer()", argument)


@operation("group_by_reducer")
class GroupByReducerDataset(UnaryDataset):
    """The node of ``Dataset.group_by_reducer(key_func, reducer)``.

    Reads the whole input, keeping one state per key (``key_func`` gives an int64 scalar, as
    tf.data requires); at its end, yields ``reducer.finalize_func(state)`` for each key, in
    the order the keys first appeared.

    Example:
        >>> import feedline as fl, numpy as np
        >>> reducer = Reducer(lambda _: np.int64(0), lambda s, x: s + x, lambda s: s)
        >>> [int(x) for x in fl.Dataset.range(10).group_by_reducer(lambda x: x % 3, reducer)]
        [18, 12, 15]
    """

    TRAITS = INDEPENDENT

    def __init__(self, input_dataset: Dataset, key_func: Callable[..., Any], reducer: Reducer,
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        if not isinstance(reducer, Reducer):
            raise TypeError("group_by_reducer() needs a feedline Reducer(init_func, "
                            f"reduce_func, finalize_func), got {type(reducer).__name__}")
        self.key_func = bind_free_variables(
            require_callable(key_func, "group_by_reducer()", "key_func"))
        self.init_func = bind_free_variables(reducer.init_func)
        self.reduce_func = bind_free_variables(reducer.reduce_func)
        self.finalize_func = bind_free_variables(reducer.finalize_func)
        self.name = name or f"group_by_reducer({function_name(key_func)})"

    def _element_spec(self) -> Element | None:
        return None  # finalize_func's output: seen only by running it

    def cardinality(self) -> int:
        return group_cardinality(self._inputs[0].cardinality())

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return GroupByReducerIterator(ctx, self._make_input_iterator(ctx), self)


class GroupByReducerIterator(UnaryIterator):
    """Folds the input into per-key states, then finalizes them one key at a time.

    The state holds every key's state (encoded), so its size grows with the number of keys,
    as tf.data's checkpoint of this operation does.
    """

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 node: GroupByReducerDataset) -> None:
        super().__init__(ctx, upstream)
        self._node = node
        self._name = node.name
        self._index = 0  # input elements taken
        self._states: dict[int, Any] = {}  # by key, in the order keys first appeared
        self._specs: dict[int, Any] = {}  # each key's initial state spec (not stored)
        self._end_of_input = False
        self._emitted = 0  # keys finalized after the end of the input
        # Every key's output has the first one's dtypes (tf.data traces finalize_func once).
        self._dtypes = DtypeGuard(self._name)

    def _fold(self, element: Any, index: int) -> None:
        node = self._node
        try:
            key = as_key(call_with_element(node.key_func, element), "key_func", int64=True)
            state = self._states.get(key)
            if key not in self._states:
                state = node.init_func(np.int64(key))
                self._specs[key] = spec_of(state)
            state = node.reduce_func(state, element)
        except Exception as error:  # noqa: BLE001 - re-raised with the stage named
            raise annotate_error(error, self._name, index)
        spec = self._specs.get(key)
        if spec is None:  # a restored key: its spec is that of its stored state
            spec = self._specs[key] = spec_of(self._states[key])
        check_new_state(spec, state, index, self._name)
        self._states[key] = state

    def __next__(self) -> Any:
        while not self._end_of_input:
            try:
                element = next(self._upstream)
            except StopIteration:
                self._end_of_input = True
                break
            index = self._index
            self._index += 1
            self._fold(element, index)
        keys = list(self._states)
        if self._emitted >= len(keys):
            raise StopIteration
        key = keys[self._emitted]
        self._emitted += 1
        try:
            output = call_with_element(self._node.finalize_func, self._states[key])
        except Exception as error:  # noqa: BLE001 - re-raised with the stage named
            error.add_note(f"feedline: finalizing the state of key {key}")
            raise annotate_error(error, self._name)
        try:
            return self._dtypes.check(output, self._emitted - 1)
        except StructureError as error:
            error.add_note(f"feedline: the finalized state of key {key}")
            raise

    def _get_state(self) -> State:
        states = [[key, encode(state)] for key, state in self._states.items()]
        return self._with_input_state({"index": self._index, "states": states,
                                       "end": self._end_of_input, "emitted": self._emitted})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._index = int(state["index"])
        self._states = {int(key): decode(value) for key, value in state["states"]}
        self._specs = {}
        self._end_of_input = bool(state["end"])
        self._emitted = int(state["emitted"])
