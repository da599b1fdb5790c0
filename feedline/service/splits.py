"""What a service worker runs: the whole pipeline, or one split of it.

``distributed_epoch`` divides one pass of the pipeline into *splits* that together produce
every element once, and hands them out one at a time. A split is a shard of the pipeline in
the sense of :mod:`feedline.distribute.autoshard` (the same rewrite worker processes use):
one file when the pipeline reads files (tf.data's file splits), else a block of source
elements (whole global batches when a ``batch`` follows one-to-one stages). A pipeline whose
output depends on element positions everywhere (``take``, ``zip``, ``enumerate`` before any
split point) cannot be split without every split running all of it; that is refused.
"""

from __future__ import annotations

import dataclasses
import warnings

from feedline.core.dataset import Dataset
from feedline.distribute.autoshard import plan_sharding, shard_pipeline

SPLITS_PER_WORKER = 4
"""Splits per worker (at the most workers) when the pipeline does not read files: enough
that a slow or lost worker holds up little of the epoch, few enough that each split is
long."""


@dataclasses.dataclass(frozen=True)
class Part:
    """The part of a job's pipeline a worker task runs.

    Attributes:
        num_splits: Splits of the job (0: the whole pipeline, ``parallel_epochs``).
        split: Which split.
        offset: Items of the part already delivered: the task skips them (they are
            computed again, so that item positions, errors included, stay the same).
    """

    num_splits: int = 0
    split: int = 0
    offset: int = 0


def count_splits(dataset: Dataset, requested: int | None, max_workers: int) -> int:
    """How many splits ``distributed_epoch`` divides ``dataset`` into.

    Raises:
        ValueError: The pipeline cannot be split (see the module doc).

    Example:
        >>> import feedline as fl
        >>> count_splits(fl.Dataset.range(100).map(lambda x: x + 1), None, 2)
        8
    """
    plan = plan_sharding(dataset, 2)
    if plan.policy == "output":
        raise ValueError(
            "distributed_epoch needs a pipeline whose input can be split (files, or a "
            "source read through map, filter, batch, shuffle, interleave, ...); this one has "
            "a stage that depends on element positions (take, skip, zip, enumerate, scan, "
            "window, ...) before any split point. Put that stage after distribute(), or use "
            "processing_mode='parallel_epochs'.")
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise ValueError(f"num_splits must be a positive int, got {requested!r}")
        if plan.policy == "file" and plan.files is not None and requested > plan.files:
            raise ValueError(f"num_splits={requested} but the pipeline reads only "
                             f"{plan.files} files (a split is at least one file)")
        return requested
    if plan.policy == "file" and plan.files is not None:
        return plan.files
    splits = SPLITS_PER_WORKER * max(1, max_workers)
    cardinality = dataset.cardinality()
    if cardinality > 0:
        splits = min(splits, cardinality)  # not more splits than elements (or batches)
    return splits


def part_dataset(dataset: Dataset, part: Part) -> Dataset:
    """The pipeline of ``part``: ``dataset`` itself, or the shard that is its split.

    Example:
        >>> import feedline as fl
        >>> [int(x) for x in part_dataset(fl.Dataset.range(10), Part(num_splits=3, split=1))]
        [1, 4, 7]
    """
    if part.num_splits == 0:
        return dataset
    with warnings.catch_warnings():  # count_splits refused the policy that warns
        warnings.simplefilter("ignore", RuntimeWarning)
        return shard_pipeline(dataset, part.num_splits, part.split)


def describe(part: Part) -> str:
    """``"split 3 of 8"`` or ``"the whole pipeline"``, for messages."""
    if part.num_splits == 0:
        return "the whole pipeline"
    return f"split {part.split} of {part.num_splits}"

