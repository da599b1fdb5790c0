"""What each operation is, declared by the operation, for the planners that shard and place
pipelines (:mod:`feedline.distribute.autoshard`, :mod:`feedline.placement.auto`).

Every dataset class of feedline declares its :class:`OperationTraits` in its own body
(``TRAITS = ...``; ``tests/core/test_traits.py`` checks that none is left out), so a new
operation states how it treats elements instead of silently falling into the slowest sharding
policy. Classes outside feedline (a user's own ``Dataset`` subclass) get
:data:`POSITIONAL`, the safe choice: their output is taken to depend on element positions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

Elements = Literal["source", "one_to_one", "independent", "positional"]
Reader = Literal["files", "function"]


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
        reader: Which kind of reader it is: ``"files"`` reads the records of the files it
            names itself (its ``filenames``; sharding by file gives each shard some of
            them); ``"function"`` opens the datasets its function makes of its input
            elements (``interleave``, ``flat_map``: the files those read are named by its
            input); ``None`` for the rest.
        random_access_from_input: It reads its input by index when its input has random
            access (``map``, ``batch``, ``take``...): a stage that keeps a pipeline from random
            access is then found below it.
        keeps_input_as_written: Graph rewrites (fusion, vectorization) leave its input as
            it is: it reads that input by index, and a rewritten input could lose that.
        execution_only: It changes how the pipeline runs, never which elements come out
            (``prefetch``, ``with_options``): fingerprints leave it out.
        permutes_by_index: It reads its input by index in a permutation drawn from its seed
            and epoch, the same in every process that builds it (``global_shuffle``): the
            ``"index"`` sharding policy gives each shard some positions of that permutation.

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
    reader: Reader | None = None
    random_access_from_input: bool = False
    keeps_input_as_written: bool = False
    execution_only: bool = False
    permutes_by_index: bool = False

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
READER_OF_NAMES = OperationTraits("independent", opens_files=True, reader="function")
"""Opens the files its input names through its function (``interleave``/``flat_map`` of
readers)."""
FILE_SOURCE = OperationTraits("source", reader="files")
"""Reads the records of the files it was given (a reader of listed files)."""
FILE_READER_OF_NAMES = OperationTraits("independent", opens_files=True, reader="files")
"""Reads the records of the files its input names (a reader given a dataset of names)."""
BATCHING = OperationTraits("independent", batches_consecutive=True)


LEGACY_FLAGS = {
    "_RANDOM_ACCESS_FROM_INPUT": "random_access_from_input",
    "_REWRITES_STOP_HERE": "keeps_input_as_written",
    "_FINGERPRINT_TRANSPARENT": "execution_only",
}
"""Class attributes that said what is now a trait, and the trait each says. Operations that
still declare one get the trait (:func:`with_legacy_flags`); nothing reads the attributes.
Only ``map`` and ``batch`` still spell one (their rewrite is under way elsewhere)."""


def with_legacy_flags(cls: type, traits: OperationTraits) -> OperationTraits:
    """``traits`` with what ``cls``'s legacy flags (:data:`LEGACY_FLAGS`) say.

    Example:
        >>> class Old:
        ...     _FINGERPRINT_TRANSPARENT = True
        >>> with_legacy_flags(Old, ONE_TO_ONE).execution_only
        True
    """
    said = {field: True for flag, field in LEGACY_FLAGS.items() if getattr(cls, flag, False)}
    return replace(traits, **said) if said else traits
