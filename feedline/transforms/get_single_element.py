"""``get_single_element``: the one element of a dataset, as a value."""

from __future__ import annotations

from feedline.core.dataset import Dataset
from feedline.core.errors import InvalidArgumentError
from feedline.core.registry import operation
from feedline.core.runner import run
from feedline.core.structure import Element


@operation("get_single_element")
def get_single_element(dataset: Dataset, name: str | None = None) -> Element:
    """The only element of ``dataset`` (tf.data's ``Dataset.get_single_element``).

    Reads at most two elements: an empty dataset, or one with a second element, is tf.data's
    ``InvalidArgumentError`` in its words ("Dataset was empty." / "Dataset had more than one
    element.").

    Example:
        >>> import feedline as fl
        >>> int(get_single_element(fl.Dataset.range(5).skip(4)))
        4
    """
    stage = name or "get_single_element"
    with run(dataset) as iterator:
        try:
            element = next(iterator)
        except StopIteration:
            raise InvalidArgumentError(f"{stage}: Dataset was empty.") from None
        try:
            next(iterator)
        except StopIteration:
            return element
    raise InvalidArgumentError(f"{stage}: Dataset had more than one element.")
