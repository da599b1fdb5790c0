"""A state saved in ``n`` worker processes, continued in this process, exactly.

A ``multiprocess`` checkpoint holds each worker's position in its own shard, and the merge
position. Where the run that restores it may not start ``n`` processes (AUTOTUNE with a
smaller CPU budget, or ``AutotuneOptions(processes=False)``), :class:`ShardsInProcessIterator`
runs the ``n`` shards here instead, each restored from its worker's position, and takes their
elements in the order the workers' would have been merged: the same elements, in the same
order, as the processes would have given. Its own state is a ``multiprocess`` state of ``n``
workers, so a run that may start them goes back to processes from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError
from feedline.core.functions import renumber_error
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.execution.positions import PositionReader, PositionTracker


class ShardsInProcessIterator(DatasetIterator):
    """Continues, in this process, a ``multiprocess`` state of ``len(state["ended"])``
    workers over ``input_dataset`` (see the module doc).

    Example:
        >>> import feedline as fl
        >>> from feedline.core.iterator import IteratorContext
        >>> from feedline.placement.multiprocess import MultiprocessDataset
        >>> ds = fl.Dataset.range(10).batch(2)
        >>> it = MultiprocessDataset(ds, 2)._make_iterator(IteratorContext())
        >>> _ = next(it), next(it), next(it)
        >>> state = it.state_dict()
        >>> it.close()
        >>> here = ShardsInProcessIterator(IteratorContext(), ds, state)
        >>> [b.tolist() for b in here]
        [[6, 7], [8, 9]]
        >>> here.close()
    """

    OPERATION = "multiprocess"  # its state is one: processes take it back where allowed

    def __init__(self, ctx: IteratorContext, input_dataset: Dataset, state: State) -> None:
        super().__init__(ctx, [])
        self._input_dataset = input_dataset
        self._readers: list[PositionReader] = []
        # Per shard, the pipeline's index of the element a stage numbers i (errors name it,
        # as a worker's do).
        self._numbering: list[dict[str, Callable[[int], int]]] = []
        # What went out of each shard, and the snapshots a state may start from, as the
        # multiprocess stage keeps them for its workers.
        self._trackers: list[PositionTracker] = []
        self._set_state(state)

    @property
    def workers(self) -> int:
        """The worker processes whose shards this runs."""
        return len(self._readers)

    def __next__(self) -> Any:
        count = len(self._readers)
        while not all(self._ended):
            index = self._next_worker
            self._next_worker = (index + 1) % count
            if self._ended[index]:
                continue
            reader = self._readers[index]
            try:
                item, is_error, value, snapshot = reader.pull()
            except StopIteration:
                self._ended[index] = True
                continue
            tracker = self._trackers[index]
            tracker.add_snapshot(snapshot)
            tracker.handed_out(item)
            if is_error:
                reader.handed_out(item)
                if self._numbering[index]:
                    renumber_error(value, self._numbering[index], f"worker {index}'s shard")
                raise value
            return value
        raise StopIteration

    def _get_state(self) -> State:
        return {"epoch": self._epoch, "num_workers": len(self._readers),
                "next_worker": self._next_worker, "ended": list(self._ended),
                "workers": [tracker.state(reader.pending_errors(tracker))
                            for reader, tracker in zip(self._readers, self._trackers,
                                                       strict=True)]}

    def _set_state(self, state: State) -> None:
        from feedline.core.fingerprint import declared_types
        from feedline.core.state_codec import declared_types_in_use
        from feedline.distribute.autoshard import plan_sharding, worker_shard

        num_workers = int(state["num_workers"])
        positions = list(state["workers"])
        ended = [bool(e) for e in state["ended"]]
        if len(positions) != num_workers or len(ended) != num_workers \
                or any(p is None for p in positions):
            raise CheckpointError("a multiprocess state saved before every worker started "
                                  "has no positions to continue in this process from")
        for shard in self._inputs:
            shard.close()
        # Shards are inputs from the start: closed with this stage, even if a restore fails.
        self._inputs, self._readers, self._trackers, self._numbering = [], [], [], []
        plan = plan_sharding(self._input_dataset, num_workers)
        types = declared_types(self._input_dataset)
        from feedline.placement.multiprocess import shard_options

        # Each shard keeps its own order, as in a worker (deterministic=False is the merge's).
        options = shard_options(self._ctx.options)
        ctx = self._ctx if options is self._ctx.options \
            else dataclasses.replace(self._ctx, options=options)
        for index, position in enumerate(positions):
            graph, numbering = worker_shard(self._input_dataset, num_workers, index, plan)
            shard = graph._make_iterator(ctx)
            self._inputs.append(shard)
            with declared_types_in_use(types):
                shard.load_state_dict(position["input"])
            reader = PositionReader(shard.__next__, shard.state_dict, shard.replay_exact)
            reader.restore(position)
            self._readers.append(reader)
            self._trackers.append(PositionTracker(position))
            self._numbering.append(numbering)
        self._epoch = int(state["epoch"])
        self._ended = ended
        self._next_worker = int(state["next_worker"]) % num_workers
