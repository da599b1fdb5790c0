"""``flat_map``: map each element to a dataset and concatenate those datasets in order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from feedline.core.constants import UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.element_dtypes import DtypeGuard
from feedline.core.errors import CheckpointError, InvalidArgumentError
from feedline.core.functions import (
    annotate_error,
    bind_free_variables,
    call_with_element,
    function_name,
)
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.runner import run
from feedline.core.state_codec import decode, encode
from feedline.core.structure import Element, is_datasets_array
from feedline.core.traits import READER_OF_NAMES
from feedline.core.unary import UnaryDataset, UnaryIterator, require_callable


def make_inner_dataset(map_func: Callable[..., Any], element: Any, stage: str,
                       index: int) -> Dataset:
    """Call ``map_func`` on an input element and check that it returned a feedline Dataset.

    Errors raised by ``map_func`` keep their type and get a note naming ``stage`` and
    ``index``; a result that is not a :class:`Dataset` is a ``TypeError``, except a batch of
    datasets (an object array of them, as ``window().batch()`` or ``from_tensors([a, b])``
    give), which is tf.data's ``InvalidArgumentError``: "Function must return a single scalar
    of dtype DT_VARIANT".

    Example:
        >>> import feedline as fl
        >>> make_inner_dataset(lambda x: fl.Dataset.range(x), 2, "flat_map", 0).cardinality()
        2
    """
    try:
        dataset = call_with_element(map_func, element)
    except Exception as error:  # noqa: BLE001 - re-raised with a note
        raise annotate_error(error, stage, index)
    if is_datasets_array(dataset):
        raise InvalidArgumentError(
            f"{stage}: map_func must return a single dataset, got a batch of datasets of "
            f"shape {dataset.shape} for input element {index} (tf.data: Function must return "
            "a single scalar of dtype DT_VARIANT); unbatch() the batch first")
    if not isinstance(dataset, Dataset):
        raise TypeError(f"{stage}: map_func must return a feedline Dataset, got "
                        f"{type(dataset).__name__} for input element {index}")
    return dataset


def traced_inner_spec(input_dataset: Dataset, map_func: Callable[..., Any],
                      stage: str) -> Element | None:
    """The spec of the dataset ``map_func`` makes of the first input element (``None`` when
    the input is empty), as tf.data takes a ``flat_map``'s or ``interleave``'s spec from the
    dataset its trace of ``map_func`` returns: ``window(3).flat_map(lambda w: w.batch(3))``
    has batches of unknown size, whatever the first batch's size (see
    :mod:`feedline.core.spec_inference`).

    Example:
        >>> import feedline as fl
        >>> traced_inner_spec(fl.Dataset.range(7).window(3), lambda w: w.batch(3), "flat_map")
        TensorSpec(shape=(None,), dtype=int64)
    """
    with run(input_dataset) as iterator:
        first = next(iterator, None)
    if first is None:
        return None
    return make_inner_dataset(map_func, first, stage, 0).element_spec


def note_inner_error(error: BaseException, stage: str, index: int) -> BaseException:
    """Add a note saying which input element's dataset raised ``error`` (once per stage)."""
    note = f"feedline: raised by the dataset {stage} made from input element {index}"
    if note not in getattr(error, "__notes__", ()):
        error.add_note(note)
    return error


@operation("flat_map")
class FlatMapDataset(UnaryDataset):
    """The node of ``Dataset.flat_map``.

    Example:
        >>> import feedline as fl
        >>> ds = FlatMapDataset(fl.Dataset.range(1, 3), lambda x: fl.Dataset.range(x).repeat(2))
        >>> [int(x) for x in ds]
        [0, 0, 0, 1, 0, 1]
    """

    TRAITS = READER_OF_NAMES

    def __init__(self, input_dataset: Dataset, map_func: Callable[..., Dataset],
                 name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.map_func = bind_free_variables(
            require_callable(map_func, "flat_map()", "map_func"))
        self.name = name or f"flat_map({function_name(map_func)})"

    def _element_spec(self) -> Element | None:
        return None  # the inner datasets' elements: seen only by running map_func

    def _traced_element_spec(self) -> Element | None:
        return traced_inner_spec(self._inputs[0], self.map_func, self.name)

    def cardinality(self) -> int:
        # As tf.data: the inner datasets' sizes are unknown until they are made.
        return 0 if self._inputs[0].cardinality() == 0 else UNKNOWN

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return FlatMapIterator(ctx, self._make_input_iterator(ctx), self.map_func, self.name)


class FlatMapIterator(UnaryIterator):
    """Reads one inner dataset to its end, then makes the next from the next input element.

    The state keeps the input element the current inner dataset was made from, so a restore
    calls ``map_func`` on it again and moves the new inner iterator to the saved position.
    An element that cannot be stored in a state (one holding datasets other than
    ``window``'s, as ``from_tensor_slices([a, b])`` gives) is not: the input's position
    before it is kept instead, and a restore reads it again from there. Which of the two
    is found at the first element, so only that one costs an extra input state. An input
    that cannot give its position either (its own buffer or rows hold datasets) never stops
    the reading: only a checkpoint taken while that element's dataset is read fails, with a
    ``CheckpointError`` naming this stage and the element.
    """

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 map_func: Callable[..., Dataset], name: str) -> None:
        super().__init__(ctx, upstream)
        self._map_func = map_func
        self._name = name
        self._index = 0  # input elements taken so far
        self._element: Any = None  # the input element the current inner dataset came from
        self._inner: DatasetIterator | None = None
        # Whether elements are re-read from the input's earlier position on restore (they
        # cannot be stored); None until the first element says.
        self._reread: bool | None = None
        # The input's state before the current element (or why it could not give one).
        self._before: State | CheckpointError | None = None
        # Every inner dataset's elements have the first one's dtypes (tf.data traces
        # map_func once, so its datasets share one element_spec).
        self._dtypes = DtypeGuard(name, of="an element of the dataset made from input element")

    def _set_inner(self, inner: DatasetIterator | None, element: Any = None) -> None:
        if self._inner is not None:
            self._inner.close()
        self._inner = inner
        self._element = element
        self._inputs = [self._upstream] if inner is None else [self._upstream, inner]

    def _open(self, element: Any, index: int) -> DatasetIterator:
        dataset = make_inner_dataset(self._map_func, element, self._name, index)
        return self._ctx.make_inner_iterator(dataset, self._name)

    def _input_state_before(self) -> State | CheckpointError | None:
        """The input's state before its next element, where a restore may need it.

        Plain iteration never needs a checkpoint: an input that cannot give its state now
        (it holds datasets, as ``batch().unbatch()`` of datasets does) leaves the error, which
        a checkpoint taken while this element's dataset is read raises.
        """
        if self._reread is False:
            return None
        try:
            return self._upstream.state_dict()
        except CheckpointError as error:
            return error

    def __next__(self) -> Any:
        while True:
            if self._inner is None:
                before = self._input_state_before()
                element = next(self._upstream)
                index = self._index
                self._index += 1
                if self._reread is None:
                    self._reread = not _storable(element)
                self._before = before if self._reread else None
                # A failing map_func consumes its element: the next call goes on with the next.
                self._set_inner(self._open(element, index), element)
            try:
                element = next(self._inner)  # type: ignore[arg-type]
            except StopIteration:
                self._set_inner(None)
                continue
            except Exception as error:  # noqa: BLE001 - re-raised with a note
                raise note_inner_error(error, self._name, self._index - 1)
            return self._dtypes.check(element, self._index - 1)

    def _get_state(self) -> State:
        # A list, empty between inner datasets, so the state keeps one shape at every step:
        # [element, inner state], or [input state before the element, inner state, "reread"].
        if self._inner is None:
            current: list[Any] = []
        elif isinstance(self._before, CheckpointError):
            raise CheckpointError(
                f"{self._name}: cannot checkpoint while reading the dataset made from input "
                f"element {self._index - 1}: that element holds datasets, which a state cannot "
                "store, and the input could not give its position before it either "
                f"({self._before}); a checkpoint between two inner datasets may work"
            ) from self._before
        elif self._before is not None:
            current = [self._before, self._inner.state_dict(), "reread"]
        else:
            current = [encode(self._element), self._inner.state_dict()]
        return self._with_input_state({"index": self._index, "current": current})

    def _set_state(self, state: State) -> None:
        self._set_inner(None)
        self._index = state["index"]
        self._before = None
        current = state["current"]
        if len(current) == 3:  # the element is read again from the input's earlier position
            before, inner_state, _ = current
            self._upstream.load_state_dict(before)
            element = next(self._upstream)
            self._reread, self._before = True, before
        else:
            self._load_input_state(state)
            if not current:
                return
            encoded, inner_state = current
            element = decode(encoded)
            self._reread = False
        inner = self._open(element, self._index - 1)
        self._set_inner(inner, element)
        inner.load_state_dict(inner_state)


def _storable(element: Any) -> bool:
    """Whether ``element`` can be stored in a state (datasets other than ``window``'s cannot)."""
    try:
        encode(element)
    except CheckpointError:
        return False
    return True
