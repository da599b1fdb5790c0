"""Elastic resume: the checkpoint of N replicas of a streaming pipeline, re-dealt to M.

A data-parallel job runs one copy of a pipeline per replica, each reading its own share
(``shard`` or ``distribute``), and checkpoints one state per replica. :func:`merge_states`
turns the N states of one checkpoint into M states, one per replica of the resumed job, so
that every element of the epoch that no replica delivered before the checkpoint is delivered
exactly once after it, and none that was delivered is delivered again.

**What a replica has left.** Walking a replica's pipeline from its output down to its
shard (or to a mixture, whose every input is walked the same way), each stage is one of:

* *pass-through* (``map``, ``filter``, ``batch``, ``padded_batch``, ``prefetch``,
  ``map_and_batch``): keeps
  its input's order and holds nothing once its read-ahead is rewound. Its state is a
  position (:mod:`feedline.execution.positions`): a snapshot of its input plus the items
  handed out since. Restoring that snapshot into the stage's input and pulling the handed
  out items again (the bounded re-read every restore does) gives the input's state at the
  *delivered point*: it emitted exactly what delivered outputs consumed. A filtered-out
  element is consumed there too; a held one that is filtered out after the re-deal is
  dropped again (the predicate is deterministic), so it changes no delivered multiset.
* *holding*: a ``shuffle`` buffer (its elements: in the state, or read again from the
  snapshot its positions name), an
  ``interleave`` above the shard (its open datasets, as positions in them: the records
  after a file's position) and a ``pack_sequences`` packer (its rows, open ones closed as
  they stand). What they hold at the delivered point is neither delivered nor left in the
  stream: it goes to the same stage of the resumed replicas, dealt in turn.
* a *mixture* (``sample_from_datasets`` with constant weights): holds nothing; each input
  is its own pipeline with its own shard, re-dealt on its own. The resumed replicas draw
  with the same weights from what each source has left; an input that had ended stays
  ended.
* the *shard*: owns input positions (:class:`~feedline.transforms.shard.Ownership`: a few
  listed positions and endless progressions, ``shard(n, i)`` owning ``i, i + n, ...``);
  those from its position on are unread. When the replicas' progressions have one step
  and one residue each, they cover every position from some ``F`` on (each residue from
  its first unread position), and nothing from ``F`` on is read: replica ``j`` of ``M``
  owns ``F + j, F + j + M, ...``, and the unread positions below ``F`` are listed and
  dealt one by one. When they do not (a mixture's source that ended on some replicas:
  where its stream ends is in no state), each progression goes whole to one new replica.
  The stream below the shard is the same for every replica (the shard sits before any
  random stage), so the resumed replicas read it from the state of the replica that had
  read least, skipping what they do not own.

Every source element of the epoch is thus, for exactly one old replica, delivered, held by
one stage, or owned and unread; the merge gives each held or unread one to exactly one new
replica, into the stage that held it or the positions it owns, and nothing delivered to any.
Anything else (another stage between output and shard, a stage that hands out of order, an
input error held back, no shard, shares that overlap) is refused with a
:class:`~feedline.core.errors.CheckpointError` naming the stage, never approximated. Stages
above the shard restart empty (fresh read-ahead, a fresh shuffle generator of the saved
epoch): the order after the resume differs from any run on N replicas; the multiset does
not. A ``batch(drop_remainder=True)`` still drops each resumed replica's last partial batch.

The merged states are ordinary states of the M-replica pipeline: the re-deal is an optional
key of the shard's state (states without it are the version-1 layout, and still load), so a
resumed job checkpoints and merges again as often as it likes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from feedline.core import pipeline_state
from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError
from feedline.core.fingerprint import DeclaredTypes, PipelineFingerprint, declared_types
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.state_codec import declared_types_in_use
from feedline.optimize import optimize
from feedline.optimize.map_fusion import FusedInlineDataset
from feedline.pipeline import PipelineIterator
from feedline.sources.sample import SampleFromDatasetsDataset
from feedline.transforms.batch import BatchDataset, pull_batch
from feedline.transforms.filter import FilterDataset
from feedline.transforms.interleave import InterleaveDataset
from feedline.transforms.map import MapDataset
from feedline.transforms.map_and_batch import MapAndBatchDataset
from feedline.transforms.pack_sequences import PackSequencesDataset, held_rows
from feedline.transforms.padded_batch import PaddedBatchDataset
from feedline.transforms.prefetch import PrefetchDataset
from feedline.transforms.shard import REDEAL_KEY, Ownership, Progression, ShardDataset
from feedline.transforms.shuffle import POSITIONS_KEY, ShuffleDataset, buffer_by_value
from feedline.transforms.with_options import OptionsDataset

ReplicaPipeline = Callable[[int, int], Dataset]
"""Builds replica ``index`` of ``num_replicas``: ``pipeline(num_replicas, index)``."""

_PASS_THROUGH = (MapDataset, FilterDataset, BatchDataset, PaddedBatchDataset, PrefetchDataset,
                 MapAndBatchDataset, FusedInlineDataset)
_HOLDING = (ShuffleDataset, InterleaveDataset, PackSequencesDataset)
_POSITION_KEYS = ("at", "next", "done", "errors")


@dataclasses.dataclass
class _Unread:
    """A shard's unread positions over its input stream, and where that stream stands."""

    owner: Ownership
    position: int
    stream: State


@dataclasses.dataclass
class _Left:
    """What one replica has not delivered (once dealt: one new replica's share).

    ``held``: per holding stage (by depth from the output), its state fields and their
    items; ``epochs``: the epoch of each reshuffling stage; then either ``unread`` (the
    chain ends at a shard) or ``sources`` (it ends at a mixture: each input's own
    remainder, ``None`` for one that had ended).
    """

    held: dict[int, dict[str, list[Any]]]
    epochs: dict[int, int | None]
    unread: _Unread | None = None
    sources: list[_Left | None] | None = None


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
    left = [_replica_remainder(pipeline(len(states), i), state) for i, state in enumerate(states)]
    shares = _deal(left, num_replicas)
    return [_resumed_state(pipeline(num_replicas, j), share) for j, share in enumerate(shares)]


def _stage(node: Dataset) -> str:
    return f"{getattr(node, 'name', None) or type(node).__name__} ({type(node).__name__})"


def _chain(dataset: Dataset) -> tuple[IteratorContext, Dataset]:
    """The context and graph the pipeline's iterator runs (states follow the rewritten one)."""
    options = dataset.options()
    return IteratorContext(options=options), optimize(dataset, options)


class _DeclaredWhenNeeded(DeclaredTypes):
    """``declared_types(dataset)``, walked for only when a state names a namedtuple.

    A state holding none (most do) never needs them: this saves a second walk of the
    graph per replica, next to the fingerprint's.
    """

    def __init__(self, dataset: Dataset) -> None:
        super().__init__()
        self._dataset: Dataset | None = dataset

    def namedtuple(self, name: str, fields: list[str] | None) -> type:
        if self._dataset is not None:
            self.namedtuples.update(declared_types(self._dataset).namedtuples)
            self._dataset = None
        return super().namedtuple(name, fields)


def _replica_remainder(dataset: Dataset, sealed: State) -> _Left:
    root = pipeline_state.open_sealed(sealed, PipelineFingerprint.of(dataset))
    ctx, top = _chain(dataset)
    with declared_types_in_use(_DeclaredWhenNeeded(dataset)):
        return _remainder(top, root, ctx)


def _remainder(top: Dataset, state: State, ctx: IteratorContext) -> _Left:
    """Walk one replica's state from ``top`` down to its shards (module docstring)."""
    stages, bottom = _stages(top)
    left = _Left({}, {})
    for depth, node in enumerate(stages):
        if isinstance(node, _PASS_THROUGH):
            state = _delivered_input(node, state, ctx)
            continue
        if isinstance(node, ShuffleDataset):
            # A buffer held by position is read again: its elements are what is dealt.
            state = buffer_by_value(node, state, ctx)
            left.epochs[depth] = int(state["epoch"])
        left.held[depth] = _held(node, state)
        state = state["input"]
    if isinstance(bottom, ShardDataset):
        owner = Ownership.from_state(state[REDEAL_KEY]) if REDEAL_KEY in state else \
            Ownership.stride(bottom.num_shards, bottom.index)
        left.unread = _Unread(owner, int(state["position"]), state["input"])
        return left
    left.epochs[len(stages)] = state["epoch"]
    left.sources = [None if saved is None else _remainder(source, saved, ctx)
                    for source, saved in zip(bottom._inputs, state["inputs"])]
    return left


def _adds_no_stage(node: Dataset) -> bool:
    """Whether ``node``'s iterator is its input's (it has no state of its own)."""
    return isinstance(node, OptionsDataset) or (
        isinstance(node, PrefetchDataset) and node.buffer_size == 0)


def _stages(top: Dataset) -> tuple[list[Dataset], Dataset]:
    """The stages from ``top`` down to the shard or mixture below them (those that add no
    stage left out; a stage's place in the list is its depth), and that shard or mixture.
    Refuses any other stage."""
    stages: list[Dataset] = []
    node = top
    while not isinstance(node, ShardDataset | SampleFromDatasetsDataset):
        if not _adds_no_stage(node):
            if not isinstance(node, _PASS_THROUGH + _HOLDING):
                raise _refusal(
                    node, "it is not one elastic resume can re-deal (between the output and "
                    "the shard: map, filter, batch, padded_batch, prefetch, shuffle, "
                    "interleave, pack_sequences, sample_from_datasets)" if node._inputs else
                    "the pipeline has no shard stage (each replica reads everything; for "
                    "one replica, shard(1, 0))")
            stages.append(node)
        node = node._inputs[0]
    if isinstance(node, SampleFromDatasetsDataset):
        if node.weights_dataset is not None:
            raise _refusal(node, "its weights are a dataset: the mixing sequence of the "
                           "resumed replicas cannot continue it exactly")
        if node.stop_on_empty_dataset:
            raise _refusal(node, "stop_on_empty_dataset=True ends the epoch at the first "
                           "source to run out, which depends on the replica count")
    return stages, node


def _held(node: Dataset, state: State) -> dict[str, list[Any]]:
    """What a holding stage holds, by the state field it goes back into."""
    if isinstance(node, ShuffleDataset):
        return {"buffer": list(state["buffer"])}
    if isinstance(node, InterleaveDataset):
        return {"futures": _open_parts(node, state)}
    return {"ready": held_rows(state, node.padding_value)}


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


def _deal(lefts: list[_Left | None], num_replicas: int) -> list[_Left | None]:
    """Each new replica's share: held items in turn, unread positions as new ownerships.

    ``None`` is a mixture's input that had ended on that replica: nothing of it is left.
    """
    alive = [left for left in lefts if left is not None]
    if not alive:
        return [None] * num_replicas
    first = alive[0]
    for left in alive:
        if left.held.keys() != first.held.keys() or (left.unread is None) != (
                first.unread is None):
            raise CheckpointError("elastic resume: the states come from different pipelines")
    epochs = {}
    for depth in first.epochs:
        seen = {left.epochs[depth] for left in alive}
        if len(seen) != 1:
            raise CheckpointError(f"elastic resume: the replicas' stages at depth {depth} were "
                                  f"in different epochs {sorted(seen)}: not one checkpoint")
        epochs[depth] = seen.pop()
    shares = [_Left({}, dict(epochs)) for _ in range(num_replicas)]
    for depth, fields in first.held.items():
        for field in fields:
            items = [item for left in alive for item in left.held[depth][field]]
            for j, share in enumerate(shares):
                share.held.setdefault(depth, {})[field] = items[j::num_replicas]
    if first.unread is not None:
        unread = _deal_unread([None if left is None else left.unread for left in lefts],
                              num_replicas)
        for share, part in zip(shares, unread):
            share.unread = part
        return shares
    columns = [_deal([None if left is None else left.sources[k] for left in lefts],
                     num_replicas) for k in range(len(first.sources))]
    for j, share in enumerate(shares):
        share.sources = [column[j] for column in columns]
    return shares


def _deal_unread(parts: list[_Unread | None], num_replicas: int) -> list[_Unread]:
    """New ownerships of the positions the replicas left unread (``None``: a replica whose
    stream had ended, so that it had read all it owned).

    When the replicas' progressions together cover every position from the furthest start
    on (every replica still reading, as the stride of ``shard`` and every re-deal of it
    make them), the new replicas split those positions in turn, from there, and the unread
    ones before it one by one: equal shares. Otherwise (a mixture's source that ended on
    some replicas: where its stream ends is in no state) each progression goes whole to one
    new replica, exact but not even.
    """
    alive = [part for part in parts if part is not None]
    finite: list[int] = []
    tails: list[Progression] = []
    for part in alive:
        listed, progressions = part.owner.unread(part.position)
        finite += listed
        tails += progressions
    _check_disjoint(finite, tails)
    steps = {step for _, step in tails}
    if len(alive) == len(parts) and len(steps) == 1 and len(tails) == next(iter(steps)):
        # From here on every position is in some progression, after its first unread one
        # (one of each residue, all unread from their starts), and past every listed one.
        step = len(tails)
        frontier = max([start - step + 1 for start, _ in tails] + [p + 1 for p in finite])
        for start, step in tails:
            finite += range(start, frontier, step)
        new_tails = [((frontier + j, num_replicas),) for j in range(num_replicas)]
    else:
        new_tails = [tuple(tails[j::num_replicas]) for j in range(num_replicas)]
    finite.sort()
    least = min(alive, key=lambda part: part.position)
    return [_Unread(Ownership(tuple(finite[j::num_replicas]), new_tails[j]), least.position,
                    least.stream) for j in range(num_replicas)]


def _check_disjoint(finite: list[int], tails: list[Progression]) -> None:
    """Refuse states whose shares overlap: they are not one checkpoint of one job."""
    # Two endless progressions meet iff their starts agree modulo the gcd of their steps.
    meet = any((a - b) % math.gcd(k, m) == 0
               for i, (a, k) in enumerate(tails) for b, m in tails[i + 1:])
    if meet or len(set(finite)) != len(finite) or any(
            p >= start and (p - start) % step == 0 for p in finite for start, step in tails):
        raise CheckpointError(
            "elastic resume: the states are not one checkpoint of every replica of one job: "
            f"their shards' shares overlap (listed {finite[:8]}..., progressions {tails})")


def _resumed_state(dataset: Dataset, share: _Left) -> State:
    """A fresh state of ``dataset`` with ``share`` put into its holding stages and shards."""
    with PipelineIterator(dataset) as fresh:
        # The tree's own state, unsealed, and the fingerprint the iterator computes once:
        # sealing it here (a checksum) and fingerprinting the graph again would be wasted.
        root = fresh._root.state_dict()
        fingerprint = fresh._fingerprint()
    _resume_into(_chain(dataset)[1], root, share)
    return pipeline_state.seal(root, fingerprint)


def _resume_into(top: Dataset, state: State, share: _Left) -> None:
    stages, bottom = _stages(top)
    for depth, node in enumerate(stages):
        if isinstance(node, _HOLDING) != (depth in share.held):
            raise CheckpointError(f"elastic resume: replica pipelines differ at {_stage(node)}")
        if isinstance(node, ShuffleDataset):
            state[POSITIONS_KEY] = {"replay": 0, "numbers": []}  # dealt elements: by value
        state.update(share.held.get(depth, {}))
        if depth in share.epochs:
            state["epoch"] = share.epochs[depth]
        for _ in range(len(node.stages) if isinstance(node, FusedInlineDataset) else 1):
            state = state["input"]
    if share.unread is not None:
        state["position"] = share.unread.position
        state["input"] = share.unread.stream
        state[REDEAL_KEY] = share.unread.owner.to_state()
        return
    if share.epochs.get(len(stages)) is not None:
        state["epoch"] = share.epochs[len(stages)]
    for k, (source, left) in enumerate(zip(bottom._inputs, share.sources)):
        if left is None:
            state["inputs"][k] = None
        else:
            _resume_into(source, state["inputs"][k], left)
