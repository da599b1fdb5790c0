"""PyTorch feeding (optional extra ``feedline[torch]``): see :mod:`feedline.adapters.torch`.

Example:
    >>> import feedline as fl, feedline.torch as flt
    >>> [b.tolist() for b in flt.Loader(fl.Dataset.range(4).batch(2))]
    [[0, 1], [2, 3]]
"""

from feedline.adapters.torch import Loader, input_context, to_tensors

__all__ = ["Loader", "input_context", "to_tensors"]
