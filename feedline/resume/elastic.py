"""Elastic resume: the checkpoint of N replicas of a streaming pipeline, re-dealt to M.

A data-parallel job runs one copy of a pipeline per replica, each reading its own share
(``shard`` or ``distribute``), and checkpoints one state per replica. :func:`merge_states`
turns the N states of one checkpoint into M states, one per replica of the resumed job, so
that every element of the epoch that no replica delivered before the checkpoint is delivered
exactly once after it, and none that was delivered is delivered again.

**What a replica has left.** Walking a replica's pipeline from its output down to its shard,
each stage is one of:

* *pass-through* (``map``, ``filter``, ``batch``, ``prefetch``, ``map_and_batch``): keeps
  its input's order and holds nothing once its read-ahead is rewound. Its state is a
  position (:mod:`feedline.execution.positions`): a snapshot of its input plus the items
  handed out since. Restoring that snapshot into the stage's input and pulling the handed
  out items again (the bounded re-read every restore does) gives the input's state at the
  *delivered point*: it emitted exactly what delivered outputs consumed. A filtered-out
  element is consumed there too; a held one that is filtered out after the re-deal is
  dropped again (the predicate is deterministic), so it changes no delivered multiset.
* *holding*: a ``shuffle`` buffer (its elements, by value, are in the state already) and an
  ``interleave`` above the shard (its open datasets, as positions in them: the records
  after a file's position). What they hold at the delivered point is neither delivered nor
  left in the stream: it goes to the same stage of the resumed replicas, dealt in turn.
* the *shard*: owns input positions (:class:`~feedline.transforms.shard.Ownership`); the
  ones from its position on are unread. All shards of a job split the positions from a
  common start exactly, so from ``A``, the furthest any replica had read, every position
  is unread by all: replica ``j`` of ``M`` owns ``A + j``, ``A + j + M``, ... The owned
  positions below ``A`` not yet read (replicas read at different speeds) are listed and
  dealt one by one. The stream below the shard is the same for every replica (the shard
  sits before any random stage), so the resumed replicas read it from the state of the
  replica that had read least, skipping what they do not own.

Every source element of the epoch is thus, for exactly one old replica, delivered, held by
one stage, or owned and unread; the merge gives each held or unread one to exactly one new
replica, into the stage that held it or the positions it owns, and nothing delivered to any.
Anything else (another stage between output and shard, a stage that hands out of order, an
input error held back, no shard) is refused with a :class:`~feedline.core.errors.
CheckpointError` naming the stage, never approximated. Stages above the shard restart empty
(fresh read-ahead, a fresh shuffle generator of the saved epoch): the order after the
resume differs from any run on N replicas; the multiset does not.

The merged states are ordinary states of the M-replica pipeline: the re-deal is an optional
key of the shard's state (states without it are the version-1 layout, and still load), so a
resumed job checkpoints and merges again as often as it likes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from feedline.core import pipeline_state
from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError
from feedline.core.fingerprint import PipelineFingerprint, declared_types
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.state_codec import declared_types_in_use
from feedline.optimize import optimize
from feedline.optimize.map_fusion import FusedInlineDataset
from feedline.pipeline import PipelineIterator
from feedline.transforms.batch import BatchDataset, pull_batch
from feedline.transforms.filter import FilterDataset
from feedline.transforms.interleave import InterleaveDataset
from feedline.transforms.map import MapDataset
from feedline.transforms.map_and_batch import MapAndBatchDataset
from feedline.transforms.prefetch import PrefetchDataset
from feedline.transforms.shard import REDEAL_KEY, Ownership, ShardDataset
from feedline.transforms.shuffle import ShuffleDataset
from feedline.transforms.with_options import OptionsDataset

ReplicaPipeline = Callable[[int, int], Dataset]
"""Builds replica ``index`` of ``num_replicas``: ``pipeline(num_replicas, index)``."""

_PASS_THROUGH = (MapDataset, FilterDataset, BatchDataset, PrefetchDataset, MapAndBatchDataset,
                 FusedInlineDataset)
_HOLDING = (ShuffleDataset, InterleaveDataset)
_POSITION_KEYS = ("at", "next", "done", "errors")


@dataclasses.dataclass
class _Remainder:
    """What one replica has not delivered: held items per holding stage (by depth from the
    output), and the shard's unread positions over its input stream."""

    held: dict[int, list[Any]]
    epochs: dict[int, int]
    owner: Ownership
    position: int
    stream: State


def merge_states(states: Sequence[State], num_replicas: int,
                 pipeline: ReplicaPipeline) -> list[State]:
    """Re-deal the checkpoint of N replicas (one state each) to ``num_replicas`` replicas.

    Args:
        states: ``state_dict()`` of every replica of one checkpoint, replica ``i`` at place
            ``i`` (their number N is the replica count they ran with).
        num_replicas: M, the replica count of the resumed job (any, N included).
        pipeline: How replica ``index`` of ``num_replicas`` is built:
            ``pipeline(num_replicas, index) -> Dataset``, with a ``shard(num_replicas,
            index)`` (``shard(1, 0)`` for one replica) or ``distribute(InputContext(...))``
            (which adds no shard for one replica: shard explicitly to go to or from one).

    Returns:
        M states: replica ``j`` loads the ``j``-th into an iterator of
        ``pipeline(num_replicas, j)``. Together they deliver exactly the elements of the
        epoch no replica delivered before the checkpoint.

    Raises:
        CheckpointError: A state is damaged or of another pipeline, the states are not one
            checkpoint of every replica, or a stage holds what cannot be re-dealt exactly
            (the message names it).

    Example:
        >>> import feedline as fl
        >>> def replica(n, i):  # each replica builds its own pipeline, as in its process
        ...     return fl.Dataset.range(10).shard(n, i).shuffle(4, seed=1).batch(2)
        >>> its = [iter(replica(2, i)) for i in range(2)]
        >>> seen = [int(v) for it in its for v in next(it)]
        >>> merged = merge_states([it.state_dict() for it in its], 3, replica)
        >>> for j, state in enumerate(merged):
        ...     with iter(replica(3, j)) as it:
        ...         it.load_state_dict(state)
        ...         seen += [int(v) for batch in it for v in batch]
        >>> sorted(seen)
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """
    if not callable(pipeline):
        raise TypeError("merge_states(pipeline) must be a function (num_replicas, index) -> "
                        f"Dataset, got {type(pipeline).__name__}")
    if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
        raise ValueError(f"merge_states(num_replicas) must be an int >= 1, got {num_replicas!r}")
    if not states:
        raise ValueError("merge_states() needs the state of every replica, got none")
    remainders = [_remainder(pipeline(len(states), i), state) for i, state in enumerate(states)]
    shares = _deal(remainders, num_replicas)
    return [_resumed_state(pipeline(num_replicas, j), share) for j, share in enumerate(shares)]


def _stage(node: Dataset) -> str:
    return f"{getattr(node, 'name', None) or type(node).__name__} ({type(node).__name__})"


def _chain(dataset: Dataset) -> tuple[IteratorContext, Dataset]:
    """The context and graph the pipeline's iterator runs (states follow the rewritten one)."""
    options = dataset.options()
    return IteratorContext(options=options), optimize(dataset, options)


def _remainder(dataset: Dataset, sealed: State) -> _Remainder:
    """Walk one replica's state from the output down to its shard (module docstring)."""
    root = pipeline_state.open_sealed(sealed, PipelineFingerprint.of(dataset))
    ctx, top = _chain(dataset)
    stages, shard = _stages_above_shard(top)
    held: dict[int, list[Any]] = {}
    epochs: dict[int, int] = {}
    state = root
    with declared_types_in_use(declared_types(dataset)):
        for depth, node in enumerate(stages):
            if isinstance(node, _PASS_THROUGH):
                state = _delivered_input(node, state, ctx)
                continue
            if isinstance(node, ShuffleDataset):
                held[depth] = list(state["buffer"])
                epochs[depth] = int(state["epoch"])
            else:
                held[depth] = _open_parts(node, state)
            state = state["input"]
    owner = Ownership.from_state(state[REDEAL_KEY]) if REDEAL_KEY in state else \
        Ownership((), 0, shard.num_shards, shard.index)
    return _Remainder(held, epochs, owner, int(state["position"]), state["input"])


def _adds_no_stage(node: Dataset) -> bool:
    """Whether ``node``'s iterator is its input's (it has no state of its own)."""
    return isinstance(node, OptionsDataset) or (
        isinstance(node, PrefetchDataset) and node.buffer_size == 0)


def _stages_above_shard(top: Dataset) -> tuple[list[Dataset], ShardDataset]:
    """The stages from the output down to the shard (those that add no stage left out; a
    stage's place in the list is its depth), and the shard. Refuses any other stage."""
    stages: list[Dataset] = []
    node = top
    while not isinstance(node, ShardDataset):
        if not _adds_no_stage(node):
            if not isinstance(node, _PASS_THROUGH + _HOLDING):
                raise _refusal(
                    node, "it is not one elastic resume can re-deal (between the output and "
                    "the shard: map, filter, batch, prefetch, shuffle, interleave)"
                    if node._inputs else "the pipeline has no shard stage (each replica reads "
                    "everything; for one replica, shard(1, 0))")
            stages.append(node)
        node = node._inputs[0]
    return stages, node


def _refusal(node: Dataset, why: str) -> CheckpointError:
    return CheckpointError(f"elastic resume: cannot re-deal the {_stage(node)} stage: {why}")


def _delivered_input(node: Dataset, state: State, ctx: IteratorContext) -> State:
    """The state of ``node``'s input once it has emitted exactly what ``node`` handed out.

    A position whose snapshot is older than the hand-out is replayed: the input is restored
    to the snapshot and pulled for the items handed out since (what every restore re-reads).
    """
    if isinstance(node, FusedInlineDataset):
        # Inline maps and filters run as one stage and write the chain's states, one level
        # per fused stage, each at its input's position (inline: nothing read ahead).
        for _ in node.stages:
            if _holds(state):
                raise _refusal(node, "a fused inline stage's state says it read ahead")
            state = state["input"]
        return state
    if not _holds(state):
        return state["input"]
    if state["done"] or state["errors"]:
        raise _refusal(node, "it handed items out of order (deterministic=False) or holds an "
                       "input error back; re-deal a checkpoint of a deterministic pipeline")
    count = int(state["next"]) - int(state["at"])
    upstream = node._inputs[0]._make_iterator(ctx)
    try:
        upstream.load_state_dict(state["input"])
        _pull_items(node, upstream, count)
        return upstream.state_dict()
    finally:
        upstream.close()


def _holds(state: State) -> bool:
    """Whether a stage's state is a position with items handed out since its snapshot."""
    return all(key in state for key in _POSITION_KEYS) and (
        state["at"] != state["next"] or bool(state["done"]) or bool(state["errors"]))


def _pull_items(node: Dataset, upstream: DatasetIterator, count: int) -> None:
    """Pull ``count`` of ``node``'s items (a batch's elements for ``batch``, else one
    element) from ``upstream``; an error is an item too, as positions count it."""
    for _ in range(count):
        try:
            if isinstance(node, BatchDataset):
                pull_batch(upstream, node.batch_size, node.drop_remainder)
            else:
                next(upstream)
        except StopIteration:
            return
        except Exception:  # noqa: BLE001, S112 - an error handed out in its place: consumed
            continue


def _open_parts(node: Dataset, state: State) -> list[State]:
    """The datasets an interleave has open or opened ahead: each its input element and the
    position in it (the records from there on are the ones not yet read)."""
    parts = [slot for slot in state["slots"] if slot is not None]
    for future in state["futures"]:
        if "input_error" in future:
            raise _refusal(node, "it holds an input error read ahead")
        parts.append(future)
    return parts


def _deal(remainders: list[_Remainder], num_replicas: int) -> list[_Remainder]:
    """Each new replica's share: held items in turn, unread positions as a new ownership."""
    owners = [r.owner for r in remainders]
    starts = {(o.tail_start, o.tail_step) for o in owners}
    if len(starts) != 1 or sorted(o.tail_index for o in owners) != list(range(len(owners))) \
            or owners[0].tail_step != len(owners):
        raise CheckpointError(
            f"elastic resume: the {len(owners)} states are not one checkpoint of every replica "
            "of one job (their shards do not split the input between them: "
            f"{[o.to_state() for o in owners]})")
    depths = remainders[0].held.keys()
    for r in remainders:
        if r.held.keys() != depths:
            raise CheckpointError("elastic resume: the states come from different pipelines")
    epochs = {depth: {r.epochs[depth] for r in remainders} for depth in remainders[0].epochs}
    for seen in epochs.values():
        if len(seen) != 1:
            raise CheckpointError(f"elastic resume: the replicas' shuffles were in different "
                                  f"epochs {sorted(seen)}: not one checkpoint")
    frontier = max(max(o.tail_start, r.position) for o, r in zip(owners, remainders))
    unread = sorted(p for o, r in zip(owners, remainders)
                    for p in o.remaining(r.position, frontier))
    first = min(remainders, key=lambda r: r.position)
    shares = []
    for j in range(num_replicas):
        held = {depth: [item for r in remainders for item in r.held[depth]]
                [j::num_replicas] for depth in depths}
        owner = Ownership(tuple(unread[j::num_replicas]), frontier, num_replicas, j)
        shares.append(_Remainder(held, {d: next(iter(e)) for d, e in epochs.items()}, owner,
                                 first.position, first.stream))
    return shares


def _resumed_state(dataset: Dataset, share: _Remainder) -> State:
    """A fresh state of ``dataset`` with ``share`` put into its holding stages and shard."""
    with PipelineIterator(dataset) as fresh:
        root = fresh.state_dict()["root"]
    stages, _ = _stages_above_shard(_chain(dataset)[1])
    state = root
    for depth, node in enumerate(stages):
        if isinstance(node, _HOLDING) != (depth in share.held):
            raise CheckpointError(f"elastic resume: replica pipelines differ at {_stage(node)}")
        if isinstance(node, ShuffleDataset):
            state["buffer"] = share.held[depth]
            state["epoch"] = share.epochs[depth]
        elif isinstance(node, InterleaveDataset):
            state["futures"] = share.held[depth]
        for _ in range(len(node.stages) if isinstance(node, FusedInlineDataset) else 1):
            state = state["input"]
    state["position"] = share.position
    state["input"] = share.stream
    state[REDEAL_KEY] = share.owner.to_state()
    return pipeline_state.seal(root, PipelineFingerprint.of(dataset))
