"""Base classes for single-input stages: a :class:`UnaryDataset` node and its
:class:`UnaryIterator`.

Most transformations read exactly one input. They share the same plumbing: the node passes
its input's element spec and cardinality through unless the stage changes them, checks that
user functions are callable, and the iterator nests its input's state under one key
(:data:`INPUT_KEY`). Writing that once keeps the state layout identical across stages, so a
checkpoint written before a stage adopted these bases still loads after.

Neither class adds instance attributes to what a stage stores: node attributes enter the
pipeline fingerprint (:mod:`feedline.core.fingerprint`), so adopting the base leaves existing
fingerprints, and the checkpoints sealed with them, valid.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.structure import Element

INPUT_KEY = "input"
"""The key under which a single-input stage's state holds its input's state."""

_F = TypeVar("_F", bound=Callable[..., Any])


def require_callable(fn: _F, operation: str, argument: str, hint: str = "") -> _F:
    """Return ``fn`` if it is callable, else raise ``TypeError`` naming the operation.

    Args:
        fn: The user's function.
        operation: The operation as the user wrote it, e.g. ``"filter()"``.
        argument: The argument's name, e.g. ``"predicate"``.
        hint: Appended to the message (e.g. what kind of callable is expected).

    Raises:
        TypeError: ``fn`` is not callable.

    Example:
        >>> require_callable(len, "filter()", "predicate") is len
        True
        >>> require_callable(3, "filter()", "predicate")
        Traceback (most recent call last):
        ...
        TypeError: filter() needs a callable predicate, got int
    """
    if not callable(fn):
        raise TypeError(f"{operation} needs a callable {argument}{hint}, got {type(fn).__name__}")
    return fn


class UnaryDataset(Dataset):
    """A node with exactly one input.

    By default the element spec and the cardinality are the input's (right for stages that
    only drop, reorder or repeat whole elements without changing them); a stage that changes
    its elements overrides :meth:`_element_spec` (``None`` when not known statically), and one
    that changes how many there are overrides :meth:`cardinality`.

    Example:
        >>> import feedline as fl
        >>> class Identity(UnaryDataset):
        ...     def _make_iterator(self, ctx):
        ...         return self.input_dataset._make_iterator(ctx)
        >>> ds = Identity(fl.Dataset.range(3))
        >>> ds.cardinality(), ds.element_spec, [int(x) for x in ds]
        (3, TensorSpec(shape=(), dtype=int64), [0, 1, 2])
    """

    def __init__(self, input_dataset: Dataset) -> None:
        super().__init__([input_dataset])

    @property
    def input_dataset(self) -> Dataset:
        """The dataset this stage reads (a property over the graph's ``_inputs``, so graph
        rewrites that swap inputs are seen)."""
        return self._inputs[0]

    def _element_spec(self) -> Element | None:
        return self._inputs[0]._element_spec()

    def cardinality(self) -> int:
        return self._inputs[0].cardinality()

    def _make_input_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        """A new iterator of the input (what this stage's iterator reads)."""
        return self._inputs[0]._make_iterator(ctx)


class UnaryIterator(DatasetIterator):
    """An iterator reading one input iterator, ``self._upstream``.

    Its state nests the input's state under :data:`INPUT_KEY`, written last, through
    :meth:`_with_input_state` and read back through :meth:`_load_input_state`. A stage that
    replaces its input while running (``repeat`` starts one per epoch) calls
    :meth:`_set_upstream` so that closing reaches the current one.

    Example:
        >>> import feedline as fl
        >>> from feedline.core.iterator import IteratorContext
        >>> class Count(UnaryIterator):
        ...     def __init__(self, ctx, upstream):
        ...         super().__init__(ctx, upstream)
        ...         self._n = 0
        ...     def __next__(self):
        ...         element = next(self._upstream)
        ...         self._n += 1
        ...         return element
        ...     def _get_state(self):
        ...         return self._with_input_state({"n": self._n})
        ...     def _set_state(self, state):
        ...         self._load_input_state(state)
        ...         self._n = state["n"]
        >>> ctx = IteratorContext()
        >>> it = Count(ctx, fl.Dataset.range(3)._make_iterator(ctx))
        >>> _ = next(it); it.state_dict()
        {'type': 'Count', 'version': 1, 'n': 1, 'input': {'type': 'RangeIterator', 'version': 1, 'position': 1}}
    """

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream

    def _with_input_state(self, own: State) -> State:
        """``own`` (this stage's keys) followed by the input's state under ``"input"``."""
        own[INPUT_KEY] = self._upstream.state_dict()
        return own

    def _load_input_state(self, state: State) -> None:
        """Move the input to the position saved under ``"input"`` in ``state``."""
        self._upstream.load_state_dict(state[INPUT_KEY])

    def _set_upstream(self, upstream: DatasetIterator) -> None:
        """Read ``upstream`` from now on (and close it with this stage).

        The caller closes the iterator it replaces, before or after building the new one as
        the stage requires.
        """
        self._upstream = upstream
        self._inputs = [upstream]
