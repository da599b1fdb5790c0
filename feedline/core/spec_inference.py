"""Element specs that the graph alone does not know, derived the way tf.data derives them.

tf.data knows every stage's spec from the graph: a user function's output spec comes from
tracing it, and the stages after it derive theirs from that spec. ``batch(4)`` without
``drop_remainder`` has an unknown (``None``) batch dimension, because the last batch may be
smaller, even though the first batch has 4 rows.

feedline does not trace functions. A stage whose spec cannot be derived from its inputs'
(``map``, ``from_generator`` without a signature, ...) has its spec read from its own first
element; a stage may instead say how tf.data's trace would find it by running part of the
pipeline (``_traced_element_spec()``: ``flat_map`` takes the spec of the dataset its function
makes of the first input element). Every other stage derives its spec from its inputs'
specs, found the same way, so ``range(10).map(f).batch(4)`` reports ``(None, 2)`` as tf.data
does, not the shape of the first batch; and only the stage that needs it is run, on one
element.

Example:
    >>> import numpy as np, feedline as fl
    >>> fl.Dataset.range(10).map(lambda x: np.full(2, x)).batch(4).element_spec
    TensorSpec(shape=(None, 2), dtype=int64)
"""

from __future__ import annotations

from typing import Any

from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext
from feedline.core.registry import operation
from feedline.core.runner import run
from feedline.core.structure import Element, spec_of
from feedline.core.traits import ONE_TO_ONE


class _InferredInput(Dataset):
    """Stands in for a stage's input while the stage derives its spec: its static spec is
    the input's full :attr:`~feedline.Dataset.element_spec`, found only when the stage asks
    (a stage that does not derive its spec from its input's never makes it run)."""

    TRAITS = ONE_TO_ONE  # its input's elements, as they are

    def __init__(self, dataset: Dataset) -> None:
        super().__init__([dataset])

    def _element_spec(self) -> Element | None:
        return self._inputs[0].element_spec

    def cardinality(self) -> int:
        return self._inputs[0].cardinality()

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return self._inputs[0]._make_iterator(ctx)


def first_element_spec(dataset: Dataset) -> Element | None:
    """The spec of ``dataset``'s first element (``None`` when it has none).

    Example:
        >>> import feedline as fl
        >>> first_element_spec(fl.Dataset.range(3).batch(2))
        TensorSpec(shape=(2,), dtype=int64)
    """
    with run(dataset) as iterator:
        first = next(iterator, None)
    return None if first is None else spec_of(first)


@operation("element_spec")
def infer_element_spec(dataset: Dataset) -> Element | None:
    """``dataset``'s element spec when its ``_element_spec()`` does not know it statically.

    The stage derives its spec from its inputs' specs (each found by this same rule, and
    cached on the input) when it can; otherwise (a stage running user code, or an input
    that is empty) the spec is what its ``_traced_element_spec()`` finds, if it has one and
    that finds one, else that of its first element.

    Example:
        >>> import numpy as np, feedline as fl
        >>> ds = fl.Dataset.range(5).map(lambda x: np.zeros(3, np.float32))
        >>> infer_element_spec(ds.batch(2).prefetch(1))
        TensorSpec(shape=(None, 3), dtype=float32)
    """
    inputs: Any = dataset._inputs
    if inputs:
        derived = dataset._with_inputs([_InferredInput(d) for d in inputs])._element_spec()
        if derived is not None:
            return derived
    traced = getattr(dataset, "_traced_element_spec", None)
    if traced is not None:
        spec = traced()
        if spec is not None:
            return spec
    return first_element_spec(dataset)
