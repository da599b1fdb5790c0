"""Map and batch fusion: ``map(f).batch(n)`` runs as one stage when ``f`` has a batch form.

tf.data's ``map_and_batch_fusion``. A function offers a batch form through its
``feedline_batch_form`` attribute (feedline's own record decoders do, see
:mod:`feedline.transforms.map_and_batch`); the fused stage calls it once per batch on the
batch's raw inputs. Elements and errors are those of ``map`` then ``batch``; the fused
stage's checkpoints are its own (a position in the map's input), so a state restores with
the same options.
"""

from __future__ import annotations

from collections.abc import Callable

from feedline.core.constants import AUTOTUNE
from feedline.core.dataset import Dataset
from feedline.optimize.graph import rewrite_graph
from feedline.transforms.batch import BatchDataset
from feedline.transforms.map import MapDataset
from feedline.transforms.map_and_batch import MapAndBatchDataset, batch_form_of


def _parallelism(mapped: MapDataset, batched: BatchDataset) -> int | None:
    """Batches computed at once: the map's parallelism (or the batch's), None for inline."""
    calls = [c for c in (mapped.num_parallel_calls, batched.num_parallel_calls)
             if c is not None]
    if not calls:
        return None
    return AUTOTUNE if AUTOTUNE in calls else max(calls)


def fuse_map_and_batch(dataset: Dataset) -> Dataset:
    """Rewrite every ``batch`` directly over a ``map`` whose function has a batch form (and
    runs on threads) into a :class:`MapAndBatchDataset`.

    Example:
        >>> import numpy as np
        >>> import feedline as fl
        >>> class Square:
        ...     def __call__(self, x): return x * x
        ...     def feedline_batch_form(self, xs): return np.asarray(xs) ** 2
        >>> ds = fl.Dataset.range(5).map(Square()).batch(2)
        >>> fused = fuse_map_and_batch(ds)
        >>> type(fused).__name__, [b.tolist() for b in fused]
        ('MapAndBatchDataset', [[0, 1], [4, 9], [16]])
    """

    def replace(node: Dataset, rewrite: Callable[[Dataset], Dataset]) -> Dataset | None:
        if not isinstance(node, BatchDataset):
            return None
        mapped = node._inputs[0]
        if type(mapped) is not MapDataset or not mapped.unpack_tuples \
                or mapped.executor == "process":
            return None
        form = batch_form_of(mapped.map_func)
        if form is None:
            return None
        return MapAndBatchDataset(rewrite(mapped._inputs[0]), node, mapped, form,
                                  _parallelism(mapped, node))

    return rewrite_graph(dataset, replace)
