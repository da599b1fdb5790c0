"""Feeding PyTorch: tensors without copies, pinned memory, device prefetch, DDP input sharding.

:class:`Loader` turns a feedline pipeline into what a PyTorch training loop iterates:

* **its share of the data**: the job's rank and world size come from ``torch.distributed``
  when it is initialized, else from the launcher's ``RANK``/``WORLD_SIZE``, and the pipeline
  is cut with ``Dataset.distribute`` (or built by your ``dataset_fn(input_context)``);
* **tensors**: NumPy leaves become tensors with ``torch.from_numpy`` -- no copy -- except
  read-only arrays (worker processes' shared memory), which are copied once, because a
  training step writing into one in place would crash; ``bytes`` leaves stay NumPy;
* **device prefetch** (``device="cuda"``): batch ``k + 1`` is copied from pinned host memory on
  a side CUDA stream while the step runs on batch ``k``; the step's stream waits for the copy
  (an event per batch) and the tensors are recorded on it, so the caching allocator never
  reuses their memory early;
* **equal steps on every rank** (``even_steps``): when the shares' lengths are not known to
  be equal, every rank agrees on where the epoch ends with one tiny ``all_reduce(MIN)`` per
  step, so no rank waits forever in DDP's gradient all-reduce for a rank that ran out; the
  batches the longer shares had left are dropped and counted (:attr:`Loader.dropped`);
* **checkpoints**: ``state_dict()`` is the position of the batches the loop has received
  (epoch, step, the pipeline's position, the batches in flight), exact on restore. A state
  is loaded before anything reads (``Loader(..., state=...)``, or ``load_state_dict`` before
  iterating): no element is read from the start first. Resuming on another number of ranks
  goes through :meth:`Loader.merge_states` (every rank's state, re-dealt exactly); one
  rank's state of another count is refused by ``load_state_dict``.

Epochs: each ``for batch in loader`` runs to the end of the current epoch (continuing it if it
was interrupted, or restored mid-way) and then moves to the next epoch, whose reshuffling
stages draw a new order.
"""

from __future__ import annotations

import collections
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Self

import numpy as np

from feedline.adapters.epochs import (
    DatasetOrFunction,
    EpochFeeder,
    State,
    context_from_environment,
    merge_loader_states,
    share_of,
)
from feedline.core.dataset import Dataset
from feedline.core.input_context import InputContext
from feedline.core.options import AutoShardPolicy
from feedline.core.structure import map_structure
from feedline.distribute.distribute import equal_shares

try:
    import torch
except ImportError as error:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "feedline.torch needs PyTorch, an optional dependency of feedline: "
        "pip install 'feedline[torch]'") from error

__all__ = ["Loader", "input_context", "to_tensors"]


def input_context(group: Any = None) -> InputContext:
    """This process's input context: ``torch.distributed`` if initialized, else the
    ``RANK``/``WORLD_SIZE`` environment, else a single process.

    Example:
        >>> input_context().num_input_pipelines >= 1
        True
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        size = torch.distributed.get_world_size(group)
        return InputContext(size, torch.distributed.get_rank(group), size)
    return context_from_environment()


def _to_tensor(leaf: Any) -> Any:
    if isinstance(leaf, np.ndarray):
        if leaf.dtype == object or leaf.dtype.kind in "SUV":
            return leaf  # bytes and strings have no tensor type
        if not leaf.flags.writeable:
            leaf = leaf.copy()  # a step writing in place must never hit read-only memory
        return torch.from_numpy(leaf)
    if isinstance(leaf, np.generic) and leaf.dtype.kind in "biufc":
        return torch.from_numpy(np.asarray(leaf).copy())
    return leaf


def to_tensors(element: Any) -> Any:
    """``element`` with its numeric NumPy leaves as tensors (sharing memory when writable).

    Example:
        >>> import numpy as np
        >>> batch = {"x": np.arange(3.0), "name": np.array([b"a", b"b", b"c"], dtype=object)}
        >>> out = to_tensors(batch)
        >>> type(out["x"]).__name__, out["x"].tolist(), out["name"].tolist()
        ('Tensor', [0.0, 1.0, 2.0], [b'a', b'b', b'c'])
    """
    return map_structure(_to_tensor, element)


def _is_tensor(leaf: Any) -> bool:
    return isinstance(leaf, torch.Tensor)


class _CudaPrefetch:
    """Copies batches to the GPU on a side stream, ``depth`` batches ahead of the step."""

    def __init__(self, device: torch.device, pin_memory: bool) -> None:
        self._device = device
        self._pin = pin_memory
        self._stream = torch.cuda.Stream(device=device)

    def start_copy(self, batch: Any) -> tuple[Any, Any]:
        def copy(leaf: Any) -> Any:
            if not _is_tensor(leaf):
                return leaf
            if self._pin and not leaf.is_pinned():
                leaf = leaf.pin_memory()
            return leaf.to(self._device, non_blocking=True)

        with torch.cuda.stream(self._stream):
            on_device = map_structure(copy, batch)
            event = torch.cuda.Event()
            event.record(self._stream)
        return on_device, event

    def ready(self, on_device: Any, event: Any) -> Any:
        current = torch.cuda.current_stream(self._device)
        current.wait_event(event)

        def record(leaf: Any) -> Any:
            if _is_tensor(leaf) and leaf.is_cuda:
                # Allocated on the side stream, used on the step's stream: tell the caching
                # allocator, or it could hand the memory out again while the step runs.
                leaf.record_stream(current)
            return leaf

        return map_structure(record, on_device)


class Loader:
    """Iterate a feedline pipeline as PyTorch batches, sharded for this rank.

    Args:
        dataset: The whole pipeline (cut with ``Dataset.distribute`` for this rank), or a
            function ``dataset_fn(input_context) -> Dataset`` that builds this rank's share.
        policy: The :class:`~feedline.AutoShardPolicy` for ``distribute`` (``None``: the
            pipeline's options, ``AUTO`` by default).
        device: ``None``/``"cpu"``: tensors in host memory; ``"cuda"`` (this process's GPU:
            ``cuda:$LOCAL_RANK`` under a launcher, else the current device) or a CUDA
            device: batches copied ahead of the step (device prefetch).
        pin_memory: Copy through pinned host memory (default: when ``device`` is CUDA).
        prefetch_to_device: Batches in flight to the device ahead of the step (CUDA only).
        even_steps: Agree on the epoch's end across ranks each step (default: when there
            are several ranks, ``torch.distributed`` is initialized, and the shares are not
            known to be equal).
        context: The input context (default: :func:`input_context`).
        group: The ``torch.distributed`` process group (default: the world).
        state: A ``state_dict()`` to continue from (for another number of ranks, one of
            :meth:`merge_states`), loaded here, before any thread or process starts.

    Example:
        >>> import feedline as fl
        >>> loader = Loader(fl.Dataset.range(6).map(lambda x: x * 2).batch(4))
        >>> [batch.tolist() for batch in loader]
        [[0, 2, 4, 6], [8, 10]]
        >>> len(loader), loader.epoch
        (2, 1)
    """

    def __init__(self, dataset: DatasetOrFunction, *, policy: AutoShardPolicy | None = None,
                 device: str | torch.device | None = None, pin_memory: bool | None = None,
                 prefetch_to_device: int = 2, even_steps: bool | None = None,
                 context: InputContext | None = None, group: Any = None,
                 state: State | None = None) -> None:
        self.context = context or input_context(group)
        self.dataset = share_of(dataset, self.context, policy)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"Loader(device={str(self.device)!r}): CUDA is not available "
                               "in this PyTorch (no GPU, or a CPU-only build)")
        if self.device.type == "cuda" and self.device.index is None:
            # One process per GPU: the launcher's LOCAL_RANK names this process's GPU.
            local = os.environ.get("LOCAL_RANK")
            self.device = torch.device(
                "cuda", int(local) if local is not None else torch.cuda.current_device())
        self.pin_memory = self.device.type == "cuda" if pin_memory is None else pin_memory
        if self.pin_memory and not torch.cuda.is_available():
            raise RuntimeError("Loader(pin_memory=True) needs CUDA: pinned memory only "
                               "speeds up copies to a GPU")
        if prefetch_to_device < 1:
            raise ValueError(f"prefetch_to_device must be >= 1, got {prefetch_to_device}")
        self.prefetch_to_device = prefetch_to_device
        self._group = group
        distributed = (self.context.num_input_pipelines > 1 and torch.distributed.is_available()
                       and torch.distributed.is_initialized())
        if even_steps is None:
            # A dataset function builds shares this rank cannot compare with the others'.
            even_steps = distributed and not (
                isinstance(dataset, Dataset) and equal_shares(dataset, self.context, policy))
        elif even_steps and not distributed and self.context.num_input_pipelines > 1:
            raise RuntimeError("Loader(even_steps=True) needs torch.distributed initialized "
                               "(init_process_group) to agree on the end of each epoch")
        self.even_steps = bool(even_steps)
        self.dropped = 0
        self._feeder = EpochFeeder(self.dataset, self.context.num_input_pipelines)
        self._cuda = _CudaPrefetch(self.device, self.pin_memory) \
            if self.device.type == "cuda" else None
        if state is not None:
            self.load_state_dict(state)

    @classmethod
    def merge_states(cls, states: list[State], num_replicas: int, dataset: DatasetOrFunction,
                     *, policy: AutoShardPolicy | None = None) -> list[State]:
        """Re-deal the loader states of all N ranks of a checkpoint to ``num_replicas`` ranks.

        Every batch of the epoch that no rank received before the checkpoint is received
        once after it, by one of the ``num_replicas`` ranks (see
        :func:`~feedline.adapters.epochs.merge_loader_states`: ``epoch`` is kept, ``steps``
        becomes the most any rank had taken, ``dropped`` starts again at 0).

        Args:
            states: Every rank's ``state_dict()``, rank ``i`` at place ``i``.
            num_replicas: The ranks of the resumed job.
            dataset: What the loaders were given (a pipeline cut by ``distribute``, whose
                shares must be re-dealable: a FILE or DATA shard of a streaming pipeline or
                a pipeline read by index; or a ``dataset_fn(input_context)``).
            policy: The loaders' ``policy``.

        Returns:
            One state per rank of the resumed job: rank ``j`` passes the ``j``-th as
            ``Loader(..., state=...)``.

        Example:
            >>> import feedline as fl
            >>> def share(c):  # each rank's share of a streaming pipeline
            ...     return (fl.Dataset.range(12).shard(c.num_input_pipelines,
            ...             c.input_pipeline_id).shuffle(4, seed=0).batch(2))
            >>> def loader(n, i, state=None):
            ...     return Loader(share, context=fl.InputContext(n, i, n), state=state)
            >>> old = [loader(2, i) for i in range(2)]
            >>> seen = [v for it in map(iter, old) for v in next(it).tolist()]
            >>> states = Loader.merge_states([l.state_dict() for l in old], 3, share)
            >>> seen += [v for j in range(3) for b in loader(3, j, states[j]) for v in b.tolist()]
            >>> sorted(seen) == list(range(12))
            True
        """
        def share(num: int, index: int) -> Dataset:
            return share_of(dataset, InputContext(num, index, num), policy)

        return merge_loader_states(states, num_replicas, share)

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to (0-based)."""
        return self._feeder.epoch

    @property
    def step(self) -> int:
        """Batches handed out in the current epoch."""
        return self._feeder.steps

    def __len__(self) -> int:
        """Batches per epoch of this rank's share (``TypeError`` when unknown)."""
        return len(self.dataset)

    def _agree_on_end(self, has_batch: bool) -> bool:
        """Whether every rank still has a batch (one all-reduce of one integer)."""
        flag = torch.tensor([1 if has_batch else 0], dtype=torch.int32)
        backend = torch.distributed.get_backend(self._group)
        if backend == "nccl":
            flag = flag.cuda()
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN, group=self._group)
        return bool(flag.item())

    def _pull(self) -> Any | None:
        """The next host batch, or ``None`` where the epoch ends (for every rank)."""
        try:
            batch = self._feeder.pull()
        except StopIteration:
            batch = None
        if self.even_steps and not self._agree_on_end(batch is not None):
            if batch is not None:
                self._feeder.unpull()
                self.dropped += 1 + self._feeder.discard_rest()
            return None
        return batch

    def __iter__(self) -> Iterator[Any]:
        feeder = self._feeder
        loads = feeder.loads
        feeder.start()
        depth = self.prefetch_to_device if self._cuda is not None else 1
        in_flight: collections.deque[Any] = collections.deque()
        try:
            ended = False
            while True:
                feeder.ensure_current(loads)
                while not ended and len(in_flight) < depth:
                    batch = self._pull()
                    if batch is None:
                        ended = True
                        break
                    tensors = to_tensors(batch)
                    in_flight.append(self._cuda.start_copy(tensors)
                                     if self._cuda is not None else tensors)
                if not in_flight:
                    break
                head = in_flight.popleft()
                out = self._cuda.ready(*head) if self._cuda is not None else head
                feeder.handed_out()
                yield out
        except GeneratorExit:
            return  # the loop stopped early: the epoch goes on at the next iteration
        feeder.end_epoch()

    def state_dict(self) -> State:
        """The position of the batches the training loop received (JSON-safe dict).

        Example:
            >>> import feedline as fl
            >>> loader = Loader(fl.Dataset.range(10).batch(3))
            >>> it = iter(loader); _ = next(it); state = loader.state_dict()
            >>> again = Loader(fl.Dataset.range(10).batch(3)); again.load_state_dict(state)
            >>> [b.tolist() for b in again]
            [[3, 4, 5], [6, 7, 8], [9]]
        """
        return {**self._feeder.state_dict(), "dropped": self.dropped}

    def load_state_dict(self, state: State) -> None:
        """Continue where the loader that produced ``state`` was."""
        self._feeder.load_state_dict(state)
        self.dropped = int(state.get("dropped", 0))

    def close(self) -> None:
        """Stop the pipeline's threads and processes. Idempotent."""
        self._feeder.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        # At interpreter exit feedline's atexit hook has already closed every pipeline, and
        # module globals (``warnings`` among them) may be gone: nothing to do, nothing to say.
        # ``sys.is_finalizing`` is bound as a default because ``sys`` may be gone too.
        if _finalizing():
            return
        feeder = getattr(self, "_feeder", None)
        if feeder is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                feeder.close()
