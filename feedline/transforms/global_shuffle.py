"""``global_shuffle``: a uniformly random order of a whole random-access dataset.

As tf.data's ``Dataset.global_shuffle`` (2.15+): instead of sampling from a buffer, the
stage reads its input in a seeded permutation of the indices ``0 .. n-1``. The permutation is
never materialized: :class:`IndexShuffle` is a bijection computed position by position (a
Feistel network on the next power of four above ``n``, walking cycles back into range), so an
iterator's state is an epoch, the permutation's keys and a position -- a few dozen bytes
whatever the dataset's size -- and element ``i`` of the shuffled dataset is
``input[permutation(i)]``, so the output has random access too.

The input must have random access (:mod:`feedline.core.random_access`): put
``global_shuffle`` right after the source (and maps over it) and before any ``filter``,
``shuffle`` or ``interleave``. It must not be empty either: tf.data refuses an empty input
(``range(0)``, ``take(0)``, ``skip(-1)``, ``repeat(0)``), and so does this stage, with an
``InvalidArgumentError`` (a ``ValueError``).

With ``reshuffle_each_iteration`` each epoch has its own permutation: the epochs of a
``repeat`` and, as in tf.data, each new ``iter(ds)`` of the same dataset object
(:mod:`feedline.core.seed_epochs`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from feedline.core.constants import UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.errors import CheckpointError, InvalidArgumentError
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.random_access import (
    DerivedReader,
    RandomAccessReader,
    require_random_access,
)
from feedline.core.registry import operation
from feedline.core.seed_epochs import EpochCounter, restored_epoch, start_epoch
from feedline.core.traits import POSITIONAL
from feedline.core.unary import UnaryDataset
from feedline.core.validation import validate_seed

ROUNDS = 6
"""Feistel rounds: four make a pseudo-random permutation (Luby-Rackoff); two more mix
small domains better."""

_STAGE_SEED_TAG = 0x676C6F62  # "glob": seeds of this stage differ from shuffle()'s
_OPTIONS_SEED_TAG = 0x6F707473
_UINT64 = (1 << 64) - 1
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


PERMUTATION_BLOCK = 8192
"""Positions whose shuffled indices are computed together when read in order."""


class IndexShuffle:
    """A seeded bijection of ``[0, n)``, evaluated for any positions without a table.

    Args:
        n: Size of the domain.
        keys: One 64-bit key per Feistel round.

    Example:
        >>> perm = IndexShuffle(10, [1, 2, 3, 4, 5, 6])
        >>> out = perm(np.arange(10)).tolist()
        >>> sorted(out) == list(range(10)), out == perm(np.arange(10)).tolist()
        (True, True)
    """

    def __init__(self, n: int, keys: Sequence[int]) -> None:
        self.n = n
        bits = max(2, (max(n - 1, 1)).bit_length())
        bits += bits % 2  # two halves of equal width: the domain is 4**k >= n
        self._half = np.uint64(bits // 2)
        self._mask = np.uint64((1 << (bits // 2)) - 1)
        self._keys = [np.uint64(int(key) & _UINT64) for key in keys]

    def _round_function(self, right: np.ndarray, key: np.uint64) -> np.ndarray:
        # splitmix64's finalizer: every input bit affects every output bit.
        z = (right + key) * _GOLDEN
        z ^= z >> np.uint64(30)
        z *= _MIX_1
        z ^= z >> np.uint64(27)
        z *= _MIX_2
        z ^= z >> np.uint64(31)
        return z & self._mask

    def _feistel(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for key in self._keys:
            left, right = right, left ^ self._round_function(right, key)
        return (left << self._half) | right

    def __call__(self, positions: np.ndarray | Sequence[int]) -> np.ndarray:
        """The shuffled indices of ``positions`` (each in ``[0, n)``)."""
        x = np.asarray(positions, dtype=np.uint64)
        with np.errstate(over="ignore"):
            y = self._feistel(x)
            # The network permutes [0, 4**k); walking the cycle until it re-enters [0, n)
            # restricts it to a permutation of [0, n) (fewer than 4 steps on average).
            outside = y >= self.n
            while outside.any():
                y[outside] = self._feistel(y[outside])
                outside = y >= self.n
        return y.astype(np.int64)


@operation("global_shuffle")
class GlobalShuffleDataset(UnaryDataset):
    """The node of ``Dataset.global_shuffle``.

    Args:
        input_dataset: A dataset with random access.
        seed: Makes the order reproducible; ``None`` falls back to ``Options.seed``, then to
            fresh randomness (kept in checkpoints, so restoring is still exact).
        reshuffle_each_iteration: Whether each epoch (each epoch of a ``repeat``, each new
            ``iter(ds)``) gets a different permutation.
        name: Shown in errors and profiles.

    ``ds[i]`` reads epoch 0's permutation (a ``PipelineIterator(ds, epoch=e)`` reads
    epoch ``e``'s).

    Example:
        >>> import feedline as fl
        >>> ds = GlobalShuffleDataset(fl.Dataset.range(8), seed=3)
        >>> first, second = [[int(x) for x in ds] for _ in range(2)]
        >>> sorted(first) == sorted(second) == list(range(8)), first != second
        (True, True)
        >>> first == [int(ds[i]) for i in range(8)]
        True
    """

    # Its input is read by index: graph rewrites (map fusion, vectorization) must leave it
    # as written, or it could lose its random access.
    TRAITS = replace(POSITIONAL, random_access_from_input=True, keeps_input_as_written=True,
                     permutes_by_index=True)

    # Drawn anew for every dataset object; a checkpoint holds the keys themselves. The
    # epoch counter is where this object's iterators are, not what the pipeline is.
    _NOT_FINGERPRINTED = frozenset({"_unseeded_fixed_seed", "_epochs"})

    def __init__(self, input_dataset: Dataset, seed: int | None = None,
                 reshuffle_each_iteration: bool | None = True, name: str | None = None) -> None:
        super().__init__(input_dataset)
        require_random_access(input_dataset, "global_shuffle")
        if input_dataset.cardinality() == 0:
            raise _empty_input_error(0)
        self.seed = validate_seed(seed, "global_shuffle(seed)")
        self.reshuffle_each_iteration = reshuffle_each_iteration is not False
        self._unseeded_fixed_seed = secrets.randbits(64)
        self._epochs = EpochCounter()
        self.name = name or "global_shuffle"

    @property
    def _reads_vary_by_epoch(self) -> bool:
        """Each epoch has its own permutation (see :func:`reads_vary_by_epoch`)."""
        return self.reshuffle_each_iteration

    def cardinality(self) -> int:
        return self._inputs[0].cardinality()

    def _offers_random_access(self) -> bool:
        return True

    def _random_reader(self, ctx: IteratorContext) -> GlobalShuffleReader:
        reader = self._inputs[0]._random_reader(ctx)
        if self._inputs[0].cardinality() == UNKNOWN and len(reader) == 0:
            reader.close()  # an empty TFRecord file, say: known only once opened
            raise _empty_input_error(0)
        return GlobalShuffleReader(reader, self, ctx)

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return RandomAccessIterator(ctx, self._random_reader(ctx))

    def draws_seed(self, ctx: IteratorContext) -> bool:
        """Whether each epoch's permutation comes from fresh randomness (nothing seeds it)."""
        return (self.seed is None and ctx.options.seed is None
                and self.reshuffle_each_iteration)

    def round_keys(self, ctx: IteratorContext, epoch: int, drawn: int | None) -> list[int]:
        """The Feistel keys of ``epoch``'s permutation (from ``drawn`` when nothing seeds it)."""
        epoch_key = epoch if self.reshuffle_each_iteration else 0
        if self.seed is not None:
            entropy = [_STAGE_SEED_TAG, self.seed & _UINT64, epoch_key]
        elif ctx.options.seed is not None:
            entropy = [_OPTIONS_SEED_TAG, int(ctx.options.seed) & _UINT64, epoch_key]
        elif not self.reshuffle_each_iteration:
            entropy = [_STAGE_SEED_TAG, self._unseeded_fixed_seed, 0]
        else:
            entropy = [_STAGE_SEED_TAG, int(drawn or 0), epoch]
        words = np.random.SeedSequence(entropy).generate_state(ROUNDS, dtype=np.uint64)
        return [int(word) for word in words]


def _empty_input_error(n: int) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"global_shuffle needs a non-empty input, as tf.data's; this one has {n} elements "
        "(take(0), skip past the end or skip(-1), repeat(0), an empty source)")


class GlobalShuffleReader(DerivedReader):
    """Element ``i`` is input element ``permutation(i)`` of this reader's epoch."""

    def __init__(self, input_reader: RandomAccessReader, node: GlobalShuffleDataset,
                 ctx: IteratorContext) -> None:
        super().__init__(input_reader)
        self._node, self._ctx = node, ctx
        self._epoch = start_epoch(node, node._epochs, ctx)
        # Only an unseeded permutation needs its randomness in checkpoints: a seeded one is
        # recomputed from the seed and the epoch.
        self._drawn = secrets.randbits(64) if node.draws_seed(ctx) else None
        self._set_permutation()

    def _set_permutation(self) -> None:
        keys = self._node.round_keys(self._ctx, self._epoch, self._drawn)
        self._permutation = IndexShuffle(len(self.input), keys)
        self._cache: tuple[int, np.ndarray] = (0, np.empty(0, dtype=np.int64))

    def _permuted(self, indices: Sequence[int]) -> list[int]:
        """The shuffled indices; runs of consecutive positions (how iterators read) come
        from a block computed at once, so NumPy's per-call cost is shared by thousands."""
        if isinstance(indices, range) and indices.step == 1 and len(indices):
            start, stop = indices.start, indices.stop
            block_start, block = self._cache  # one tuple: threads may read at once
            if not (block_start <= start and stop <= block_start + len(block)):
                block_start = start - start % PERMUTATION_BLOCK
                block_stop = min(max(stop, block_start + PERMUTATION_BLOCK), len(self.input))
                block = self._permutation(np.arange(block_start, block_stop))
                self._cache = (block_start, block)  # only one block kept, 8 bytes a position
            offset = start - block_start
            return block[offset:offset + len(indices)].tolist()
        return self._permutation(indices).tolist()

    def get(self, index: int) -> Any:
        return self.input.get(self._permuted(range(index, index + 1))[0])

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        return self.input.get_many(self._permuted(indices))

    def state(self) -> State:
        own: State = {"epoch": self._epoch}
        if self._drawn is not None:
            own["drawn"] = str(self._drawn)  # JSON numbers lose 64-bit precision
        return {**own, **super().state()}

    def load_state(self, state: State) -> None:
        super().load_state(state)
        drawn = state.get("drawn")
        if self._node.draws_seed(self._ctx) != (drawn is not None):
            raise CheckpointError(
                "global_shuffle: the state was taken with another seeding (a seed given or "
                "not, in the stage or in Options)")
        self._drawn = None if drawn is None else int(drawn)
        # The next iterator of this node (the next epoch under repeat) continues from here.
        self._epoch = restored_epoch(self._node, self._node._epochs, self._ctx,
                                     int(state["epoch"]))
        self._set_permutation()


class RandomAccessIterator(DatasetIterator):
    """Reads a random-access dataset in index order, a small chunk at a time.

    Its state is the next index and what the reader's elements depend on (the permutation
    of a ``global_shuffle``): no element is ever stored. A chunk whose reading fails is
    read again element by element, so each error comes in its place.

    Example:
        >>> import feedline as fl
        >>> ds = GlobalShuffleDataset(fl.Dataset.range(100), seed=0).map(lambda x: x + 1)
        >>> it = iter(ds); _ = [next(it) for _ in range(10)]
        >>> state = it.state_dict(); rest = [int(x) for x in it]
        >>> it2 = iter(ds); it2.load_state_dict(state); rest == [int(x) for x in it2]
        True
    """

    OPERATION = "random_access_read"
    FIRST_CHUNK = 8
    MAX_CHUNK = 256
    TARGET_CHUNK_SECONDS = 0.0002
    """Chunks grow until reading one takes this long: cheap elements (records) are read
    hundreds at a time, expensive ones (decoded images, batches) one at a time."""

    def __init__(self, ctx: IteratorContext, reader: RandomAccessReader) -> None:
        super().__init__(ctx)
        self._reader = reader
        self._length = len(reader)
        self._position = 0  # the next index handed out
        self._chunk: list[Any] = []
        self._chunk_start = 0
        self._chunk_size = self.FIRST_CHUNK

    def __next__(self) -> Any:
        position = self._position
        offset = position - self._chunk_start
        if not 0 <= offset < len(self._chunk):
            if position >= self._length:
                raise StopIteration
            stop = min(position + self._chunk_size, self._length)
            started = time.perf_counter()
            try:
                self._chunk = self._reader.get_many(range(position, stop))
            except Exception:  # noqa: BLE001 - read one by one below, each error in place
                self._chunk = []
                self._position = position + 1
                return self._reader.get(position)
            per_element = (time.perf_counter() - started) / (stop - position)
            self._chunk_size = max(1, min(self.MAX_CHUNK, int(
                self.TARGET_CHUNK_SECONDS / max(per_element, 1e-9))))
            self._chunk_start, offset = position, 0
        self._position = position + 1
        return self._chunk[offset]

    def _get_state(self) -> State:
        return {"position": self._position, "reader": self._reader.state()}

    def _set_state(self, state: State) -> None:
        self._reader.load_state(state.get("reader", {}))
        self._position = int(state["position"])
        self._chunk, self._chunk_start = [], 0

    def _release(self) -> None:
        self._reader.close()
