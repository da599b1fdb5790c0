"""``Dataset.distribute``: this input pipeline's share of a data-parallel job.

Every input pipeline of a job (one per process, usually) builds the same pipeline and calls
``ds.distribute(input_context)``; each gets a disjoint share, and together they read every
element once per epoch. The :class:`~feedline.core.options.AutoShardPolicy` says how:

``DATA`` on a pipeline with random access (``range``, ``from_tensor_slices``, TFRecord files,
and ``map``/``batch``/``global_shuffle``... over them)
    The topmost random-access stage is read by index (:mod:`feedline.distribute.index_shard`):
    pipeline ``i`` of ``n`` reads positions ``i``, ``i + n``, ... and only those. Every
    pipeline gets exactly ``len // n`` elements per epoch (the ``len % n`` left over are
    dropped), and a checkpoint restores on any number of pipelines (elastic resume).
``DATA`` otherwise
    As tf.data: elements ``i``, ``i + n``, ... of the source, right after it (or, when a
    stage depends on element positions -- ``take``, ``zip``, ``enumerate`` ... -- of the
    output). Each pipeline still runs every stage on the elements it keeps only.
``FILE``
    As tf.data: pipeline ``i`` reads files ``i``, ``i + n``, ... of the file-listing source
    (a reader given a list of names, or ``list_files``/names followed by ``interleave``);
    a ``ValueError`` if there is none, or fewer files than pipelines.
``AUTO``
    ``DATA`` by index when the pipeline has random access, else ``FILE`` when it reads
    enough files, else ``DATA``. (tf.data tries ``FILE`` first; reading by index is preferred
    here because it gives equal shares, exact epochs and elastic checkpoints, which file
    sharding cannot.)
``OFF``
    Every pipeline reads everything.

**Equal steps.** A data-parallel step needs a batch from every replica; a replica whose data
ends first leaves the others waiting forever in their all-reduce. So every pipeline gets the
same number of elements whenever that number can be known: by index (above), or, when the
shares' cardinalities are known from the graph, by ending every share at the smallest
(``take``; the extra elements of the larger shares are dropped). When it cannot be known
(files of unknown record counts, ``filter``), :func:`equal_shares` says so and the framework
adapters (``feedline.torch.Loader``) end the epoch on every rank at the step where the first
rank runs out, agreeing with one tiny all-reduce per step.
"""

from __future__ import annotations

import dataclasses

from feedline.core.constants import INFINITE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.input_context import InputContext
from feedline.core.options import AutoShardPolicy
from feedline.core.random_access import random_access_blocker
from feedline.core.registry import operation
from feedline.distribute.autoshard import (
    ShardPlan,
    _names,
    _refuse_file_caches,
    plan_sharding,
    shard_pipeline,
)
from feedline.distribute.index_shard import IndexShardDataset


@operation("distribute")
def distribute(dataset: Dataset, input_context: InputContext,
               policy: AutoShardPolicy | int | None = None) -> Dataset:
    """This input pipeline's share of ``dataset`` (see the module doc for the policies).

    Args:
        dataset: The whole pipeline, as every input pipeline builds it.
        input_context: Which pipeline this is, of how many.
        policy: An :class:`AutoShardPolicy`; ``None`` takes the pipeline's
            ``Options.distribute.auto_shard_policy`` (``AUTO`` by default).

    Raises:
        ValueError: ``FILE`` without a file-listing source or with fewer files than
            pipelines; a ``cache(filename)`` every pipeline would write.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(10).map(lambda x: x * 10)
        >>> ctx = fl.InputContext(num_input_pipelines=3, input_pipeline_id=1)
        >>> [int(x) for x in distribute(ds, ctx)]
        [10, 40, 70]
    """
    if not isinstance(input_context, InputContext):
        raise TypeError(f"distribute() needs a feedline.InputContext, got "
                        f"{type(input_context).__name__}")
    if policy is None:
        policy = dataset.options().distribute.auto_shard_policy
    try:
        policy = AutoShardPolicy(policy)
    except ValueError:
        raise ValueError(f"distribute(policy) must be an AutoShardPolicy, got {policy!r}") from None
    n, index = input_context.num_input_pipelines, input_context.input_pipeline_id
    if policy == AutoShardPolicy.OFF or (n == 1 and not dataset._offers_random_access()):
        return dataset
    if n > 1:
        _refuse_file_caches(dataset)
    if policy in (AutoShardPolicy.AUTO, AutoShardPolicy.DATA):
        # Even one pipeline reads a random-access pipeline by index: its checkpoints then
        # resume on any number of pipelines.
        by_index = _shard_by_index(dataset, n, index)
        if by_index is not None:
            return by_index
    if n == 1:
        return dataset
    plan = plan_sharding(dataset, n)
    if policy == AutoShardPolicy.FILE:
        if plan.policy != "file":
            raise ValueError(_no_file_sharding(dataset, n))
        return shard_pipeline(dataset, n, index, plan)
    if policy == AutoShardPolicy.AUTO and plan.policy == "file":
        return _equalized(shard_pipeline(dataset, n, index, plan),
                          [shard_pipeline(dataset, n, i, plan) for i in range(n)])
    data_plan = plan if plan.policy == "output" else ShardPlan("data", False, _records(plan.path))
    shares = [_shard_quietly(dataset, n, i, data_plan) for i in range(n)]
    return _equalized(shares[index], shares)


def _records(path: tuple[Dataset, ...]) -> tuple[Dataset, ...]:
    """The path down to where records (not file names) are produced: DATA shards records."""
    if path[-1].traits().reader == "files":
        return path
    readers = [i for i, stage in enumerate(path) if stage.traits().reader is not None]
    return path[:readers[-1] + 1] if readers and _names(path[-1]) else path


def _shard_quietly(dataset: Dataset, n: int, index: int, plan: ShardPlan) -> Dataset:
    import warnings

    with warnings.catch_warnings():
        # The "output" plan's warning speaks of worker processes; here it is tf.data's DATA.
        warnings.simplefilter("ignore", RuntimeWarning)
        return shard_pipeline(dataset, n, index, plan)


def _shard_by_index(dataset: Dataset, n: int, index: int) -> Dataset | None:
    """``dataset`` with an index shard on its topmost random-access stage, if it has one."""
    above: list[Dataset] = []
    node = dataset
    while random_access_blocker(node) is not None:
        if len(node._inputs) != 1 or node.traits().reader is not None:
            # Below a reader are file names: sharding them by index in full rounds would
            # drop whole files; FILE or DATA shard those.
            return None
        above.append(node)
        node = node._inputs[0]
    sharded: Dataset = IndexShardDataset(node, n, index)
    for stage in reversed(above):
        sharded = stage._with_inputs([sharded])
    return sharded


def _equalized(share: Dataset, shares: list[Dataset]) -> Dataset:
    """``share`` ended at the smallest share's size when every size is known."""
    sizes = [s.cardinality() for s in shares]
    if any(size in (UNKNOWN, INFINITE) for size in sizes) or len(set(sizes)) == 1:
        return share
    return share.take(min(sizes))


def equal_shares(dataset: Dataset, input_context: InputContext,
                 policy: AutoShardPolicy | int | None = None) -> bool:
    """Whether every pipeline's share of ``dataset`` has the same, known number of elements.

    When it is ``False`` a training loop must agree on when the epoch ends (the torch
    adapter's ``even_steps`` does), or a replica may wait forever for the others.

    Example:
        >>> import feedline as fl
        >>> ctx = fl.InputContext(2, 0, 2)
        >>> equal_shares(fl.Dataset.range(7), ctx), equal_shares(fl.Dataset.range(7).filter(bool), ctx)
        (True, False)
    """
    sizes = {_known_length(distribute(dataset, InputContext(
        input_context.num_input_pipelines, i, input_context.num_replicas_in_sync), policy))
        for i in range(input_context.num_input_pipelines)}
    return len(sizes) == 1 and sizes.pop() >= 0


def _known_length(share: Dataset) -> int:
    """The share's length from the graph, or from its random-access reader (TFRecord
    indexes); ``UNKNOWN`` when neither knows it."""
    n = share.cardinality()
    if n == UNKNOWN and share._offers_random_access():
        return len(share)
    return n


def _no_file_sharding(dataset: Dataset, n: int) -> str:
    node, files = dataset, None
    while True:
        reader = node.traits().reader
        if reader == "files":
            files = len(node.filenames) if node.filenames is not None else None
            if node._inputs:
                node = node._inputs[0]
                continue
            break
        if not node._inputs:
            if _names(node) and files is None:
                files = node.cardinality()
            break
        if reader == "function" and files is None:
            files = -2  # a reader of names may sit under it
        node = node._inputs[0]
    if files is None:
        return ("AutoShardPolicy.FILE: this pipeline reads no list of files (a reader given "
                "file names, or list_files followed by interleave); use AutoShardPolicy.DATA")
    if files >= 0:
        return (f"AutoShardPolicy.FILE: the pipeline reads {files} file(s) but there are {n} "
                "input pipelines; each needs at least one file. Use more (smaller) files or "
                "AutoShardPolicy.DATA")
    return ("AutoShardPolicy.FILE: the pipeline's file list could not be sharded (its stages "
            "depend on element positions, or the number of files is unknown); use "
            "AutoShardPolicy.DATA")


@dataclasses.dataclass(frozen=True)
class StepSchedule:
    """Steps of a data-parallel epoch, and where a global step falls.

    Attributes:
        num_elements: Elements in one epoch of the whole dataset.
        global_batch_size: Elements all replicas take together per step.
        drop_remainder: Whether a last, smaller global batch is dropped (it is whenever the
            shares are cut to full rounds, as by index sharding).

    Example:
        >>> schedule = StepSchedule(num_elements=1000, global_batch_size=64)
        >>> schedule.steps_per_epoch, schedule.locate(40), schedule.elements_before(40)
        (15, (2, 10), 2560)
    """

    num_elements: int
    global_batch_size: int
    drop_remainder: bool = True

    def __post_init__(self) -> None:
        if self.num_elements < 0:
            raise ValueError(f"num_elements must be >= 0, got {self.num_elements}")
        if self.global_batch_size < 1:
            raise ValueError(f"global_batch_size must be >= 1, got {self.global_batch_size}")

    @property
    def steps_per_epoch(self) -> int:
        """Steps in one epoch."""
        whole, rest = divmod(self.num_elements, self.global_batch_size)
        return whole + (1 if rest and not self.drop_remainder else 0)

    def locate(self, global_step: int) -> tuple[int, int]:
        """``(epoch, step within the epoch)`` of a global step counted from 0."""
        if global_step < 0:
            raise ValueError(f"global_step must be >= 0, got {global_step}")
        if self.steps_per_epoch == 0:
            raise ValueError("an epoch of this schedule has no step")
        return divmod(global_step, self.steps_per_epoch)

    def elements_before(self, global_step: int) -> int:
        """Elements the whole job consumed (epochs counted whole) before ``global_step``."""
        epoch, step = self.locate(global_step)
        per_epoch = (self.num_elements if not self.drop_remainder
                     else self.steps_per_epoch * self.global_batch_size)
        return epoch * per_epoch + min(step * self.global_batch_size, self.num_elements)

    @classmethod
    def for_context(cls, num_elements: int, per_replica_batch_size: int,
                    input_context: InputContext) -> StepSchedule:
        """The schedule of ``input_context``'s replicas each taking ``per_replica_batch_size``.

        Example:
            >>> import feedline as fl
            >>> StepSchedule.for_context(1000, 16, fl.InputContext(2, 0, 4)).steps_per_epoch
            15
        """
        return cls(num_elements, per_replica_batch_size * input_context.num_replicas_in_sync)


def steps_per_epoch(num_elements: int, global_batch_size: int,
                    drop_remainder: bool = True) -> int:
    """Steps in one epoch of ``num_elements`` taken ``global_batch_size`` at a time.

    Example:
        >>> steps_per_epoch(1000, 64), steps_per_epoch(1000, 64, drop_remainder=False)
        (15, 16)
    """
    return StepSchedule(num_elements, global_batch_size, drop_remainder).steps_per_epoch

