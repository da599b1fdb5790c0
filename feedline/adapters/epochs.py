"""What the PyTorch and JAX loaders share: the input context, epochs, and exact checkpoints.

A framework loader reads one input pipeline's share (``Dataset.distribute``) epoch after
epoch, and keeps a few batches *in flight* ahead of the training step (copying to the
accelerator while the step runs). :class:`EpochFeeder` is the host side of that: one
:class:`~feedline.PipelineIterator` per epoch (built with the epoch's number, so reshuffling
stages give each epoch its own order), and a checkpoint that is exactly the position of the
batches the training loop has *received*: the pipeline's state plus the in-flight batches
(pulled from the pipeline, not yet handed out), stored as data. Taking a checkpoint costs
nothing per step; the state grows by at most the in-flight depth's batches.
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

State = dict[str, Any]
STATE_FORMAT = 1

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
        """Continue from ``state``: the next batch is the first one not handed out there."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise CheckpointError(f"not a feedline loader state (format {STATE_FORMAT}): "
                                  f"{str(state)[:200]}")
        try:
            epoch, steps = int(state["epoch"]), int(state["steps"])
            pipeline = state["pipeline"]
            in_flight = state["in_flight"]
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(f"damaged loader state: {error!r}") from error
        saved_pipelines = state.get("input_pipelines", self.num_input_pipelines)
        if in_flight is not None and saved_pipelines != self.num_input_pipelines:
            raise CheckpointError(
                f"this loader state holds batches that were in flight on one of "
                f"{saved_pipelines} input pipelines; it cannot resume on "
                f"{self.num_input_pipelines}. Elastic resume needs a pipeline read by index "
                "(a random-access pipeline, e.g. with global_shuffle, under distribute), "
                "whose states hold no batch")
        restored = [] if in_flight is None else decode(in_flight, declared_types(self.dataset))
        self.close()
        self.epoch, self.steps = epoch, steps
        self._pending_pipeline = pipeline
        self._in_flight.clear()
        self._restored = collections.deque(restored)

    def close(self) -> None:
        """Stop the current epoch's pipeline (threads, processes). Idempotent."""
        iterator, self._iterator = self._iterator, None
        if iterator is not None:
            iterator.close()
