"""What the PyTorch and JAX loaders share: the input context, epochs, and exact checkpoints.

A framework loader reads one input pipeline's share (``Dataset.distribute``) epoch after
epoch, and keeps a few batches *in flight* ahead of the training step (copying to the
accelerator while the step runs). :class:`EpochFeeder` is the host side of that: one
:class:`~feedline.PipelineIterator` per epoch (built with the epoch's number, so reshuffling
stages give each epoch its own order), and a checkpoint that is exactly the position of the
batches the training loop has *received*: the pipeline's state plus the in-flight batches
(pulled from the pipeline, not yet handed out), stored as data. Taking a checkpoint costs
nothing per step; the state grows by at most the in-flight depth's batches.

**Another replica count.** A loader state is one replica's. A pipeline read by index
(``distribute`` over a random-access pipeline) is rewound instead of keeping batches, and
its state is the same on every replica: it loads on any count. Any other state from N
replicas goes through :func:`merge_loader_states` (the adapters' ``Loader.merge_states``),
which re-deals the N states to M exactly (:func:`feedline.merge_states`); loading one
directly on another count is refused, never approximated.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable
from typing import Any

from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError
from feedline.core.fingerprint import declared_types
from feedline.core.input_context import InputContext
from feedline.core.options import AutoShardPolicy
from feedline.core.state_codec import decode, encode_elements
from feedline.pipeline import PipelineIterator
from feedline.resume.elastic import ReplicaPipeline, merge_states

State = dict[str, Any]
STATE_FORMAT = 1
ANY_COUNT_ROOT = "index_shard"
"""The root stage of pipeline states that restore on any replica count (read by index)."""

DatasetOrFunction = Dataset | Callable[[InputContext], Dataset]


def context_from_environment(environ: dict[str, str] | None = None) -> InputContext:
    """The input context the launcher's environment describes (``torchrun``, ``mpirun``...).

    ``RANK``/``WORLD_SIZE`` (or their ``OMPI_COMM_WORLD_*`` / ``PMI_*`` equivalents) name
    this process among the job's processes; each process is one input pipeline feeding one
    replica. Without them: a single process.

    Example:
        >>> context_from_environment({"RANK": "3", "WORLD_SIZE": "4"})
        InputContext(num_input_pipelines=4, input_pipeline_id=3, num_replicas_in_sync=4)
        >>> context_from_environment({}).num_input_pipelines
        1
    """
    env = os.environ if environ is None else environ
    for rank_key, size_key in (("RANK", "WORLD_SIZE"),
                               ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                               ("PMI_RANK", "PMI_SIZE")):
        if rank_key in env and size_key in env:
            try:
                rank, size = int(env[rank_key]), int(env[size_key])
            except ValueError:
                raise ValueError(f"{rank_key}={env[rank_key]!r} and {size_key}="
                                 f"{env[size_key]!r} must be integers") from None
            return InputContext(size, rank, size)
    return InputContext()


def share_of(dataset: DatasetOrFunction, context: InputContext,
             policy: AutoShardPolicy | None) -> Dataset:
    """This pipeline's share: ``dataset.distribute(context, policy)``, or what a
    ``dataset_fn(context)`` builds (it shards and batches itself, as with tf.distribute's
    ``distribute_datasets_from_function``).

    Example:
        >>> import feedline as fl
        >>> [int(x) for x in share_of(fl.Dataset.range(6), fl.InputContext(3, 2, 3), None)]
        [2, 5]
    """
    if isinstance(dataset, Dataset):
        return dataset.distribute(context, policy)
    if not callable(dataset):
        raise TypeError(f"expected a feedline.Dataset or a function of an InputContext "
                        f"returning one, got {type(dataset).__name__}")
    built = dataset(context)
    if not isinstance(built, Dataset):
        raise TypeError(f"the dataset function returned {type(built).__name__}, not a "
                        "feedline.Dataset")
    return built


class EpochFeeder:
    """Host batches of one pipeline, epoch after epoch, with in-flight batches tracked.

    ``pull()`` takes the next batch (``StopIteration`` at the end of the epoch) and counts it
    in flight until ``handed_out()``; ``state_dict()`` is the position of the batches handed
    out. Not thread-safe: one training loop drives it.

    Example:
        >>> import feedline as fl
        >>> feeder = EpochFeeder(fl.Dataset.range(5).batch(2))
        >>> feeder.start(); a, b = feeder.pull(), feeder.pull(); feeder.handed_out()
        >>> state = feeder.state_dict()          # after one batch handed out, one in flight
        >>> other = EpochFeeder(fl.Dataset.range(5).batch(2)); other.load_state_dict(state)
        >>> other.start(); [x.tolist() for x in (other.pull(), other.pull())]
        [[2, 3], [4]]
    """

    def __init__(self, dataset: Dataset, num_input_pipelines: int = 1) -> None:
        self.dataset = dataset
        self.num_input_pipelines = num_input_pipelines
        self.epoch = 0
        self.steps = 0  # batches handed out in this epoch
        self._iterator: PipelineIterator | None = None
        self._in_flight: collections.deque[Any] = collections.deque()
        self._restored: collections.deque[Any] = collections.deque()
        self._pending_pipeline: State | None = None
        self.loads = 0  # states loaded: a loop begun before the last load is stale

    @property
    def in_epoch(self) -> bool:
        """Whether an epoch has started and not ended."""
        return self._iterator is not None

    def start(self) -> None:
        """Start (or go on with) the current epoch.

        Batches still in flight from an interrupted loop (a ``break``, an error in the step)
        come first: the loop never received them.
        """
        if self._in_flight:
            self._restored.extendleft(reversed(self._in_flight))
            self._in_flight.clear()
        if self._iterator is None:
            iterator = PipelineIterator(self.dataset, epoch=self.epoch)
            if self._pending_pipeline is not None:
                try:
                    iterator.load_state_dict(self._pending_pipeline)
                except BaseException:
                    iterator.close()
                    raise
                self._pending_pipeline = None
            self._iterator = iterator

    def ensure_current(self, loads: int) -> None:
        """Refuse to go on with a loop begun when ``loads`` states had been loaded, if one
        was loaded since (the loop's batches in flight are from the old position).

        Raises:
            RuntimeError: A state was loaded since.
        """
        if self.loads != loads:
            raise RuntimeError("the loader loaded a state while this loop over it was under "
                               "way: start a new loop (for batch in loader) to continue from "
                               "the state")

    def pull(self) -> Any:
        """The next batch of the epoch (``StopIteration`` at its end)."""
        if self._restored:
            batch = self._restored.popleft()
        else:
            if self._iterator is None:
                raise RuntimeError("EpochFeeder.pull() before start()")
            batch = next(self._iterator)
        self._in_flight.append(batch)
        return batch

    def unpull(self) -> None:
        """Take back the batch just pulled (it will not be handed out)."""
        self._in_flight.pop()

    def discard_rest(self) -> int:
        """Drop the rest of the epoch (other ranks ended it); returns how many batches."""
        dropped = len(self._restored)
        self._restored.clear()
        if self._iterator is not None:
            for _ in self._iterator:
                dropped += 1
        return dropped

    def handed_out(self) -> None:
        """The oldest batch in flight reached the training loop."""
        self._in_flight.popleft()
        self.steps += 1

    def end_epoch(self) -> None:
        """Close this epoch's pipeline; the next ``start()`` begins the next epoch."""
        self.close()
        self.epoch += 1
        self.steps = 0
        self._in_flight.clear()
        self._restored.clear()

    def state_dict(self) -> State:
        """The position of the batches handed out: epoch, step, pipeline, in-flight batches.

        A pipeline read by index (``distribute`` on a random-access pipeline) is rewound
        past the batches in flight instead, so the state holds no batch and stays the same
        on every replica (it then restores on any number of them).
        """
        in_flight = list(self._in_flight)
        pipeline = (self._iterator.state_dict() if self._iterator is not None
                    else self._pending_pipeline)
        if in_flight and not self._restored and self._iterator is not None:
            rewound = self._iterator.rewound_state_dict(len(in_flight))
            if rewound is not None:
                pipeline, in_flight = rewound, []
        return {
            "format": STATE_FORMAT,
            "input_pipelines": self.num_input_pipelines,
            "epoch": self.epoch,
            "steps": self.steps,
            "pipeline": pipeline,
            "in_flight": encode_elements(list(self._restored) + in_flight)
            if (in_flight or self._restored) else None,
        }

    def load_state_dict(self, state: State) -> None:
        """Continue from ``state``: the next batch is the first one not handed out there.

        Raises:
            CheckpointError: ``state`` is damaged, or is one replica's state of a job with
                another number of input pipelines that only a re-deal of every replica's
                state can resume (:func:`merge_loader_states`).
        """
        epoch, steps, pipeline, in_flight = _fields(state)
        saved_pipelines = state.get("input_pipelines", self.num_input_pipelines)
        if saved_pipelines != self.num_input_pipelines and not _restores_on_any_count(state):
            # Loading one replica's state alone would drop what the others held or owned
            # (or read it twice): only the re-deal of all of them is exact.
            raise CheckpointError(
                f"this loader state is one of {saved_pipelines} input pipelines' states; it "
                f"cannot resume on {self.num_input_pipelines} by itself. Re-deal the states "
                f"of all {saved_pipelines} replicas with Loader.merge_states(states, "
                f"num_replicas={self.num_input_pipelines}, dataset) (or feedline.adapters."
                "epochs.merge_loader_states) and load the state it gives this replica")
        restored = [] if in_flight is None else decode(in_flight, declared_types(self.dataset))
        self.close()
        self.epoch, self.steps = epoch, steps
        self._pending_pipeline = pipeline
        self._in_flight.clear()
        self._restored = collections.deque(restored)
        self.loads += 1

    def close(self) -> None:
        """Stop the current epoch's pipeline (threads, processes). Idempotent."""
        iterator, self._iterator = self._iterator, None
        if iterator is not None:
            iterator.close()


def _fields(state: State) -> tuple[int, int, State | None, Any]:
    """A loader state's epoch, steps, pipeline state and in-flight batches (encoded)."""
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise CheckpointError(f"not a feedline loader state (format {STATE_FORMAT}): "
                              f"{str(state)[:200]}")
    try:
        return int(state["epoch"]), int(state["steps"]), state["pipeline"], state["in_flight"]
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(f"damaged loader state: {error!r}") from error


def _restores_on_any_count(state: State) -> bool:
    """Whether a loader state is the same on every replica: no batch kept, and a pipeline
    read by index (its position is global; see :mod:`feedline.distribute.index_shard`)."""
    pipeline = state.get("pipeline")
    root = pipeline.get("root") if isinstance(pipeline, dict) else None
    return state.get("in_flight") is None and isinstance(root, dict) and \
        root.get("type") == ANY_COUNT_ROOT


def merge_loader_states(states: list[State], num_replicas: int,
                        pipeline: ReplicaPipeline) -> list[State]:
    """Re-deal the loader states of every one of N replicas to ``num_replicas`` (M) replicas.

    Each replica's pipeline state is re-dealt by :func:`feedline.merge_states` (what its
    stages held, what its shard had not read); the batches it had pulled but not handed
    out (kept as data) go to the new replicas in turn, first in their queues. Together
    the M states hand out every batch of the epoch that no old replica handed out, once.
    A pipeline read by index needs no re-deal: its states, equal on every replica, are
    given to the M replicas as they are.

    ``epoch`` is kept (the replicas must be in the same one). ``steps`` counts the job's
    training steps in the epoch rather than one replica's batches: after a re-deal it is
    the most any old replica had handed out (every one of them under DDP's lockstep) and
    counts on from there; the new replicas' epochs have other lengths than the old ones'.

    Args:
        states: ``state_dict()`` of the loader of every replica, replica ``i`` at place
            ``i``, all taken at one checkpoint.
        num_replicas: M, the input pipelines of the resumed job.
        pipeline: ``pipeline(num_replicas, index)`` builds the share that replica
            ``index`` of ``num_replicas`` iterates (the loader's ``dataset``).

    Returns:
        M loader states; replica ``j``'s loader loads the ``j``-th.

    Raises:
        CheckpointError: A state is damaged, the states are not one checkpoint of N
            replicas (another count, other epochs, index positions that differ), or the
            pipeline holds what cannot be re-dealt exactly (the message names the stage).

    Example:
        >>> import feedline as fl
        >>> def share(n, i):
        ...     return fl.Dataset.range(12).shard(n, i).shuffle(3, seed=0).batch(2)
        >>> def rest(feeder):  # the epoch's batches from here on
        ...     while True:
        ...         try:
        ...             yield from feeder.pull().tolist()
        ...         except StopIteration:
        ...             return
        >>> feeders = [EpochFeeder(share(2, i), 2) for i in range(2)]
        >>> seen = []
        >>> for feeder in feeders:
        ...     feeder.start(); seen += feeder.pull().tolist(); feeder.handed_out()
        >>> merged = merge_loader_states([f.state_dict() for f in feeders], 3, share)
        >>> for feeder in feeders:
        ...     feeder.close()
        >>> for j, state in enumerate(merged):
        ...     feeder = EpochFeeder(share(3, j), 3)
        ...     feeder.load_state_dict(state); feeder.start()
        ...     seen += rest(feeder); feeder.close()
        >>> sorted(seen) == list(range(12)), merged[0]["steps"], merged[0]["input_pipelines"]
        (True, 1, 3)
    """
    if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
        raise ValueError(f"merge_loader_states(num_replicas) must be an int >= 1, got "
                         f"{num_replicas!r}")
    if not states:
        raise ValueError("merge_loader_states() needs the loader state of every replica, "
                         "got none")
    count = len(states)
    fields = [_fields(state) for state in states]
    for i, state in enumerate(states):
        if state.get("input_pipelines", count) != count:
            raise CheckpointError(
                f"merge_loader_states: state {i} is of a job with "
                f"{state.get('input_pipelines')} input pipelines, not one of these "
                f"{count}: pass the state of every replica of one checkpoint")
    epochs = sorted({epoch for epoch, _, _, _ in fields})
    if len(epochs) != 1:
        raise CheckpointError(
            f"merge_loader_states: the replicas' loaders were in different epochs {epochs}; "
            "checkpoint where every replica is in the same epoch (a training step)")
    epoch = epochs[0]
    steps = max(step for _, step, _, _ in fields)
    pipelines = []
    for i, (_, _, saved, _) in enumerate(fields):
        if saved is None:  # the replica had not begun the epoch: its start
            with PipelineIterator(pipeline(count, i), epoch=epoch) as fresh:
                saved = fresh.state_dict()
        pipelines.append(saved)
    if all(_restores_on_any_count({"pipeline": p, "in_flight": f[3]})
           for p, f in zip(pipelines, fields)):
        if any(p != pipelines[0] for p in pipelines):
            raise CheckpointError(
                "merge_loader_states: the replicas of a pipeline read by index were at "
                "different positions: not one checkpoint taken at one training step")
        return [_loader_state(num_replicas, epoch, steps, pipelines[0], [])
                for _ in range(num_replicas)]
    in_flight: list[Any] = []
    for i, (_, _, _, encoded) in enumerate(fields):
        if encoded is not None:
            in_flight += decode(encoded, declared_types(pipeline(count, i)))
    merged = merge_states(pipelines, num_replicas, pipeline)
    return [_loader_state(num_replicas, epoch, steps, merged[j], in_flight[j::num_replicas])
            for j in range(num_replicas)]


def _loader_state(input_pipelines: int, epoch: int, steps: int, pipeline: State,
                  in_flight: list[Any]) -> State:
    return {"format": STATE_FORMAT, "input_pipelines": input_pipelines, "epoch": epoch,
            "steps": steps, "pipeline": pipeline,
            "in_flight": encode_elements(in_flight) if in_flight else None}
