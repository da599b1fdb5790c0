"""JAX feeding (optional extra ``feedline[jax]``): see :mod:`feedline.adapters.jax`.

Example:
    >>> import feedline as fl, feedline.jax as flj
    >>> [b.shape for b in flj.Loader(fl.Dataset.range(4).batch(2))]
    [(2,), (2,)]
"""

from feedline.adapters.jax import Loader, batch_sharding, input_context, to_global_arrays

__all__ = ["Loader", "batch_sharding", "input_context", "to_global_arrays"]
