"""``reduce``: fold every element of a dataset into one state, which keeps its types."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.functions import annotate_error
from feedline.core.registry import operation
from feedline.core.runner import run
from feedline.core.structure import (
    DatasetSpec,
    Element,
    NoneTensorSpec,
    describe,
    flatten,
    same_structure,
    spec_of,
)


def _types(spec: Element) -> list[str]:
    """The flat leaf types of a spec, as tf.data lists them in its reduce errors."""
    shown = []
    for leaf in flatten(spec):
        if isinstance(leaf, NoneTensorSpec | DatasetSpec):
            shown.append(repr(leaf))
        else:
            shown.append(np.dtype(leaf.dtype).name)
    return shown


def check_new_state(initial_spec: Element, state: Element, index: int,
                    stage: str = "reduce") -> None:
    """Raise ``TypeError`` if ``state`` differs from the initial state in structure or in a
    leaf's dtype (shapes may change, as tf.data relaxes them), as tf.data does.

    Example:
        >>> check_new_state(spec_of(np.int64(0)), np.int32(1), 0)
        Traceback (most recent call last):
        ...
        TypeError: reduce: The element types for the new state must match the initial state. Expected ['int64'] but got ['int32'] (the state reduce_func returned for element 0).
    """
    where = f"(the state reduce_func returned for element {index})"
    new_spec = spec_of(state)
    if not same_structure(initial_spec, new_spec):
        raise TypeError(
            f"{stage}: The element structure for the new state must match the initial state. "
            f"Expected {describe(initial_spec)} but got {describe(new_spec)} {where}.")
    expected, got = _types(initial_spec), _types(new_spec)
    if expected != got:
        raise TypeError(
            f"{stage}: The element types for the new state must match the initial state. "
            f"Expected {expected} but got {got} {where}.")


@operation("reduce")
def reduce_dataset(dataset: Dataset, initial_state: Element,
                   reduce_func: Callable[[Any, Any], Any]) -> Element:
    """Fold every element of ``dataset`` into a state: ``state = reduce_func(state, element)``.

    The state keeps the structure and the dtypes of ``initial_state``; a ``reduce_func``
    returning another (``(s, x)`` for ``s``, int32 for int64) is tf.data's ``TypeError``,
    naming the element. Shapes may change from step to step.

    Example:
        >>> import feedline as fl
        >>> int(reduce_dataset(fl.Dataset.range(5), np.int64(0), lambda s, x: s + x))
        10
    """
    initial_spec = spec_of(initial_state)
    state = initial_state
    with run(dataset, continue_epochs=True) as iterator:
        for index, element in enumerate(iterator):
            try:
                state = reduce_func(state, element)
            except Exception as error:  # noqa: BLE001 - re-raised with a note
                raise annotate_error(error, "reduce", index)
            check_new_state(initial_spec, state, index)
    return state
