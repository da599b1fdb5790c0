"""Walking a pipeline's graph: every node once, however often it is shared.

:class:`Node` is what every node is (:class:`~feedline.core.dataset.Dataset` subclasses it):
the modules below ``core.dataset`` (element structures, graph walks, the runner's entry) tell a
node from a value and walk its inputs by it, for they cannot import ``Dataset``: it imports
them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar


class Node:
    """A node of a pipeline's graph; :class:`~feedline.core.dataset.Dataset` defines the rest.

    Example:
        >>> import feedline as fl
        >>> isinstance(fl.Dataset.range(3), Node), isinstance([1, 2], Node)
        (True, False)
    """

    __slots__ = ()

    _inputs: tuple[Node, ...]
    """The nodes it reads, in order."""


NodeT = TypeVar("NodeT", bound=Node)


def graph_nodes(dataset: NodeT) -> Iterator[NodeT]:
    """Each node of ``dataset``'s graph once, from the output down (depth first).

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(3).map(abs).batch(2)
        >>> [type(node).__name__ for node in graph_nodes(ds)]
        ['BatchDataset', 'MapDataset', 'RangeDataset']
    """
    # A node's inputs are of its kind (a Dataset's are Datasets).
    stack: list[Any] = [dataset]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(node._inputs)
