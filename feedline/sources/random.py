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
from feedline.core.registry import operation
from feedline.core.seed_epochs import EpochCounter, restored_epoch, start_epoch
from feedline.core.seeds import (
    fallback_seed,
    make_rng,
    resolve_seed,
    rng_from_json,
    rng_state_to_json,
)
from feedline.core.structure import TensorSpec
from feedline.core.traits import IN_MEMORY_SOURCE
from feedline.core.validation import validate_seed

# Raw draws are made in blocks: one call per element costs far more than the draw itself.
_BLOCK = 64
_OPTIONS_TAG = 0x4A4D
_EPOCH_TAG = 0xE90C  # separates the epoch from the seed words it is appended to


@operation("random")
class RandomDataset(Dataset):
    """The node of ``Dataset.random``: infinite int64 scalars, uniform over the int64 range.

    With ``rerandomize_each_iteration`` ``None`` or false (tf.data's default), every
    iterator of one dataset yields the same sequence; give different seeds for different
    streams. With it true, iteration ``e`` of this dataset object (its ``e``-th epoch under
    ``repeat``, or in a later ``iter(ds)``: :mod:`feedline.core.seed_epochs`) draws from a
    generator seeded with the seed and ``e``, as tf.data's: a new sequence each time, the
    same sequences on every run of the program. Without a seed, the pipeline's
    ``Options.seed`` is used, else a seed drawn once when the dataset is built. The values
    differ from TensorFlow's (a different generator); their distribution does not.

    Args:
        seed: Makes the sequence reproducible.
        rerandomize_each_iteration: Whether each iteration draws a new sequence.
        name: Shown in errors and profiles.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.random(seed=42).take(3)
        >>> [int(x) for x in ds] == [int(x) for x in ds]
        True
        >>> next(iter(ds)).dtype
        dtype('int64')
        >>> fresh = fl.Dataset.random(seed=42, rerandomize_each_iteration=True).take(3)
        >>> [int(x) for x in fresh] == [int(x) for x in fresh]
        False
    """

    TRAITS = IN_MEMORY_SOURCE  # every worker process may read all of it

    # Drawn anew for every dataset object; a checkpoint holds the generator itself. The
    # epoch counter is where this object's iterators are, not what the pipeline is. Whether
    # it rerandomizes is checked by the state itself (it has an epoch or not), which keeps
    # the fingerprints of pipelines saved before the argument existed.
    _NOT_FINGERPRINTED = frozenset({"_fallback", "_epochs", "_rerandomize"})

    def __init__(self, seed: int | None = None, rerandomize_each_iteration: bool | None = None,
                 name: str | None = None) -> None:
        super().__init__()
        self.seed = validate_seed(seed, "random(seed)")
        self._fallback = fallback_seed()
        # tf.data treats None as False: the same sequence every iteration.
        self._rerandomize = bool(rerandomize_each_iteration)
        self._epochs = EpochCounter()
        self.name = name

    @property
    def rerandomize_each_iteration(self) -> bool:
        """Whether each iteration draws a new sequence."""
        return self._rerandomize

    def _element_spec(self) -> TensorSpec:
        return TensorSpec((), np.dtype(np.int64))

    def cardinality(self) -> int:
        return INFINITE

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        seed_words = resolve_seed(self, self.seed, self._fallback, ctx, _OPTIONS_TAG)
        epoch = None
        if self._rerandomize:
            epoch = start_epoch(self, self._epochs, ctx)
            seed_words = [*seed_words, _EPOCH_TAG, epoch]
        return RandomIterator(ctx, make_rng(*seed_words), self, epoch)


class RandomIterator(DatasetIterator):
    """Draws raw 64-bit words in blocks; the state is the generator state before the current
    block plus the offset inside it, so a restore regenerates the block and skips, and the
    epoch when the node rerandomizes each iteration (``None`` otherwise)."""

    def __init__(self, ctx: IteratorContext, rng: np.random.Generator,
                 node: RandomDataset | None = None, epoch: int | None = None) -> None:
        super().__init__(ctx)
        self._node = node
        self._epoch = epoch
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
        state: State = {"rng": self._block_start, "offset": self._offset}
        if self._epoch is not None:
            state["epoch"] = self._epoch
        return state

    def _set_state(self, state: State) -> None:
        offset = state["offset"]
        if not isinstance(offset, int) or not 0 <= offset <= _BLOCK:
            raise CheckpointError(f"random(): offset {offset!r} is outside [0, {_BLOCK}]")
        epoch = state.get("epoch")
        if (epoch is None) != (self._epoch is None):
            raise CheckpointError(
                "random(): the state was saved with rerandomize_each_iteration="
                f"{epoch is not None}, this pipeline has {self._epoch is not None}")
        if epoch is not None and self._node is not None:
            # The next iterator of this node (the next epoch under repeat) continues from here.
            self._epoch = restored_epoch(self._node, self._node._epochs, self._ctx, epoch)
        self._rng = rng_from_json(state["rng"])
        self._block_start = state["rng"]
        self._block = self._draw()
        self._offset = offset
