"""``Dataset.range``: consecutive integers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.random_access import RandomAccessReader
from feedline.core.registry import operation
from feedline.core.structure import TensorSpec
from feedline.core.traits import IN_MEMORY_SOURCE
from feedline.core.validation import as_int


@operation("range")
class RangeDataset(Dataset):
    """The node of ``Dataset.range(start, stop, step)``; elements are int64 scalars by default."""

    TRAITS = IN_MEMORY_SOURCE  # every worker process may read all of it

    def __init__(self, *args: int, dtype: Any = None, name: str | None = None) -> None:
        super().__init__()
        self.name = name  # shown in errors and profiles; not part of the fingerprint
        if not 1 <= len(args) <= 3:
            raise TypeError(f"range() takes 1 to 3 positional arguments, got {len(args)}")
        names = ("stop",) if len(args) == 1 else ("start", "stop", "step")[:len(args)]
        values = [as_int(arg, f"range({name})") for name, arg in zip(names, args)]
        self.range = range(*values)  # raises ValueError for step 0, as Python
        self.dtype = np.dtype(dtype or np.int64)

    def _element_spec(self) -> TensorSpec:
        return TensorSpec((), self.dtype)

    def cardinality(self) -> int:
        return len(self.range)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return RangeIterator(ctx, self.range, self.dtype)

    def _offers_random_access(self) -> bool:
        return True

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        return RangeReader(self.range, self.dtype)


class RangeReader(RandomAccessReader):
    """Element ``i`` of a range is ``start + i * step``.

    Example:
        >>> [int(x) for x in RangeReader(range(3, 30, 10), np.dtype(np.int64)).get_many([2, 0])]
        [23, 3]
    """

    def __init__(self, values: range, dtype: np.dtype) -> None:
        super().__init__()
        self._values = values
        self._dtype = dtype

    def __len__(self) -> int:
        return len(self._values)

    def get(self, index: int) -> Any:
        return self._dtype.type(self._values[index])

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        positions = np.asarray(indices, dtype=np.int64)
        values = self._values.start + positions * self._values.step
        return list(values.astype(self._dtype, copy=False))


class RangeIterator(DatasetIterator):
    def __init__(self, ctx: IteratorContext, values: range, dtype: np.dtype) -> None:
        super().__init__(ctx)
        self._start, self._step, self._length = values.start, values.step, len(values)
        self._position = 0
        self._scalar = dtype.type

    def __next__(self) -> Any:
        position = self._position
        if position >= self._length:
            raise StopIteration
        self._position = position + 1
        return self._scalar(self._start + position * self._step)

    def _get_state(self) -> State:
        return {"position": self._position}

    def _set_state(self, state: State) -> None:
        self._position = state["position"]
