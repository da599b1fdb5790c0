"""Walking a pipeline's graph: every node once, however often it is shared."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from feedline.core.dataset import Dataset


def graph_nodes(dataset: Dataset) -> Iterator[Dataset]:
    """Each node of ``dataset``'s graph once, from the output down (depth first).

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(3).map(abs).batch(2)
        >>> [type(node).__name__ for node in graph_nodes(ds)]
        ['BatchDataset', 'MapDataset', 'RangeDataset']
    """
    stack, seen = [dataset], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(node._inputs)
