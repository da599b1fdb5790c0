"""The graph walk every rewrite shares: replace nodes, rebuild what reads them, keep the rest."""

from __future__ import annotations

from collections.abc import Callable

from feedline.core.dataset import Dataset

Replacement = Callable[[Dataset, Callable[[Dataset], Dataset]], Dataset | None]
"""``replace(node, rewrite)``: the node's replacement (built with ``rewrite`` for the inputs
it keeps), or ``None`` to keep the node and rewrite its inputs."""


def rewrite_graph(dataset: Dataset, replace: Replacement) -> Dataset:
    """Apply ``replace`` to every node of the graph, each node once (shared inputs stay
    shared); a node whose inputs did not change is kept as it is.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(3).map(lambda x: x + 1)
        >>> same = rewrite_graph(ds, lambda node, rewrite: None)
        >>> same is ds
        True
    """
    memo: dict[int, Dataset] = {}

    def rewrite(node: Dataset) -> Dataset:
        if id(node) in memo:
            return memo[id(node)]
        # A stage reading its input by index keeps that input as written: a rewritten one
        # (fused, vectorized) could lose its random access.
        result = node if node.traits().keeps_input_as_written else replace(node, rewrite)
        if result is None:
            inputs = [rewrite(child) for child in node._inputs]
            changed = any(new is not old for new, old in zip(inputs, node._inputs))
            result = node._with_inputs(inputs) if changed else node
        memo[id(node)] = result
        return result

    return rewrite(dataset)
