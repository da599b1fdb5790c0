"""``Dataset.random``: an endless stream of pseudo-random int64 scalars.

Also home of the seeding helpers the random sources share: how a seed is chosen (the
stage's own, else ``Options.seed``, else one drawn when the dataset is built). Generator
states are saved with :mod:`feedline.transforms.shuffle`'s JSON helpers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from feedline.core.constants import INFINITE
from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.seeds import (
    fallback_seed,
    make_rng,
    resolve_seed,
    rng_from_json,
    rng_state_to_json,
)
from feedline.core.structure import TensorSpec
from feedline.core.validation import validate_seed

# Raw draws are made in blocks: one call per element costs far more than the draw itself.
_BLOCK = 64
_OPTIONS_TAG = 0x4A4D


class RandomDataset(Dataset):
    """The node of ``Dataset.random(seed)``: infinite int64 scalars, uniform over the int64 range.

    As in tf.data (``rerandomize_each_iteration=False``), every iterator of one dataset yields
    the same sequence; give different seeds for different streams. Without a seed, the
    pipeline's ``Options.seed`` is used, else a seed drawn once when the dataset is built.
    The values differ from TensorFlow's (a different generator); their distribution does not.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.random(seed=42).take(3)
        >>> [int(x) for x in ds] == [int(x) for x in ds]
        True
        >>> next(iter(ds)).dtype
        dtype('int64')
    """

    _CHEAP_TO_REREAD = True  # in memory: every worker process may read all of it

    # Drawn anew for every dataset object; a checkpoint holds the generator itself.
    _NOT_FINGERPRINTED = frozenset({"_fallback"})

    def __init__(self, seed: int | None = None) -> None:
        super().__init__()
        self.seed = validate_seed(seed, "random(seed)")
        self._fallback = fallback_seed()

    def _element_spec(self) -> TensorSpec:
        return TensorSpec((), np.dtype(np.int64))

    def cardinality(self) -> int:
        return INFINITE

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return RandomIterator(ctx, make_rng(*resolve_seed(self, self.seed, self._fallback, ctx,
                                                          _OPTIONS_TAG)))


class RandomIterator(DatasetIterator):
    """Draws raw 64-bit words in blocks; the state is the generator state before the current
    block plus the offset inside it, so a restore regenerates the block and skips."""

    def __init__(self, ctx: IteratorContext, rng: np.random.Generator) -> None:
        super().__init__(ctx)
        self._rng = rng
        self._block_start = rng_state_to_json(self._rng)
        self._block = self._draw()
        self._offset = 0

    def _draw(self) -> np.ndarray:
        return self._rng.bit_generator.random_raw(_BLOCK).view(np.int64)

    def __next__(self) -> Any:
        if self._offset == _BLOCK:
            self._block_start = rng_state_to_json(self._rng)
            self._block = self._draw()
            self._offset = 0
        value = self._block[self._offset]
        self._offset += 1
        return value

    def _get_state(self) -> State:
        return {"rng": self._block_start, "offset": self._offset}

    def _set_state(self, state: State) -> None:
        offset = state["offset"]
        if not isinstance(offset, int) or not 0 <= offset <= _BLOCK:
            raise CheckpointError(f"random(): offset {offset!r} is outside [0, {_BLOCK}]")
        self._rng = rng_from_json(state["rng"])
        self._block_start = state["rng"]
        self._block = self._draw()
        self._offset = offset
