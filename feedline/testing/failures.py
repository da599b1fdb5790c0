"""Failing elements on purpose, and the outcomes of a run that has them.

A pipeline keeps going after an element fails (as in tf.data: ``next()`` raises for that
element and the following call continues), and a checkpoint must put a failure back in its
place. :func:`fail_at` makes chosen elements fail; :func:`take_outcomes` records a run as
values and :class:`Failed` markers, so two runs can be compared outcome by outcome.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from feedline.core.dataset import Dataset
from feedline.core.error_records import RestoredError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.core.validation import as_int


class InjectedError(ValueError):
    """The error :func:`fail_at` raises (a ``ValueError``, so a restored copy of it is one)."""


@dataclass(frozen=True)
class Failed:
    """The outcome of a ``next()`` that raised: the error's type name.

    A failure restored from a checkpoint (a :class:`~feedline.core.error_records.RestoredError`)
    counts as its original type, so it compares equal to the failure it stands for.

    Attributes:
        error_type: The (original) exception class's name, e.g. ``"ValueError"``.
    """

    error_type: str

    @classmethod
    def of(cls, error: BaseException) -> Failed:
        """The outcome of raising ``error``.

        Example:
            >>> Failed.of(KeyError("k"))
            Failed(error_type='KeyError')
        """
        if isinstance(error, RestoredError) and error.original_type:
            return cls(error.original_type.rsplit(".", 1)[-1])
        return cls(type(error).__name__)


MAX_FAILURES_IN_A_ROW = 10_000
""":func:`take_outcomes` gives up after this many failures with no value or end between
them: an iterator that fails without moving on would otherwise never end."""


def take_outcomes(iterator: Iterator[Any], limit: int | None = None) -> list[Any]:
    """Up to ``limit`` outcomes of ``iterator``: its values, and :class:`Failed` for each
    ``next()`` that raised an ``Exception`` (the iteration goes on after it).

    Raises:
        AssertionError: More than :data:`MAX_FAILURES_IN_A_ROW` failures in a row.

    Example:
        >>> import feedline as fl
        >>> take_outcomes(iter(fail_at(fl.Dataset.range(4), [1])))
        [np.int64(0), Failed(error_type='InjectedError'), np.int64(2), np.int64(3)]
    """
    out: list[Any] = []
    in_a_row = 0
    while limit is None or len(out) < limit:
        try:
            out.append(next(iterator))
            in_a_row = 0
        except StopIteration:
            break
        except Exception as error:  # recording failures is the point
            in_a_row += 1
            if in_a_row > MAX_FAILURES_IN_A_ROW:
                raise AssertionError(
                    f"the iterator failed {in_a_row} times in a row without moving on; last "
                    f"error: {type(error).__name__}: {error}") from error
            # Its traceback holds the stages' frames; dropping it frees them early.
            error.__traceback__ = None
            out.append(Failed.of(error))
    return out


def fail_at(dataset: Dataset, positions: Iterable[int],
            error_type: type[Exception] = InjectedError) -> Dataset:
    """``dataset`` with the elements at ``positions`` replaced by failures.

    Position ``i`` is the ``i``-th outcome of ``dataset`` (failures of ``dataset`` itself
    count as positions too). The element there is consumed and ``next()`` raises
    ``error_type`` instead; the following call continues with the next element.

    Args:
        dataset: The input.
        positions: 0-based positions that fail.
        error_type: The exception class raised (called with a message).

    Example:
        >>> import feedline as fl
        >>> it = iter(fail_at(fl.Dataset.range(3), [1], KeyError))
        >>> int(next(it))
        0
        >>> next(it)
        Traceback (most recent call last):
        ...
        KeyError: 'fail_at: injected failure at position 1'
        >>> int(next(it))
        2
    """
    return FailAtDataset(dataset, positions, error_type)


class FailAtDataset(UnaryDataset):
    """The node of :func:`fail_at`.

    Example:
        >>> import feedline as fl
        >>> FailAtDataset(fl.Dataset.range(5), [0, 3]).positions
        (0, 3)
    """

    TRAITS = POSITIONAL

    def __init__(self, input_dataset: Dataset, positions: Iterable[int],
                 error_type: type[Exception] = InjectedError) -> None:
        super().__init__(input_dataset)
        if not (isinstance(error_type, type) and issubclass(error_type, Exception)):
            raise TypeError(f"fail_at(error_type) must be an Exception class, got {error_type!r}")
        self.positions = tuple(sorted({as_int(p, "fail_at(positions)") for p in positions}))
        self.error_type = error_type
        self.name = "fail_at"

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return FailAtIterator(ctx, self._make_input_iterator(ctx), self)


class FailAtIterator(UnaryIterator):
    """Counts its input's outcomes; raises in place of the chosen ones."""

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator,
                 node: FailAtDataset) -> None:
        super().__init__(ctx, upstream)
        self._positions = frozenset(node.positions)
        self._error_type = node.error_type
        self._position = 0

    def __next__(self) -> Any:
        position = self._position
        try:
            element = next(self._upstream)
        except StopIteration:
            raise
        except Exception:
            self._position += 1  # the input's own failure takes its position
            raise
        self._position += 1
        if position in self._positions:
            raise self._error_type(f"fail_at: injected failure at position {position}")
        return element

    def _get_state(self) -> State:
        return self._with_input_state({"position": self._position})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._position = state["position"]
