"""Feeding JAX: per-process batches as global, sharded ``jax.Array`` s, transferred ahead.

In a multi-host JAX job each process feeds its local devices. :class:`Loader` reads this
process's share of the pipeline (``Dataset.distribute`` with ``jax.process_index()`` of
``jax.process_count()``), and turns each local batch into one *global* array per leaf with
``jax.make_array_from_process_local_data``: sharded over a :class:`jax.sharding.Mesh` by a
``PartitionSpec`` (by default the batch dimension split over every device), so a ``jax.jit``
step sees the global batch. The transfers of the next ``prefetch_to_device`` batches are
started before the step needs them (JAX copies asynchronously), and ``state_dict()`` is the
position of the batches the training loop has received, in-flight ones excluded (they are
kept in the state as data, see :mod:`feedline.adapters.epochs`). A state is loaded before
anything reads (``Loader(..., state=...)``, or ``load_state_dict`` before iterating);
resuming on another number of processes goes through :meth:`Loader.merge_states`.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any, Self

import numpy as np

from feedline.adapters.epochs import (
    DatasetOrFunction,
    EpochFeeder,
    State,
    merge_loader_states,
    share_of,
)
from feedline.core.dataset import Dataset
from feedline.core.input_context import InputContext
from feedline.core.options import AutoShardPolicy
from feedline.core.structure import map_structure

try:
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
except ImportError as error:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "feedline.jax needs JAX, an optional dependency of feedline: "
        "pip install 'feedline[jax]'") from error

__all__ = ["Loader", "batch_sharding", "input_context", "to_global_arrays"]

BATCH_AXIS = "batch"


def input_context() -> InputContext:
    """This process's input context: one input pipeline per JAX process, feeding every
    device of the job (``num_replicas_in_sync`` is ``jax.device_count()``).

    Example:
        >>> ctx = input_context()
        >>> ctx.input_pipeline_id == jax.process_index()
        True
    """
    return InputContext(jax.process_count(), jax.process_index(), jax.device_count())


def batch_sharding(mesh: Mesh | None = None, spec: PartitionSpec | None = None) -> NamedSharding:
    """A sharding of batches: by default the leading dimension split over all devices.

    Example:
        >>> batch_sharding().spec == PartitionSpec("batch")
        True
    """
    if mesh is None:
        mesh = Mesh(np.array(jax.devices()), (BATCH_AXIS,))
    if spec is None:
        spec = PartitionSpec(mesh.axis_names[0])
    return NamedSharding(mesh, spec)


def _local_devices_on_axis(sharding: NamedSharding) -> int:
    """How many ways this process's part of the batch dimension is split."""
    spec = sharding.spec
    if not spec or spec[0] is None:
        return 1
    axes = spec[0] if isinstance(spec[0], tuple) else (spec[0],)
    mesh = sharding.mesh
    ways = 1
    for axis in axes:
        ways *= mesh.shape[axis]
    return max(1, ways // jax.process_count())


def to_global_arrays(batch: Any, sharding: NamedSharding) -> Any:
    """Each numeric leaf of this process's ``batch`` as a global ``jax.Array``.

    ``bytes``/string leaves have no JAX type and stay NumPy arrays.

    Raises:
        ValueError: A leaf's batch dimension does not split over this process's devices.

    Example:
        >>> out = to_global_arrays({"x": np.arange(4.0)}, batch_sharding())
        >>> type(out["x"]).__name__, out["x"].shape
        ('ArrayImpl', (4,))
    """
    ways = _local_devices_on_axis(sharding)

    def convert(leaf: Any) -> Any:
        array = np.asarray(leaf)
        if array.dtype == object or array.dtype.kind in "SUV":
            return leaf
        if array.ndim == 0 and sharding.spec and sharding.spec[0] is not None:
            raise ValueError("a scalar leaf cannot be sharded along a batch dimension: batch "
                             "the dataset before feeding JAX")
        if array.ndim and array.shape[0] % ways:
            raise ValueError(
                f"a local batch of {array.shape[0]} rows does not split over this "
                f"process's {ways} devices on the batch axis: use a per-process batch size "
                f"that is a multiple of {ways} (InputContext.get_per_pipeline_batch_size), "
                "or batch(..., drop_remainder=True)")
        return jax.make_array_from_process_local_data(sharding, array)

    return map_structure(convert, batch)


class Loader:
    """Iterate a feedline pipeline as global, sharded ``jax.Array`` batches.

    Args:
        dataset: The whole pipeline (cut with ``Dataset.distribute`` for this process), or
            ``dataset_fn(input_context) -> Dataset`` building this process's share, batched
            by the per-process batch size.
        sharding: How batches are laid out (default :func:`batch_sharding`: the batch
            dimension over all devices).
        policy: The :class:`~feedline.AutoShardPolicy` for ``distribute``.
        prefetch_to_device: Batches whose transfer is started ahead of the step.
        context: The input context (default :func:`input_context`).
        state: A ``state_dict()`` to continue from (for another number of processes, one
            of :meth:`merge_states`), loaded here, before any thread or process starts.

    Example:
        >>> import feedline as fl
        >>> loader = Loader(fl.Dataset.range(8).map(lambda x: x * 1.5).batch(4))
        >>> [batch.tolist() for batch in loader]
        [[0.0, 1.5, 3.0, 4.5], [6.0, 7.5, 9.0, 10.5]]
    """

    def __init__(self, dataset: DatasetOrFunction, *, sharding: NamedSharding | None = None,
                 policy: AutoShardPolicy | None = None, prefetch_to_device: int = 2,
                 context: InputContext | None = None, state: State | None = None) -> None:
        if prefetch_to_device < 1:
            raise ValueError(f"prefetch_to_device must be >= 1, got {prefetch_to_device}")
        self.context = context or input_context()
        self.dataset = share_of(dataset, self.context, policy)
        self.sharding = sharding or batch_sharding()
        self.prefetch_to_device = prefetch_to_device
        self._feeder = EpochFeeder(self.dataset, self.context.num_input_pipelines)
        if state is not None:
            self.load_state_dict(state)

    @classmethod
    def merge_states(cls, states: list[State], num_replicas: int, dataset: DatasetOrFunction,
                     *, policy: AutoShardPolicy | None = None,
                     devices_per_process: int | None = None) -> list[State]:
        """Re-deal the loader states of all N processes of a checkpoint to ``num_replicas``.

        Every batch of the epoch that no process's loop received before the checkpoint is
        received once after it (see :func:`~feedline.adapters.epochs.merge_loader_states`:
        ``epoch`` is kept, ``steps`` becomes the most any process had taken).

        Args:
            states: Every process's ``state_dict()``, process ``i`` at place ``i``.
            num_replicas: The processes of the resumed job.
            dataset: What the loaders were given (a pipeline cut by ``distribute``, or a
                ``dataset_fn(input_context)``).
            policy: The loaders' ``policy``.
            devices_per_process: Devices each process feeds, for the contexts'
                ``num_replicas_in_sync`` (default: ``jax.local_device_count()``).

        Returns:
            One state per process of the resumed job: process ``j`` passes the ``j``-th
            as ``Loader(..., state=...)``.

        Example:
            >>> import feedline as fl
            >>> ds = fl.Dataset.range(8).batch(2)
            >>> old = [Loader(ds, context=fl.InputContext(2, i, 2)) for i in range(2)]
            >>> seen = [v for it in map(iter, old) for v in next(it).tolist()]
            >>> states = Loader.merge_states([l.state_dict() for l in old], 1, ds)
            >>> seen += [v for b in Loader(ds, state=states[0]) for v in b.tolist()]
            >>> sorted(seen)
            [0, 1, 2, 3, 4, 5, 6, 7]
        """
        devices = jax.local_device_count() if devices_per_process is None \
            else devices_per_process

        def share(num: int, index: int) -> Dataset:
            return share_of(dataset, InputContext(num, index, num * devices), policy)

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
        """Batches per epoch of this process's share (``TypeError`` when unknown)."""
        return len(self.dataset)

    def __iter__(self) -> Iterator[Any]:
        feeder = self._feeder
        loads = feeder.loads
        feeder.start()
        in_flight: collections.deque[Any] = collections.deque()
        ended = False
        try:
            while True:
                feeder.ensure_current(loads)
                while not ended and len(in_flight) < self.prefetch_to_device:
                    try:
                        batch = feeder.pull()
                    except StopIteration:
                        ended = True
                        break
                    # Dispatch is asynchronous: the copy runs while the step computes.
                    in_flight.append(to_global_arrays(batch, self.sharding))
                if not in_flight:
                    break
                head = in_flight.popleft()
                feeder.handed_out()
                yield head
        except GeneratorExit:
            return  # the loop stopped early: the epoch goes on at the next iteration
        feeder.end_epoch()

    def state_dict(self) -> State:
        """The position of the batches the training loop received (JSON-safe dict).

        Example:
            >>> import feedline as fl
            >>> loader = Loader(fl.Dataset.range(6).batch(2))
            >>> it = iter(loader); _ = next(it); state = loader.state_dict()
            >>> again = Loader(fl.Dataset.range(6).batch(2)); again.load_state_dict(state)
            >>> [b.tolist() for b in again]
            [[2, 3], [4, 5]]
        """
        return self._feeder.state_dict()

    def load_state_dict(self, state: State) -> None:
        """Continue where the loader that produced ``state`` was."""
        self._feeder.load_state_dict(state)

    def close(self) -> None:
        """Stop the pipeline's threads and processes. Idempotent."""
        self._feeder.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
