"""``Dataset.counter``: an endless count from ``start`` in steps of ``step``."""

from __future__ import annotations

from typing import Any

import numpy as np

from feedline.core.constants import INFINITE
from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.registry import operation
from feedline.core.structure import TensorSpec
from feedline.core.traits import IN_MEMORY_SOURCE


def _number(value: Any, dtype: np.dtype, what: str) -> Any:
    """``value`` as a scalar of ``dtype``, refusing what tf.convert_to_tensor refuses (a
    fraction for an integer dtype, an integer out of its range, a bool or a string)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
        raise TypeError(f"counter({what}) must be a number, got {value!r}")
    if dtype.kind in "iu":
        if isinstance(value, float | np.floating) and not float(value).is_integer():
            raise TypeError(f"counter({what}) must be an integer for dtype {dtype}, got {value!r}")
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise ValueError(f"counter({what}) = {int(value)} does not fit dtype {dtype} "
                             f"([{info.min}, {info.max}])")
        return dtype.type(int(value))
    return dtype.type(value)


@operation("counter")
class CounterDataset(Dataset):
    """The node of ``Dataset.counter(start, step, dtype)``: ``start``, ``start + step``, ...

    As tf.data (a ``scan`` adding ``step`` to a state), each element is the previous one plus
    ``step`` in ``dtype``: integers wrap around at the dtype's bounds, and floats accumulate
    their rounding (element ``k`` of a float32 counter is not ``start + k * step``).

    Example:
        >>> [int(x) for x in CounterDataset(120, 5, np.int8).take(4)]
        [120, 125, -126, -121]
    """

    TRAITS = IN_MEMORY_SOURCE

    def __init__(self, start: Any = 0, step: Any = 1, dtype: Any = np.int64,
                 name: str | None = None) -> None:
        super().__init__()
        self.name = name  # shown in errors and profiles; not part of the fingerprint
        try:
            self.dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"counter(dtype) must be a NumPy numeric dtype, got {dtype!r}"
                            ) from None
        if self.dtype.kind not in "iuf":
            raise TypeError(f"counter(dtype) must be an integer or float dtype, got {self.dtype}")
        self.start = _number(start, self.dtype, "start")
        self.step = _number(step, self.dtype, "step")

    def _element_spec(self) -> TensorSpec:
        return TensorSpec((), self.dtype)

    def cardinality(self) -> int:
        return INFINITE

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return CounterIterator(ctx, self.start, self.step)


class CounterIterator(DatasetIterator):
    """Holds the next value; the state saves it (as a Python number: exact for every dtype)."""

    def __init__(self, ctx: IteratorContext, start: np.generic, step: np.generic) -> None:
        super().__init__(ctx)
        self._start = start
        self._value = np.array(start)
        self._step = step
        self._count = 0

    def __next__(self) -> Any:
        out = self._value[()]
        # In place, in the dtype: integer overflow wraps as TensorFlow's addition does.
        with np.errstate(over="ignore"):
            np.add(self._value, self._step, out=self._value)
        self._count += 1
        return out

    def _get_state(self) -> State:
        return {"count": self._count, "next": self._value.item()}

    def _set_state(self, state: State) -> None:
        self._count = int(state["count"])
        self._value = np.array(_number(state["next"], self._value.dtype, "state"))
