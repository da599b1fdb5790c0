"""Splitting one pipeline into disjoint shards that together produce every element once.

Worker processes (:mod:`feedline.placement.multiprocess`) each run one shard of the same
pipeline. :func:`shard_pipeline` rewrites the graph for shard ``index`` of ``num_shards``,
choosing the first policy that applies, as tf.data's ``AutoShardPolicy.AUTO`` does:

``"index"``
    The pipeline has a ``global_shuffle`` and random access up to some stage
    (:mod:`feedline.core.random_access`), with only stages that treat elements
    independently after it: shard ``index`` reads positions ``index``, ``index +
    num_shards``, ... of that stage by index (never the others', and no file is read twice).
    When every stage after it is one-to-one (or there is none: ``global_shuffle().map()
    .batch()`` has random access all the way), merging the shards in turn gives exactly the
    output of one process, whatever the number of shards: the way to get output identical
    for any number of worker processes.
``"file"``
    The pipeline reads files (``TFRecordDataset`` and the other readers, given file names or
    a dataset of them, ``list_files`` followed by ``interleave``) through stages that treat
    elements independently: shard ``index`` reads files ``index``, ``index + num_shards``,
    ... (tf.data's ``FILE`` policy). Needs at least ``num_shards`` files.
``"batch"``
    Elements come from one source through one-to-one stages (``map``, ``prefetch``) into a
    ``batch(B)``: shard ``index`` takes the source's elements in blocks of ``B``, blocks
    ``index``, ``index + num_shards``, ..., so each shard builds whole *global* batches.
``"data"``
    Otherwise, if every stage treats elements independently (``map``, ``filter``,
    ``shuffle``, ``batch``, ``interleave``, ``unbatch``, ``repeat``, ...): the source's
    elements ``index``, ``index + num_shards``, ... (tf.data's ``DATA`` policy, applied right
    after the source so no work is repeated).
``"output"``
    A stage that depends on the position of elements (``take``, ``skip``, ``enumerate``,
    ``scan``, ``window``, ``zip``, ``unique``, ...) or several sources: every shard runs the
    whole pipeline and keeps every ``num_shards``-th *output* element. Always exact, never
    faster: the rewrite is only correct, a :class:`RuntimeWarning` says so.

Sharding is always placed right after a source (or on its file list), before any random
stage, so shards never disagree on who owns an element, whatever their random seeds; the
``"index"`` policy reads positions of a ``global_shuffle``, whose permutation every shard must
then draw alike (a seeded one: ``multiprocess`` refuses an unseeded one over several workers).

Merging the shards' outputs in turn (element ``k`` of the result is element ``k //
num_shards`` of shard ``k % num_shards``, skipping shards that have ended) gives exactly the
unsharded output for the ``"batch"`` and ``"output"`` policies, and for ``"data"`` when every
stage is one-to-one. One exception: under ``"batch"``, an element that fails inside a
global batch. The failed batch is dropped and the next one starts right after the failing
element (tf.data's behaviour), in one process and in a worker alike; but a worker's next
elements are its own next block's, so from there its batches differ from one process's
(every element that did not fail still arrives exactly once). The ``"file"`` policy, and ``"data"`` with ``filter``/``shuffle``/
``batch``, keep the same elements but change their order and which elements share a batch.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any, Literal

from feedline.core.dataset import Dataset
from feedline.core.graph import graph_nodes
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset, UnaryIterator
from feedline.distribute.index_shard import IndexShardDataset
from feedline.transforms.shard import ShardDataset

Policy = Literal["index", "file", "batch", "data", "output"]

# What each stage is comes from the stage (Dataset.traits(), feedline/core/traits.py): a
# new operation declares it, and is never silently given the slow policy.


def _independent(stage: Dataset) -> bool:
    """Whether sharding the input of ``stage`` (one input) shards its output."""
    return len(stage._inputs) == 1 and stage.traits().independent


def _one_to_one(stage: Dataset) -> bool:
    return stage.traits().elements == "one_to_one"


def _opens_files(stage: Dataset) -> bool:
    return stage.traits().opens_files


def _reads_files(stage: Dataset) -> bool:
    """Whether ``stage`` reads the records of the files it names (its ``filenames``)."""
    return stage.traits().reader == "files"


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """How a pipeline splits into shards.

    Attributes:
        policy: ``"index"``, ``"file"``, ``"batch"``, ``"data"`` or ``"output"`` (see the
            module doc).
        exact_order: Whether merging the shards in turn gives exactly the unsharded output
            (for the ``"batch"`` policy: as long as no element fails, see the module doc).
        path: The stages from the output down to where the shard goes (output first).
        block: Source elements per block for the ``"batch"`` policy (the batch size).
        files: Number of files for the ``"file"`` policy when known.
    """

    policy: Policy
    exact_order: bool
    path: tuple[Dataset, ...]
    block: int = 1
    files: int | None = None


def plan_sharding(dataset: Dataset, num_shards: int) -> ShardPlan:
    """Which policy :func:`shard_pipeline` applies to ``dataset`` for ``num_shards`` shards.

    Raises:
        ValueError: A ``cache(filename)`` would be written by every shard.

    Example:
        >>> import feedline as fl
        >>> plan_sharding(fl.Dataset.range(100).map(lambda x: x * 2).batch(8), 4).policy
        'batch'
        >>> plan_sharding(fl.Dataset.range(100).take(5), 4).policy
        'output'
    """
    _refuse_file_caches(dataset)
    by_index = _index_plan(dataset)
    if by_index is not None:
        return by_index
    path: list[Dataset] = []
    node = dataset
    while True:
        path.append(node)
        if _reads_files(node) and node._inputs:
            # Its input is the dataset of file names (or, with num_parallel_reads, the
            # interleave over it): shard the names at their source below.
            node = node._inputs[0]
            continue
        if not node._inputs:  # the source (a reader of listed files is one too)
            return _source_plan(path, num_shards)
        if not _independent(node):
            return ShardPlan("output", True, (dataset,))
        node = node._inputs[0]


def _index_plan(dataset: Dataset) -> ShardPlan | None:
    """The ``"index"`` plan: the topmost random-access stage, if a global shuffle is below it
    and only element-independent stages (no readers of file names) are above it."""
    path: list[Dataset] = []
    node = dataset
    while not node._offers_random_access():
        if not _independent(node) or _opens_files(node):
            return None
        path.append(node)
        node = node._inputs[0]
    below = node
    while not below.traits().permutes_by_index:
        if len(below._inputs) != 1:
            return None
        below = below._inputs[0]
    return ShardPlan("index", all(_one_to_one(stage) for stage in path), (*path, node))


def _source_plan(path: list[Dataset], num_shards: int) -> ShardPlan:
    source = path[-1]
    if _reads_files(source):
        files = len(source.filenames or ())
        if files >= num_shards:
            return ShardPlan("file", False, tuple(path), files=files)
    else:
        readers = [i for i, stage in enumerate(path) if _opens_files(stage)]
        if readers and _names(source):
            cardinality = source.cardinality()
            if cardinality < 0 or cardinality >= num_shards:
                return ShardPlan("file", False, tuple(path),
                                 files=cardinality if cardinality >= 0 else None)
            # Fewer files than shards: shard the records the deepest reader yields.
            path = path[:readers[-1] + 1]
    block = _global_batch_block(path)
    if block is not None:
        return ShardPlan("batch", True, tuple(path), block=block)
    return ShardPlan("data", all(_one_to_one(stage) for stage in path[:-1]), tuple(path))


def _names(source: Dataset) -> bool:
    """Whether a source yields scalar strings (file names)."""
    spec = source._element_spec()
    dtype = getattr(spec, "dtype", None)
    return getattr(spec, "shape", None) == () and dtype is not None and dtype.kind in "OSU"


def _global_batch_block(path: list[Dataset]) -> int | None:
    """The batch size if the stages between the source and a ``batch`` are one-to-one."""
    for stage in reversed(path[:-1]):  # from the stage above the source up
        if stage.traits().batches_consecutive:
            return stage.batch_size
        if not _one_to_one(stage):
            return None
    return None


def _refuse_file_caches(dataset: Dataset) -> None:
    for node in graph_nodes(dataset):
        if node.traits().writes_files:
            raise ValueError(
                f"a cache({getattr(node, 'filename', '')!r}) inside the pipeline would be "
                "written by every worker process at once; put cache() after the worker "
                "processes, or cache in memory (cache() with no file name)")


def worker_shard(dataset: Dataset, num_shards: int, index: int,
                 plan: ShardPlan | None = None
                 ) -> tuple[Dataset, dict[str, Callable[[int], int]]]:
    """What worker ``index`` of ``num_shards`` runs: its shard's graph (the policy's warning is
    the consumer's to give, once, not every worker's) and the map from its stages' counts to
    the pipeline's element indices (:func:`shard_element_indices`: errors name the pipeline's
    element), for a worker process or a shard run in the consumer's process.

    Example:
        >>> import feedline as fl
        >>> graph, _ = worker_shard(fl.Dataset.range(6), 2, 1)
        >>> [int(x) for x in graph]
        [1, 3, 5]
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        graph = shard_pipeline(dataset, num_shards, index, plan)
    return graph, shard_element_indices(dataset, num_shards, index, plan)


def shard_pipeline(dataset: Dataset, num_shards: int, index: int,
                   plan: ShardPlan | None = None) -> Dataset:
    """The graph of shard ``index`` of ``num_shards`` (policy from :func:`plan_sharding`).

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(10).map(lambda x: x * 10)
        >>> [int(x) for x in shard_pipeline(ds, 3, 1)]
        [10, 40, 70]
    """
    if num_shards == 1:  # the one shard is the pipeline itself (a feeder runs it as is)
        return dataset
    plan = plan or plan_sharding(dataset, num_shards)
    if plan.policy == "output":
        if num_shards > 1:
            warnings.warn(
                "feedline: this pipeline has a stage that depends on element positions (take, "
                "skip, enumerate, zip, scan, window, unique, ...) or several sources, so each "
                "worker process runs all of it and keeps every n-th element: the output is "
                "exact but no faster. Move that stage after multiprocess() to gain speed.",
                RuntimeWarning, stacklevel=2)
        return ShardDataset(dataset, num_shards, index, name="worker shard")
    *above, bottom = plan.path
    if plan.policy == "index":
        sharded: Dataset = IndexShardDataset(bottom, num_shards, index, full_rounds=False,
                                             name=f"worker index shard {index}")
    elif plan.policy == "file" and _reads_files(bottom):
        sharded = _copy_with(bottom, filenames=bottom.filenames[index::num_shards])
    elif plan.policy == "batch":
        sharded = BlockShardDataset(bottom, num_shards, index, plan.block)
    else:
        sharded = ShardDataset(bottom, num_shards, index, name="worker shard")
    for stage in reversed(above):
        sharded = stage._with_inputs([sharded])
    return sharded


def shard_element_indices(dataset: Dataset, num_shards: int, index: int,
                          plan: ShardPlan | None = None) -> dict[str, Callable[[int], int]]:
    """For the stages of shard ``index`` whose input elements are elements of the unsharded
    pipeline one for one: by stage name, the unsharded pipeline's index of the element the
    stage numbers ``i`` (errors name it, not the shard's own count).

    Those are the stages above the shard up to the first one that is not one-to-one, and,
    under the ``"batch"`` policy (whose blocks are the batches), those above the batch up to
    the next one that is not. A name two stages of the pipeline share is left out (which
    one raised?).

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(100).map(lambda x: x, name="m").batch(4).map(
        ...     lambda b: b, name="n")
        >>> numbering = shard_element_indices(ds, 2, 1)
        >>> numbering["m"](5), numbering["n"](3)
        (13, 7)
    """
    if num_shards == 1:
        return {}
    plan = plan or plan_sharding(dataset, num_shards)
    if plan.policy == "batch":
        block = plan.block
        index_of: Callable[[int], int] | None = (
            lambda i: (i // block) * num_shards * block + index * block + i % block)
    elif plan.policy in ("data", "index"):
        index_of = lambda i: i * num_shards + index
    else:  # "file": no single order to number in; "output": every worker counts them all
        return {}
    names = [getattr(node, "name", None) for node in graph_nodes(dataset)]
    found: dict[str, Callable[[int], int]] = {}
    for stage in reversed(plan.path[:-1]):  # from the stage reading the shard up
        if index_of is None:
            break
        name = getattr(stage, "name", None)
        if isinstance(name, str) and names.count(name) == 1:
            found[name] = index_of
        if plan.policy == "batch" and stage.traits().batches_consecutive:
            index_of = lambda b: b * num_shards + index  # batch b of the shard
        elif not _one_to_one(stage):
            index_of = None
    return found


def _copy_with(node: Dataset, **attributes: Any) -> Dataset:
    clone = node._with_inputs(node._inputs)
    clone.__dict__.update(attributes)
    return clone


class BlockShardDataset(UnaryDataset):
    """Blocks ``index``, ``index + num_shards``, ... of ``block`` consecutive elements.

    Example:
        >>> import feedline as fl
        >>> [int(x) for x in BlockShardDataset(fl.Dataset.range(10), 2, 1, 3)]
        [3, 4, 5, 9]
    """

    TRAITS = POSITIONAL

    def __init__(self, input_dataset: Dataset, num_shards: int, index: int,
                 block: int) -> None:
        super().__init__(input_dataset)
        self.num_shards = num_shards
        self.index = index
        self.block = block

    def cardinality(self) -> int:
        from feedline.core.constants import INFINITE, UNKNOWN

        n = self._inputs[0].cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        period = self.block * self.num_shards
        full, rest = divmod(n, period)
        return full * self.block + min(self.block, max(0, rest - self.index * self.block))

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return _BlockShardIterator(ctx, self._make_input_iterator(ctx), self.num_shards,
                                   self.index, self.block)


class _BlockShardIterator(UnaryIterator):
    OPERATION = "block_shard"

    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, num_shards: int,
                 index: int, block: int) -> None:
        super().__init__(ctx, upstream)
        self._num_shards, self._index, self._block = num_shards, index, block
        self._position = 0

    def __next__(self) -> Any:
        while True:
            position = self._position
            try:
                element = next(self._upstream)
            finally:  # a failing element keeps its position, as in shard()
                self._position = position + 1
            if (position // self._block) % self._num_shards == self._index:
                return element

    def _get_state(self) -> State:
        return self._with_input_state({"position": self._position})

    def _set_state(self, state: State) -> None:
        self._load_input_state(state)
        self._position = int(state["position"])
