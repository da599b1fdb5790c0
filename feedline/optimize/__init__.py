"""Static graph rewrites applied before iteration, each in its own module, each switchable
through :class:`~feedline.core.options.OptimizationOptions`."""

from __future__ import annotations

from feedline.core.dataset import Dataset
from feedline.core.options import Options
from feedline.optimize.map_and_batch_fusion import fuse_map_and_batch
from feedline.optimize.map_fusion import fuse_maps
from feedline.optimize.map_vectorization import vectorize_maps


def optimize(dataset: Dataset, options: Options) -> Dataset:
    """The graph to run for ``dataset`` under ``options`` (the original graph is not changed).

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.range(3).map(lambda x: x + 1).filter(lambda x: x > 1).map(str)
        >>> type(optimize(ds, fl.Options())).__name__, [s for s in ds]
        ('FusedInlineDataset', [b'2', b'3'])
        >>> type(optimize(fl.Dataset.range(9).map(lambda x: x * 2).batch(4), fl.Options()))
        <class 'feedline.optimize.map_vectorization.VectorizedRangeDataset'>
    """
    if options.optimization.map_fusion:
        dataset = fuse_maps(dataset)
    if options.optimization.map_vectorization:
        dataset = vectorize_maps(dataset)
    if options.optimization.map_and_batch_fusion:
        dataset = fuse_map_and_batch(dataset)
    if options.optimization.inject_prefetch:
        from feedline.transforms.prefetch import PrefetchDataset

        if not isinstance(dataset, PrefetchDataset):
            from feedline.core.constants import AUTOTUNE

            dataset = PrefetchDataset(dataset, AUTOTUNE)
    return dataset
