"""``window``: group consecutive elements into small datasets (windows)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from feedline.core.constants import INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.error_records import RestoredError, restore_error
from feedline.core.errors import StructureError
from feedline.core.functions import annotate_error
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.state_codec import decode, encode, register_state_type
from feedline.core.structure import (
    DatasetSpec,
    Element,
    describe,
    elements_equal,
    flatten,
    pack_as,
    same_structure,
    spec_of,
)
from feedline.core.traits import IN_MEMORY_SOURCE, POSITIONAL
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.core.validation import validate_int

RestoredElementError = RestoredError
"""The error a restored window raises for an element that failed before the checkpoint: a
:class:`~feedline.core.error_records.RestoredError`, also an instance of the original's type
when that is a builtin or feedline type (``except KeyError`` catches it as before the
checkpoint). Kept under this name for code that caught it by it."""


def _failure_text(error: BaseException) -> str:
    """How the state records a buffered failure: ``"TypeName: message"``."""
    name = error.original_type.rsplit(".", 1)[-1] if isinstance(error, RestoredError) \
        else type(error).__name__
    return f"{name}: {error}"


def _restore_failure(text: str, stage: str) -> RestoredError:
    """The error :func:`_failure_text` recorded, of the original's type where it can be."""
    name, _, message = text.partition(": ")
    note = f"feedline: buffered by {stage} when the checkpoint was saved"
    return restore_error({"type": name, "kind": name, "message": message, "notes": [note]})


@register_state_type
class ElementListDataset(Dataset):
    """A dataset of the given elements, held in memory: one window of ``Dataset.window``.

    Example:
        >>> import numpy as np
        >>> ds = ElementListDataset([np.int64(3), np.int64(4)])
        >>> [b.tolist() for b in ds.batch(2)], ds.cardinality()
        ([[3, 4]], 2)
    """

    TRAITS = IN_MEMORY_SOURCE

    def __init__(self, elements: Sequence[Element]) -> None:
        super().__init__()
        self.elements = tuple(elements)

    def _element_spec(self) -> Element | None:
        if not self.elements:
            return None
        spec = spec_of(self.elements[0])
        for element in self.elements[1:]:
            other = spec_of(element)
            if not same_structure(spec, other):
                return None
            spec = pack_as(spec, [a.most_specific_common(b)
                                  for a, b in zip(flatten(spec), flatten(other))])
        return spec

    def cardinality(self) -> int:
        return len(self.elements)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return ElementListIterator(ctx, self.elements)

    def __repr__(self) -> str:
        return f"<ElementListDataset of {len(self.elements)} elements>"

    # Windows compare by value, so pipelines yielding them can be checked element for element.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ElementListDataset):
            return NotImplemented
        return len(self.elements) == len(other.elements) and all(
            elements_equal(a, b) for a, b in zip(self.elements, other.elements))

    __hash__ = Dataset.__hash__

    # A window is an element of the window() dataset, so stages that store their input
    # element in a checkpoint (flat_map, prefetch, ...) must be able to store it.
    def __feedline_encode__(self) -> Any:
        return [encode(element) for element in self.elements]

    @classmethod
    def __feedline_decode__(cls, value: Any) -> ElementListDataset:
        return cls([decode(element) for element in value])


class ElementListIterator(DatasetIterator):
    def __init__(self, ctx: IteratorContext, elements: tuple[Element, ...]) -> None:
        super().__init__(ctx)
        self._elements = elements
        self._position = 0

    def __next__(self) -> Any:
        if self._position >= len(self._elements):
            raise StopIteration
        self._position += 1
        return self._elements[self._position - 1]

    def _get_state(self) -> State:
        return {"position": self._position}

    def _set_state(self, state: State) -> None:
        self._position = state["position"]


def make_window(elements: list[Element], stage: str, index: int) -> Element:
    """A window from its elements: one dataset for a single leaf, otherwise the elements'
    structure with a dataset of each leaf's values in its place (as tf.data).

    Example:
        >>> a, b = make_window([(1, b"x"), (2, b"y")], "window", 0)
        >>> [int(v) for v in a], list(b)
        ([1, 2], [b'x', b'y'])
    """
    first = elements[0]
    if not isinstance(first, tuple | dict):
        for i, element in enumerate(elements):
            if isinstance(element, tuple | dict):
                raise StructureError(f"{stage}: window {index} mixes a single leaf with "
                                     f"{describe(element)} (its element {i})")
        return ElementListDataset(elements)
    for i, element in enumerate(elements):
        if not same_structure(first, element):
            raise StructureError(f"{stage}: element {i} of window {index} is "
                                 f"{describe(element)}, element 0 is {describe(first)}")
    columns = zip(*(flatten(element) for element in elements))
    return pack_as(first, [ElementListDataset(column) for column in columns])


def _positive_int(value: Any, what: str) -> int:
    return validate_int(value, f"window({what})", minimum=1, hint="a positive int")


class _Failed:
    """A buffer slot whose element raised: the error is raised with each window holding it."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


@operation("window")
class WindowDataset(UnaryDataset):
    """The node of ``Dataset.window``: window ``i`` holds input elements
    ``i * shift + j * stride`` for ``j < size`` (those that exist).

    Without ``drop_remainder``, windows keep coming, shorter, while a start position exists.

    Example:
        >>> import feedline as fl
        >>> ds = WindowDataset(fl.Dataset.range(7), 3, 1, 2, drop_remainder=True)
        >>> [[int(x) for x in w] for w in ds]
        [[0, 2, 4], [1, 3, 5], [2, 4, 6]]
    """

    TRAITS = POSITIONAL

    def __init__(self, input_dataset: Dataset, size: int, shift: int | None = None,
                 stride: int = 1, drop_remainder: bool = False, name: str | None = None) -> None:
        super().__init__(input_dataset)
        self.size = _positive_int(size, "size")
        self.shift = self.size if shift is None else _positive_int(shift, "shift")
        self.stride = _positive_int(stride, "stride")
        self.drop_remainder = bool(drop_remainder)
        self.name = name or "window"

    def _element_spec(self) -> Element | None:
        # A dataset in place of each leaf, as tf.data's DatasetSpec of the input's leaf spec.
        inner = self._inputs[0]._element_spec()
        if inner is None:
            return None
        return pack_as(inner, [DatasetSpec(leaf, ()) for leaf in flatten(inner)])

    def cardinality(self) -> int:
        n = self._inputs[0].cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        if self.drop_remainder:
            rest = n - ((self.size - 1) * self.stride + 1)
            return 0 if rest < 0 else rest // self.shift + 1
        return -(-n // self.shift)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return WindowIterator(ctx, self._make_input_iterator(ctx), self.size, self.shift,
                              self.stride, self.drop_remainder, self.name)


class WindowIterator(UnaryIterator):
    """Keeps the ``(size - 1) * stride + 1`` input elements the next window spans, as
    tf.data's kernel does (element for element, failures included)."""

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, size: int, shift: int,
                 stride: int, drop_remainder: bool, name: str) -> None:
        super().__init__(ctx, upstream)
        self._size = size
        self._shift = shift
        self._stride = stride
        self._span = (size - 1) * stride + 1
        self._drop_remainder = drop_remainder
        self._name = name
        self._buffer: list[Any] = []
        self._exhausted = False
        self._windows = 0

    def _too_short(self) -> bool:
        return not self._buffer or (self._drop_remainder and len(self._buffer) < self._span)

    def __next__(self) -> Any:
        buffer = self._buffer
        if self._exhausted and self._too_short():
            raise StopIteration
        while not self._exhausted and len(buffer) < self._span:
            try:
                buffer.append(next(self._upstream))
            except StopIteration:
                self._exhausted = True
            except Exception as error:  # noqa: BLE001 -- raised later, with its windows
                # Kept in its slot: it fails the windows that hold it, not the others.
                buffer.append(_Failed(error))
        if self._too_short():
            raise StopIteration
        picked = buffer[::self._stride]
        if self._shift >= len(buffer):
            for _ in range(self._shift - len(buffer)):
                if self._exhausted:
                    break
                try:
                    next(self._upstream)
                except StopIteration:
                    self._exhausted = True
                except Exception:  # noqa: BLE001, S110 -- in no window: tf.data ignores it
                    pass
            buffer.clear()
        else:
            del buffer[:self._shift]
        index = self._windows
        self._windows += 1
        for item in picked:
            if isinstance(item, _Failed):
                annotate_error(item.error, self._name, index)
                raise item.error
        return make_window(picked, self._name, index)

    def _get_state(self) -> State:
        buffered = [{"failed": _failure_text(item.error)}
                    if isinstance(item, _Failed) else {"element": encode(item)}
                    for item in self._buffer]
        return self._with_input_state({"windows": self._windows, "exhausted": self._exhausted,
                                       "buffer": buffered})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._windows = state["windows"]
        self._exhausted = state["exhausted"]
        self._buffer = [
            _Failed(_restore_failure(item["failed"], self._name)) if "failed" in item else decode(item["element"])
            for item in state["buffer"]]
