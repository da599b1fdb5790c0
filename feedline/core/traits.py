"""What each operation is, declared by the operation, for the planners that shard and place
pipelines (:mod:`feedline.distribute.autoshard`, :mod:`feedline.placement.auto`).

Every dataset class of feedline declares its :class:`OperationTraits` in its own body
(``TRAITS = ...``; ``tests/core/test_traits.py`` checks that none is left out), so a new
operation states how it treats elements instead of silently falling into the slowest sharding
policy. Classes outside feedline (a user's own ``Dataset`` subclass) get
:data:`POSITIONAL`, the safe choice: their output is taken to depend on element positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Elements = Literal["source", "one_to_one", "independent", "positional"]


@dataclass(frozen=True)
class OperationTraits:
    """How an operation treats the elements of its inputs.

    Attributes:
        elements: ``"source"`` (no input); ``"one_to_one"`` (output element ``i`` is a
            function of input element ``i`` alone: sharding its input shards its output,
            in order); ``"independent"`` (outputs depend on the input elements but not on
            their positions: ``filter``, ``shuffle``, ``batch``, ``interleave``; sharding
            its input gives a valid shard of its output, in another order);
            ``"positional"`` (outputs depend on positions or on several inputs: ``take``,
            ``zip``, ``scan``; only its output can be sharded).
        opens_files: Its input elements are file names it opens (a reader given a
            dataset of names, ``interleave`` or ``flat_map`` of readers).
        batches_consecutive: It groups consecutive input elements into batches of its
            ``batch_size`` (a sharding by whole global batches can split its input).
        cheap_to_reread: A source held in memory or computed, which every worker may read
            whole at little cost.
        writes_files: It writes files that copies of it in several processes would write
            at once (``cache(filename)``).

    Example:
        >>> from feedline.transforms.map import MapDataset
        >>> MapDataset.TRAITS.elements
        'one_to_one'
    """

    elements: Elements
    opens_files: bool = False
    batches_consecutive: bool = False
    cheap_to_reread: bool = False
    writes_files: bool = False

    @property
    def independent(self) -> bool:
        """Whether sharding its input shards its output (in order or not)."""
        return self.elements in ("one_to_one", "independent")


SOURCE = OperationTraits("source")
"""A source read from storage."""
IN_MEMORY_SOURCE = OperationTraits("source", cheap_to_reread=True)
"""A source held in memory or computed."""
ONE_TO_ONE = OperationTraits("one_to_one")
INDEPENDENT = OperationTraits("independent")
POSITIONAL = OperationTraits("positional")
READER_OF_NAMES = OperationTraits("independent", opens_files=True)
"""Opens the files its input names (``interleave``/``flat_map`` of readers, a reader given a
dataset of names)."""
BATCHING = OperationTraits("independent", batches_consecutive=True)
